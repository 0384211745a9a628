"""Liveness and readiness probes.

Readiness is the ability to score: the scheduler routes need the in-memory state and the served models (heuristics
when none), never the store, so a store outage must not take every replica out of the Service at once (issue 40). The
store's health is reported beside it, without hosts, ports or URLs: anyone who reaches the port may read the probe;
the reason, with where the store is, goes to the advisor's log (once per kind of fault).
"""

from __future__ import annotations

import logging

from fastapi import APIRouter

from advisor.api.deps import Ctx
from advisor.api.errors import ERROR_RESPONSES, StrictJsonRoute
from profiler.store import db

log = logging.getLogger(__name__)
router = APIRouter(tags=["health"], route_class=StrictJsonRoute, responses=ERROR_RESPONSES)
_logged: set[str] = set()


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up and serving HTTP."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(ctx: Ctx) -> dict[str, str]:
    """Ready to score (always, once serving). `store`: `ok` (with `schema_revision`), `unavailable` (unreachable:
    trial runs, training and profile reads answer 503 meanwhile) or `schema_missing` (run `gpuadvisor db upgrade`)."""
    try:
        db.check_connection(ctx.engine)
        revision = db.current_revision(ctx.engine)
    except db.StoreError as e:
        kind = type(e.__cause__).__name__ if e.__cause__ is not None else "StoreError"
        if kind not in _logged:
            _logged.add(kind)
            log.warning("readiness: the store is unavailable (%s); scoring goes on", str(e).splitlines()[0][:300])
        return {"status": "ready", "store": "unavailable"}
    if revision is None:
        return {"status": "ready", "store": "schema_missing"}
    return {"status": "ready", "store": "ok", "schema_revision": revision}
