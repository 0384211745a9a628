"""The checks a pushed NodeSnapshot passes before it may change the state, with no state or app needed.

Shared by the ingest route (advisor/api/routes/telemetry.py), the ingest worker processes (the token and the body's
size, advisor/api/transport/worker.py) and the state-owning process that applies what the workers forward (the body,
advisor/api/transport/steering.py), so a snapshot is refused with the same answer wherever it arrives, and validated
once. Light on imports on purpose: a worker starts with this, not with the app (no models, no store).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from starlette import status

from advisor.api.auth import token_problem
from advisor.api.errors import MAX_ERRORS, BodyError, field_error, parse_json, pydantic_errors
from advisor.settings import AdvisorSettings
from collector.snapshot import NodeSnapshot

# The GPU fields without a range in the schema, where a non-finite number would otherwise be taken.
_UNBOUNDED_FLOATS = ("power_watts", "temperature_celsius", "energy_joules_total")

PATH = "/v1/telemetry"
# Far above any real node (16 GPUs today); bounds the per-node topology and GPU-set search a snapshot can ask for.
MAX_GPUS_PER_NODE = 64
# A 16-GPU node with 256 processes is ~80 KB of JSON; anything far larger is not a snapshot.
MAX_BODY_BYTES = 4 * 1024 * 1024
TOO_LARGE = {"detail": f"body: {PATH} takes at most {MAX_BODY_BYTES} bytes"}


def _strict_errors(body: bytes) -> list[dict[str, Any]]:
    """What the strict parser finds wrong with a body (invalid UTF-8, a non-finite number anywhere, even in a field
    the schema ignores), naming where; the fast parser below knows only byte positions, and takes `NaN`."""
    try:
        parse_json(body)
    except BodyError as bad:
        return [bad.as_error()]
    return []


def _suspect(body: bytes) -> bool:
    """Whether a body that validated may still hold a `NaN`, an `Infinity`, an unpaired surrogate escape or invalid
    UTF-8 in a field the schema ignores: a few microseconds (a regular expression for overflowing exponents would cost
    more than the ingest, and a `1e400` there is never read; in the fields that are read, `_snapshot_errors` finds
    it)."""
    if b"NaN" in body or b"Infinity" in body or b"\\ud" in body or b"\\uD" in body:
        return True
    if body.isascii():
        return False
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _parse_errors(body: bytes, e: ValidationError) -> list[dict[str, Any]]:
    """The errors of a body that failed to validate: the root cause when it is not strict JSON, else pydantic's."""
    return _strict_errors(body) or pydantic_errors(e.errors(), ("body",))


def _snapshot_errors(snapshot: NodeSnapshot, now_seconds: float, max_skew_seconds: float) -> list[dict[str, Any]]:
    """What the schema cannot say: too many GPUs, an index twice, a non-finite reading, a timestamp from the future."""
    errors: list[dict[str, Any]] = []
    if len(snapshot.gpus) > MAX_GPUS_PER_NODE:
        errors.append(
            field_error(("body", "gpus"), f"{len(snapshot.gpus)} GPUs in one snapshot; at most {MAX_GPUS_PER_NODE}")
        )
    seen: set[int] = set()
    for pos, gpu in enumerate(snapshot.gpus):
        if gpu.index in seen:
            errors.append(field_error(("body", "gpus", pos, "index"), f"GPU index {gpu.index} appears twice"))
        seen.add(gpu.index)
        for name in _UNBOUNDED_FLOATS:
            value = getattr(gpu, name)
            if value is not None and not math.isfinite(value):
                errors.append(field_error(("body", "gpus", pos, name), "must be a finite number", "finite_number"))
    ahead = snapshot.timestamp.timestamp() - now_seconds
    if ahead > max_skew_seconds:
        errors.append(
            field_error(
                ("body", "timestamp"),
                f"{ahead:.0f} s ahead of this advisor's clock; at most {max_skew_seconds:.0f} s of skew is accepted "
                "(check the node's clock)",
            )
        )
    return errors


@dataclass(frozen=True, slots=True)
class Refusal:
    """A pushed snapshot not taken: the HTTP status, its JSON payload, and the `snapshots` metric's result to count
    (None: not counted, a request without the token)."""

    status_code: int
    payload: dict[str, Any]
    counted_as: str | None


def check_snapshot(
    settings: AdvisorSettings, body: bytes, authorization: str | None, now_seconds: float, *, node: str | None = None
) -> NodeSnapshot | Refusal:
    """The snapshot of a pushed body when it may be taken, else why not: 401 without the token, else what
    `check_body` says. `node` is the node the sender's credential speaks for (`advisor.api.node_auth`); given, it
    replaces the token check."""
    refusal = token_refusal(settings, authorization) if node is None else None
    return refusal if refusal is not None else check_body(settings, body, now_seconds, node=node)


def check_body(
    settings: AdvisorSettings, body: bytes, now_seconds: float, *, node: str | None = None
) -> NodeSnapshot | Refusal:
    """The snapshot of a body whose sender may push, else why not: 422 (the documented shape: a list of `{loc, msg,
    type}`) for a body that is not a valid snapshot, 403 for a snapshot of another node than `node`. Needs no state:
    the state-owning process runs it on every snapshot an ingest worker forwards (whose token the worker checked,
    advisor/api/transport/worker.py), as the ingest route does on the others, so each snapshot is validated once."""
    try:
        snapshot = NodeSnapshot.model_validate_json(body)
    except ValidationError as e:
        return Refusal(status.HTTP_422_UNPROCESSABLE_CONTENT, {"detail": _parse_errors(body, e)}, "invalid")
    if _suspect(body) and (strict := _strict_errors(body)):
        # rare: a NaN, an Infinity or invalid UTF-8 where the schema ignores the field (the fast parser skips it)
        return Refusal(status.HTTP_422_UNPROCESSABLE_CONTENT, {"detail": strict}, "invalid")
    if node is not None and snapshot.node != node:
        why = f"node: this credential pushes for node {node!r} only, not {snapshot.node!r}"
        return Refusal(status.HTTP_403_FORBIDDEN, {"detail": why}, "foreign_node")
    errors = _snapshot_errors(snapshot, now_seconds, settings.max_clock_skew_seconds)
    if errors:
        future = any(e["loc"] == ["body", "timestamp"] for e in errors)
        detail = errors[:MAX_ERRORS]
        return Refusal(status.HTTP_422_UNPROCESSABLE_CONTENT, {"detail": detail}, "future" if future else "invalid")
    return snapshot


def token_refusal(settings: AdvisorSettings, authorization: str | None) -> Refusal | None:
    """401 for a push without the service's bearer token (none when writes are open): what an ingest worker checks
    before it forwards a body to the state-owning process."""
    problem = token_problem(settings, authorization)
    return None if problem is None else Refusal(status.HTTP_401_UNAUTHORIZED, {"detail": problem}, None)


def answer(code: int, payload: dict[str, Any]) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The response headers and JSON body of an ingest answer, as the fast path and the ingest workers send it."""
    raw = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    if code == status.HTTP_401_UNAUTHORIZED:
        headers.append((b"www-authenticate", b"Bearer"))
    return headers, raw
