"""App factory: wires settings, the store and the routers; nothing is built at import time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from advisor.api.context import AppContext
from advisor.api.routes import health
from advisor.settings import AdvisorSettings
from profiler.store import db


def create_app(settings: AdvisorSettings | None = None) -> FastAPI:
    settings = settings or AdvisorSettings()
    engine = db.make_engine(settings.db_url)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        engine.dispose()

    app = FastAPI(
        title="gpuadvisor",
        summary="GPU placement advice for Kubernetes schedulers",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.ctx = AppContext(settings=settings, engine=engine, sessions=db.session_factory(engine))
    app.include_router(health.router)
    return app
