"""Who may write: the bearer-token rule of the write routes, kept apart from the app so the ingest workers apply it
too (advisor/api/transport/worker.py).

Three kinds of write need three credentials (issue 40): pushing telemetry (every collector holds that one, on every
node), training models and submitting trial runs (which run an image of the caller's choice as a Job). A token that
leaks from one node must not let its holder train or run anything, so `GPUADVISOR_TRAINING_TOKEN` and
`GPUADVISOR_TRIALRUN_TOKEN`, when set, are the only tokens their routes take; unset, the route takes the shared
`GPUADVISOR_API_TOKEN` (one token for a test stack).
"""

from __future__ import annotations

import secrets
from enum import StrEnum

from advisor.settings import AdvisorSettings


class WriteScope(StrEnum):
    """What a write does, and so which token it needs."""

    TELEMETRY = "telemetry"
    TRAINING = "training"
    TRIALRUNS = "trialruns"


def expected_token(settings: AdvisorSettings, scope: WriteScope) -> tuple[str | None, str]:
    """The token that `scope`'s writes need (None: none configured) and the setting it comes from."""
    if scope is WriteScope.TRAINING and settings.training_token:
        return settings.training_token, "GPUADVISOR_TRAINING_TOKEN"
    if scope is WriteScope.TRIALRUNS and settings.trialrun_token:
        return settings.trialrun_token, "GPUADVISOR_TRIALRUN_TOKEN"
    return settings.api_token, "GPUADVISOR_API_TOKEN"


def token_problem(
    settings: AdvisorSettings, authorization: str | None, scope: WriteScope = WriteScope.TELEMETRY
) -> str | None:
    """Why `authorization` may not write to `scope`, or None when it may: it carries the token `scope` needs
    (`expected_token`), or no token is configured for it and unauthenticated writes are explicitly allowed."""
    expected, setting = expected_token(settings, scope)
    if not expected:
        if settings.allow_unauthenticated_writes:
            return None
        return (
            f"Authorization: this advisor has no API token configured ({setting}), so it takes no writes; "
            "configure one (or GPUADVISOR_ALLOW_UNAUTHENTICATED_WRITES=true on a test stack)"
        )
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), expected.encode()):
        return f"Authorization: a valid `Bearer` token ({setting}) is required for {scope} writes"
    return None
