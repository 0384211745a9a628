"""NodeSnapshot ingest from the collectors (bearer token). Kept cheap: validate, rebuild one node, answer.

Every collector pushes every few seconds to every replica, so this is the advisor's hottest route by far
(docs/design.md §5: 1,000/s per replica). `IngestFastPath` serves it in front of FastAPI's routing and dependency
machinery — which cost more than the ingest itself — with the same `ingest_body` logic the documented route uses.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from fastapi import APIRouter, Header, Request, status
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from advisor.api.context import AppContext
from advisor.api.deps import Ctx, token_problem
from advisor.api.errors import (
    ERROR_RESPONSES,
    MAX_ERRORS,
    BodyError,
    ErrorOut,
    StrictJsonRoute,
    field_error,
    parse_json,
    pydantic_errors,
)
from advisor.api.schemas import TelemetryAccepted
from collector.snapshot import NodeSnapshot

router = APIRouter(prefix="/v1", tags=["telemetry"], route_class=StrictJsonRoute, responses=ERROR_RESPONSES)
# The GPU fields without a range in the schema, where a non-finite number would otherwise be taken.
_UNBOUNDED_FLOATS = ("power_watts", "temperature_celsius", "energy_joules_total")

PATH = "/v1/telemetry"
# Far above any real node (16 GPUs today); bounds the per-node topology and GPU-set search a snapshot can ask for.
MAX_GPUS_PER_NODE = 64
# A 16-GPU node with 256 processes is ~80 KB of JSON; anything far larger is not a snapshot.
MAX_BODY_BYTES = 4 * 1024 * 1024


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


def ingest_body(ctx: AppContext, body: bytes, authorization: str | None) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON payload) for one pushed snapshot: 202 taken (or dropped as older), 401, or 422 (the
    documented shape: a list of `{loc, msg, type}`)."""
    problem = token_problem(ctx.settings, authorization)
    if problem is not None:
        return status.HTTP_401_UNAUTHORIZED, {"detail": problem}
    try:
        snapshot = NodeSnapshot.model_validate_json(body)
    except ValidationError as e:
        ctx.metrics.snapshots.labels("invalid").inc()
        return status.HTTP_422_UNPROCESSABLE_CONTENT, {"detail": _parse_errors(body, e)}
    if _suspect(body) and (strict := _strict_errors(body)):
        # rare: a NaN, an Infinity or invalid UTF-8 where the schema ignores the field (the fast parser skips it)
        ctx.metrics.snapshots.labels("invalid").inc()
        return status.HTTP_422_UNPROCESSABLE_CONTENT, {"detail": strict}
    # Wall time, not the state's clock (which tests and the simulator may set to anything): a timestamp is a date.
    errors = _snapshot_errors(snapshot, time.time(), ctx.settings.max_clock_skew_seconds)
    if errors:
        future = any(e["loc"] == ["body", "timestamp"] for e in errors)
        ctx.metrics.snapshots.labels("future" if future else "invalid").inc()
        return status.HTTP_422_UNPROCESSABLE_CONTENT, {"detail": errors[:MAX_ERRORS]}
    accepted = ctx.state.ingest(snapshot, body)
    ctx.metrics.snapshots.labels("accepted" if accepted else "out_of_order").inc()
    reply = TelemetryAccepted(
        node=snapshot.node,
        accepted=accepted,
        reason="" if accepted else "older than the snapshot already held for this node",
    )
    return status.HTTP_202_ACCEPTED, reply.model_dump()


@router.post(
    "/telemetry",
    response_model=TelemetryAccepted,
    status_code=status.HTTP_202_ACCEPTED,
    responses={
        **ERROR_RESPONSES,
        401: {"model": ErrorOut, "description": "missing or wrong bearer token, or none configured"},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NodeSnapshot"}}},
        }
    },
)
async def telemetry(
    request: Request,
    ctx: Ctx,
    authorization: str | None = Header(default=None, description="`Bearer <GPUADVISOR_API_TOKEN>`"),
) -> JSONResponse:
    """Take one node's snapshot (docs/design.md §3); an older snapshot than the one held (by its timestamp) is
    dropped, not an error. Refused (422): duplicate GPU indices, non-finite readings, a timestamp more than
    `GPUADVISOR_MAX_CLOCK_SKEW_SECONDS` ahead of this advisor's clock. Served by `IngestFastPath` in the running
    service; this route documents it and serves apps mounted without the fast path."""
    code, payload = ingest_body(ctx, await request.body(), authorization)
    headers = {"WWW-Authenticate": "Bearer"} if code == status.HTTP_401_UNAUTHORIZED else None
    return JSONResponse(payload, status_code=code, headers=headers)


class IngestFastPath:
    """ASGI middleware answering `POST /v1/telemetry` itself; every other request goes on to the app."""

    def __init__(self, app: ASGIApp, *, ctx: AppContext) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        body = bytearray()
        while True:
            message: Message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > MAX_BODY_BYTES:
                code, payload = 413, {"detail": f"body: {PATH} takes at most {MAX_BODY_BYTES} bytes"}
                break
            if not message.get("more_body", False):
                authorization = None
                for name, value in scope["headers"]:
                    if name == b"authorization":
                        authorization = value.decode("latin-1")
                code, payload = ingest_body(self.ctx, bytes(body), authorization)
                break
        raw = json.dumps(payload).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
        if code == status.HTTP_401_UNAUTHORIZED:
            headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": code, "headers": headers})
        await send({"type": "http.response.body", "body": raw})
        self.ctx.metrics.request_duration.labels(PATH, "POST", str(code)).observe(time.perf_counter() - start)
