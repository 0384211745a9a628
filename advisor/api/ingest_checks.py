"""The checks a pushed NodeSnapshot passes before it may change the state, with no state or app needed.

Shared by the ingest route (advisor/api/routes/telemetry.py) and the ingest worker processes
(advisor/api/transport/worker.py), so a snapshot is refused with the same answer wherever it arrives. Light on imports
on purpose: a worker starts with this, not with the app (no models, no store).
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
    """The snapshot of a pushed body when it may be taken, else why not: 401 without the token, 422 (the documented
    shape: a list of `{loc, msg, type}`) for a body that is not a valid snapshot, 403 for a snapshot of another node
    than `node` (the node the sender's credential speaks for, `advisor.api.node_auth`; given, it replaces the token
    check). Needs no state: the ingest workers run it (advisor/api/transport/worker.py) as the service does."""
    problem = token_problem(settings, authorization) if node is None else None
    if problem is not None:
        return Refusal(status.HTTP_401_UNAUTHORIZED, {"detail": problem}, None)
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


def answer(code: int, payload: dict[str, Any]) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The response headers and JSON body of an ingest answer, as the fast path and the ingest workers send it."""
    raw = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    if code == status.HTTP_401_UNAUTHORIZED:
        headers.append((b"www-authenticate", b"Bearer"))
    return headers, raw
