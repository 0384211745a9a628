"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from advisor.api.deps import Ctx
from advisor.api.errors import ERROR_RESPONSES, StrictJsonRoute, documented
from profiler.store import db

router = APIRouter(tags=["health"], route_class=StrictJsonRoute, responses=ERROR_RESPONSES)


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up and serving HTTP."""
    return {"status": "ok"}


@router.get("/readyz", response_model=None, responses=documented(503))
def readyz(ctx: Ctx) -> dict[str, str] | JSONResponse:
    """Ready to serve: the store answers and its schema is at the newest migration."""
    try:
        db.check_connection(ctx.engine)
        revision = db.current_revision(ctx.engine)
    except db.StoreError as e:
        return JSONResponse(status_code=503, content={"status": "unavailable", "reason": str(e)})
    if revision is None:
        return JSONResponse(
            status_code=503,
            content={
                "status": "unavailable",
                "reason": "database schema missing: run `gpuadvisor db upgrade`",
            },
        )
    return {"status": "ready", "schema_revision": revision}
