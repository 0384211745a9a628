"""`gpuadvisor advisor serve`: the advisor HTTP service."""

from __future__ import annotations

import gc
import logging
from typing import Annotated

import typer
import uvicorn
from pydantic import ValidationError

from advisor.api import create_app
from advisor.cli.common import fail, settings_error
from advisor.settings import AdvisorSettings
from collector.push import ADVISOR_KEEP_ALIVE_SECONDS
from profiler.store import db

app = typer.Typer(help="The advisor service.", no_args_is_help=True)


def build_settings(db_url: str | None, **overrides: object) -> AdvisorSettings:
    """The settings from the environment with the command line's overrides; a bad variable exits 2 naming it."""
    try:
        settings = AdvisorSettings()
    except ValidationError as e:
        fail(settings_error(e))
    updates = {k: v for k, v in overrides.items() if v is not None}
    if db_url:
        updates["db_url"] = db_url
    return settings.model_copy(update=updates)


# The cluster state is hundreds of thousands of small immutable objects that live until the node's next snapshot.
# With CPython's default thresholds (700, 10, 10) the collector re-scans them every few requests, which costs more
# than the scoring itself; a larger young generation keeps collection cheap and rare (the state holds no cycles).
GC_THRESHOLDS = (50_000, 20, 20)


def run_server(settings: AdvisorSettings, host: str, port: int, log_level: str = "info") -> None:
    """Migrate the store, build the app and serve it until interrupted. The service's own log lines (model reloads,
    the Kubernetes watch, trainings) go to stderr at `log_level`, as uvicorn's do."""
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO), format="%(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)  # one line per migration plugin on every start
    try:
        engine = db.make_engine(settings.db_url)
        db.upgrade(engine)
        engine.dispose()
        api = create_app(settings)
    except db.StoreError as e:
        fail(str(e))
    gc.freeze()  # everything imported and built so far lives as long as the process: never scan it again
    gc.set_threshold(*GC_THRESHOLDS)
    # keep-alive above the collectors' push interval: a push never races the server closing the connection
    uvicorn.run(
        api, host=host, port=port, log_level=log_level, access_log=False, timeout_keep_alive=ADVISOR_KEEP_ALIVE_SECONDS
    )


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="TCP port.", min=1, max=65535)] = 8080,
    db_url: Annotated[str | None, typer.Option("--db", help="Database URL.")] = None,
    no_kube: Annotated[bool, typer.Option("--no-kube", help="Run without a Kubernetes API.")] = False,
) -> None:
    """Serve the scoring API, the scheduler extender and telemetry ingest."""
    run_server(build_settings(db_url, no_kube=no_kube or None), host, port)
