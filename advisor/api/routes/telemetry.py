"""NodeSnapshot ingest from the collectors (bearer token). Kept cheap: validate, rebuild one node, answer.

Every collector pushes every few seconds to every replica, so this is the advisor's hottest route by far
(docs/design.md §5: 1,000/s per replica). `IngestFastPath` serves it in front of FastAPI's routing and dependency
machinery — which cost more than the ingest itself — with the same `ingest_body` logic the documented route uses.
"""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import APIRouter, Header, Request, status
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from advisor.api.context import AppContext
from advisor.api.deps import Ctx, token_problem
from advisor.api.schemas import TelemetryAccepted
from collector.snapshot import NodeSnapshot

router = APIRouter(prefix="/v1", tags=["telemetry"])

PATH = "/v1/telemetry"
# Far above any real node (16 GPUs today); bounds the per-node topology and GPU-set search a snapshot can ask for.
MAX_GPUS_PER_NODE = 64
# A 16-GPU node with 256 processes is ~80 KB of JSON; anything far larger is not a snapshot.
MAX_BODY_BYTES = 4 * 1024 * 1024


def ingest_body(ctx: AppContext, body: bytes, authorization: str | None) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON payload) for one pushed snapshot: 202 taken (or dropped as older), 401, or 422."""
    problem = token_problem(ctx.settings.api_token, authorization)
    if problem is not None:
        return status.HTTP_401_UNAUTHORIZED, {"detail": problem}
    try:
        snapshot = NodeSnapshot.model_validate_json(body)
    except ValidationError as e:
        return status.HTTP_422_UNPROCESSABLE_CONTENT, {"detail": json.loads(e.json(include_url=False))}
    if len(snapshot.gpus) > MAX_GPUS_PER_NODE:
        detail = f"gpus: {len(snapshot.gpus)} GPUs in one snapshot; at most {MAX_GPUS_PER_NODE} per node are accepted"
        return status.HTTP_422_UNPROCESSABLE_CONTENT, {"detail": detail}
    accepted = ctx.state.ingest(snapshot)
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
    responses={401: {"description": "missing or wrong bearer token"}, 422: {"description": "not a NodeSnapshot"}},
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
    """Take one node's snapshot (docs/design.md §3); an older snapshot than the one held (by its timestamp)
    is dropped, not an error. Served by `IngestFastPath` in the running service; this route documents it and serves
    apps mounted without the fast path."""
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
                code, payload = 413, {"detail": f"body: a snapshot is at most {MAX_BODY_BYTES} bytes"}
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
