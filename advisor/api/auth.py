"""Who may write: the bearer-token rule of the write routes, kept apart from the app so the ingest workers apply it
too (advisor/api/ingest_worker.py)."""

from __future__ import annotations

import secrets

from advisor.settings import AdvisorSettings


def token_problem(settings: AdvisorSettings, authorization: str | None) -> str | None:
    """Why `authorization` may not write, or None when it may: it carries the configured bearer token, or no token
    is configured and unauthenticated writes are explicitly allowed."""
    expected = settings.api_token
    if not expected:
        if settings.allow_unauthenticated_writes:
            return None
        return (
            "Authorization: this advisor has no API token configured (GPUADVISOR_API_TOKEN), so it takes no writes; "
            "configure one (or GPUADVISOR_ALLOW_UNAUTHENTICATED_WRITES=true on a test stack)"
        )
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), expected.encode()):
        return "Authorization: a valid `Bearer` token (GPUADVISOR_API_TOKEN) is required"
    return None
