"""NodeSnapshot ingest from the collectors (bearer token). Kept cheap: validate, rebuild one node, answer.

Every collector pushes every few seconds to every replica, so this is the advisor's hottest route by far
(docs/design.md §5: 1,000/s per replica). `IngestFastPath` serves it in front of FastAPI's routing and dependency
machinery — which cost more than the ingest itself — with the same `ingest_body` logic the documented route uses.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Header, Request, status
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from advisor.api.auth import token_problem
from advisor.api.context import AppContext
from advisor.api.deps import Ctx
from advisor.api.errors import ERROR_RESPONSES, ErrorOut, StrictJsonRoute
from advisor.api.ingest_checks import MAX_BODY_BYTES, PATH, TOO_LARGE, Refusal, answer, check_snapshot
from advisor.api.node_auth import NodeCredentials, ReviewUnavailableError, bearer
from advisor.api.schemas import TelemetryAccepted
from collector.snapshot import NodeSnapshot

__all__ = ["MAX_BODY_BYTES", "PATH", "IngestFastPath", "ingest_body", "router", "take_snapshot"]

NOT_A_COLLECTOR = "Authorization: a collector's own ServiceAccount token (GPUADVISOR_TELEMETRY_AUTH=serviceaccount)"

router = APIRouter(prefix="/v1", tags=["telemetry"], route_class=StrictJsonRoute, responses=ERROR_RESPONSES)


def take_snapshot(ctx: AppContext, snapshot: NodeSnapshot, body: bytes) -> tuple[int, dict[str, Any]]:
    """Apply a checked snapshot to the state and count it: 202, taken or dropped as older than the one held (judged
    by its timestamp, capped at this replica's wall clock now: `ClusterState.ingest`)."""
    accepted = ctx.state.ingest(snapshot, body, wall_seconds=time.time())
    ctx.metrics.snapshots.labels("accepted" if accepted else "out_of_order").inc()
    reply = TelemetryAccepted(
        node=snapshot.node,
        accepted=accepted,
        reason="" if accepted else "older than the snapshot already held for this node",
    )
    return status.HTTP_202_ACCEPTED, reply.model_dump()


def ingest_body(
    ctx: AppContext, body: bytes, authorization: str | None, *, node: str | None = None
) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON payload) for one pushed snapshot: 202 taken (or dropped as older), 401, 403 (a snapshot of
    another node than `node`, the one the sender's credential speaks for), or 422."""
    # Wall time, not the state's clock (which tests and the simulator may set to anything): a timestamp is a date.
    checked = check_snapshot(ctx.settings, body, authorization, time.time(), node=node)
    if isinstance(checked, Refusal):
        if checked.counted_as is not None:
            ctx.metrics.snapshots.labels(checked.counted_as).inc()
        return checked.status_code, checked.payload
    return take_snapshot(ctx, checked, body)


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
    """ASGI middleware answering `POST /v1/telemetry` itself; every other request goes on to the app. The sender's
    credential is judged from the headers, before the body is read: the shared token, or with `credentials`
    (`GPUADVISOR_TELEMETRY_AUTH=serviceaccount`) the node its ServiceAccount token speaks for."""

    def __init__(self, app: ASGIApp, *, ctx: AppContext, credentials: NodeCredentials | None = None) -> None:
        self.app = app
        self.ctx = ctx
        self.credentials = credentials

    async def _refusal(self, authorization: str | None) -> tuple[str | None, tuple[int, dict[str, Any]] | None]:
        """(the node the credential speaks for, None) or (None, the answer refusing it)."""
        if self.credentials is None:
            problem = token_problem(self.ctx.settings, authorization)
            return None, (None if problem is None else (status.HTTP_401_UNAUTHORIZED, {"detail": problem}))
        token = bearer(authorization)
        try:
            node = await self.credentials.node_of(token) if token else None
        except ReviewUnavailableError as e:
            return None, (status.HTTP_503_SERVICE_UNAVAILABLE, {"detail": f"Authorization: {e}; retry"})
        if node is None:
            return None, (status.HTTP_401_UNAUTHORIZED, {"detail": NOT_A_COLLECTOR})
        return node, None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
        node, refused = await self._refusal(authorization)
        if refused is not None:  # the body is not read, the connection not kept: a client without credentials
            code, payload = refused
            headers, raw = answer(code, payload)
            headers.append((b"connection", b"close"))
            if code == status.HTTP_503_SERVICE_UNAVAILABLE:
                headers.append((b"retry-after", b"5"))
            await send({"type": "http.response.start", "status": code, "headers": headers})
            await send({"type": "http.response.body", "body": raw})
            self.ctx.metrics.request_duration.labels(PATH, "POST", str(code)).observe(time.perf_counter() - start)
            return
        body = bytearray()
        while True:
            message: Message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > MAX_BODY_BYTES:
                code, payload = status.HTTP_413_CONTENT_TOO_LARGE, TOO_LARGE
                break
            if not message.get("more_body", False):
                code, payload = ingest_body(self.ctx, bytes(body), authorization, node=node)
                break
        headers, raw = answer(code, payload)
        await send({"type": "http.response.start", "status": code, "headers": headers})
        await send({"type": "http.response.body", "body": raw})
        self.ctx.metrics.request_duration.labels(PATH, "POST", str(code)).observe(time.perf_counter() - start)
