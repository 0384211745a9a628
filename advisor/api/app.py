"""App factory: wires settings, the store, the cluster state, the predictors and the routers.

Nothing is built at import time. With `no_kube` unset the lifespan starts the Kubernetes watch of GPU pods and nodes
(`advisor.cluster.kube`); otherwise allocations are inferred from telemetry alone. With `model_reload_seconds` above 0
it also starts the model reloader (`advisor.serving.ModelReloader`), which serves versions promoted elsewhere.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from advisor.api.context import AppContext
from advisor.api.errors import BodyLimit, install_handlers
from advisor.api.fastpath import JsonFastPath, route_named
from advisor.api.limits import MemoryBudget
from advisor.api.metrics import AdvisorMetrics, TimingMiddleware
from advisor.api.model_metrics import ModelCollector
from advisor.api.node_auth import NodeCredentials
from advisor.api.routes import docs, extender, health, models, nodes, predict, score, telemetry, trialruns, volcano
from advisor.api.topology_metrics import TopologyCollector
from advisor.cluster.state import ClusterState
from advisor.placement.config import ScoringConfig
from advisor.predictors import prepare_turn_taking
from advisor.serving import ModelReloader
from advisor.settings import AdvisorSettings
from collector.snapshot import NodeSnapshot
from profiler.store import db

log = logging.getLogger(__name__)


# The native API's largest legitimate body: /v1/score naming 5,000 nodes is about 100 KB.
NATIVE_BODY_LIMIT_BYTES = 1024 * 1024
STATE_FREEZE_AFTER_NODES = 256
"""The service's cluster state calls `gc.freeze()` after every 256 rebuilt nodes (`ClusterState`): a young
collection then scans at most ~10,000 node-state objects (bench/state_gc.py: pauses at 10,000 nodes)."""


def body_limits(settings: AdvisorSettings) -> Callable[[str], int]:
    """Each route's largest request body in bytes: the scheduler routes take whole node lists, the rest far less."""

    def limit(path: str) -> int:
        if path.startswith(("/extender/", "/volcano/")):
            return settings.scheduler_body_limit_bytes
        if path == telemetry.PATH:
            return telemetry.MAX_BODY_BYTES
        return NATIVE_BODY_LIMIT_BYTES

    return limit


def write_access(settings: AdvisorSettings) -> str:
    """The start-up log line saying who may write (ingest telemetry, train, submit trial runs)."""
    if settings.api_token:
        separate = [
            name
            for name, token in (("training", settings.training_token), ("trial runs", settings.trialrun_token))
            if token
        ]
        own = f"; {' and '.join(separate)} their own token" if separate else ""
        return f"write routes need the bearer token (GPUADVISOR_API_TOKEN){own}"
    if settings.allow_unauthenticated_writes:
        return (
            "write routes are OPEN to anyone who can reach this port: no GPUADVISOR_API_TOKEN and "
            "GPUADVISOR_ALLOW_UNAUTHENTICATED_WRITES=true"
        )
    return (
        "write routes answer 401: no GPUADVISOR_API_TOKEN is configured (set it, and the collectors' too, or "
        "GPUADVISOR_ALLOW_UNAUTHENTICATED_WRITES=true for a test stack)"
    )


def _document_raw_bodies(app: FastAPI) -> None:
    """Add the request bodies that routes read raw (for speed) to the OpenAPI components: FastAPI cannot find those
    models by itself. The routes refer to them as `#/components/schemas/<Model>`; the models they refer to in turn
    are written there too, so that every `$ref` of the document resolves (a schema's own `$defs` would not)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
            bodies: list[type[BaseModel]] = [NodeSnapshot, *volcano.DOCUMENTED_BODIES]
            modes: list[tuple[type[BaseModel], Literal["validation"]]] = [(model, "validation") for model in bodies]
            _, defs = models_json_schema(modes, ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for name, definition in defs["$defs"].items():
                components.setdefault(name, definition)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def node_credentials(
    settings: AdvisorSettings, review: Callable[[str], str | None] | None = None
) -> NodeCredentials | None:
    """How pushed snapshots are tied to their node: None (the shared token, `telemetry_auth=token`), else collector
    ServiceAccount tokens reviewed by `review` (default: a TokenReview through the cluster's API, client built at the
    first push)."""
    if settings.telemetry_auth != "serviceaccount":
        return None
    if review is None:
        reviewer: list[Callable[[str], str | None]] = []

        def review_through_the_api(token: str) -> str | None:
            if not reviewer:
                from advisor.cluster.kube import TokenReviewer
                from collector.kube import make_api_client

                api = TokenReviewer(
                    make_api_client(),
                    service_account=settings.collector_service_account,
                    audience=settings.telemetry_audience,
                )
                reviewer.append(api.node_of)
            return reviewer[0](token)

        review = review_through_the_api
    return NodeCredentials(review)


def create_app(
    settings: AdvisorSettings | None = None,
    *,
    state: ClusterState | None = None,
    review_token: Callable[[str], str | None] | None = None,
) -> FastAPI:
    """Build the advisor app; `state` may be injected (tests use one with a fake clock), and `review_token` (a
    collector token → its node; tests) where `telemetry_auth` is `serviceaccount`."""
    settings = settings or AdvisorSettings()
    engine = db.make_engine(settings.db_url)
    metrics = AdvisorMetrics()
    ctx = AppContext(
        settings=settings,
        engine=engine,
        sessions=db.session_factory(engine),
        state=state
        or ClusterState(node_expiry_seconds=settings.node_expiry_seconds, freeze_after_nodes=STATE_FREEZE_AFTER_NODES),
        scoring=ScoringConfig.from_settings(settings),
        metrics=metrics,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log.log(logging.WARNING if not settings.api_token else logging.INFO, "%s", write_access(settings))
        ctx.reload_predictors()
        # the turn-taking of one- and two-resident GPUs solved before serving, not in the first calls that meet them
        prepare_turn_taking()
        reloader = None
        if settings.model_reload_seconds > 0:
            reloader = ModelReloader(ctx.models, settings.model_reload_seconds).start()
        watcher = None
        if not settings.no_kube:
            from advisor.cluster.kube import start_watch

            # The pending pods are always followed: the MIG profiles they ask for judge which free instances are
            # stranded (`Scorer.pending_mig`), besides the filter's holding and shortest-first queue.
            watcher = start_watch(ctx.state, metrics, pending=True, dra=ctx.dra)
        try:
            yield
        finally:
            if watcher is not None:
                watcher.stop()
            if reloader is not None:
                reloader.stop()
            engine.dispose()

    app = FastAPI(
        title="gpuadvisor",
        summary="GPU placement advice for Kubernetes schedulers",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # served by `docs.add_docs` from local assets instead of a CDN
        redoc_url=None,
    )
    app.state.ctx = ctx
    metrics.registry.register(ModelCollector(ctx))
    if settings.export_gpu_links:
        metrics.registry.register(TopologyCollector(ctx))
    answers = {
        extender.PRIORITIZE_PATH: (
            route_named(extender.router.routes, extender.PRIORITIZE_PATH),
            extender.fast_prioritize,
        ),
        extender.FILTER_PATH: (route_named(extender.router.routes, extender.FILTER_PATH), extender.fast_filter),
        score.SCORE_PATH: (route_named(score.router.routes, score.SCORE_PATH), score.fast_score),
    }
    app.add_middleware(JsonFastPath, ctx=ctx, answers=answers)  # innermost: after the body limit, timed as the route
    budget = MemoryBudget(settings.request_memory_budget_bytes)
    app.add_middleware(BodyLimit, limit_of=body_limits(settings), budget=budget, refused=metrics.refuse)
    app.add_middleware(TimingMiddleware, metrics=metrics)
    app.add_middleware(
        telemetry.IngestFastPath, ctx=ctx, credentials=node_credentials(settings, review_token)
    )  # outermost: the hot ingest path skips the rest
    _document_raw_bodies(app)
    docs.add_docs(app)
    install_handlers(app)

    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:
        ctx.state.expire_silent()
        metrics.refresh_nodes(
            [r.received_at_seconds for r in ctx.state.records()], ctx.state.now(), ctx.scoring.staleness_seconds
        )
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    for module in (health, extender, volcano, score, telemetry, nodes, predict, models, trialruns):
        app.include_router(module.router)
    return app
