"""`gpuadvisor advisor serve`: the advisor HTTP service."""

from __future__ import annotations

import contextlib
import gc
import logging
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
import uvicorn
from pydantic import ValidationError

from advisor.api import create_app
from advisor.api.limits import connection_limits
from advisor.api.liveness import Heartbeat
from advisor.api.transport.guard import guarded_protocol
from advisor.api.transport.steering import (
    IngestWorkers,
    SteeringServer,
    cores_available,
    default_ingest_workers,
    steering_protocol,
)
from advisor.cli.common import fail, settings_error
from advisor.cli.db import store_failure
from advisor.cli.task_mix import task_mix
from advisor.settings import AdvisorSettings
from collector.logs import configure_logging
from collector.push import ADVISOR_KEEP_ALIVE_SECONDS
from profiler.store import db

log = logging.getLogger(__name__)
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


# The cluster state is hundreds of thousands of small immutable objects that live until the node's next snapshot;
# the state freezes them as it builds them (advisor.cluster.state, `freeze_after_nodes`), so a young collection finds
# only what requests made since (the scorer's memo entries, mostly). With CPython's default thresholds (700, 10, 10)
# it would run every few requests; at 20,000 it runs a few times a second under load and pauses ~4-8 ms
# (bench/state_gc.py: at 50,000, 12-32 ms).
GC_THRESHOLDS = (20_000, 20, 20)
STARTUP_FAILURE_EXIT = 3  # as `uvicorn.run` exits when the server could not start (the port taken, say)


@dataclass(frozen=True, slots=True)
class ServingCertificate:
    """PEM files of the certificate (chain) and private key to serve HTTPS with (deploy/profiles/tls)."""

    cert_file: Path
    key_file: Path


def check_certificate(cert_file: Path | None, key_file: Path | None) -> ServingCertificate | None:
    """Both files or neither; they must load as a certificate and its key. A bad pair exits 2 naming the option,
    before the store is migrated or the app built."""
    if cert_file is None and key_file is None:
        return None
    if cert_file is None or key_file is None:
        fail("--tls-cert-file and --tls-key-file go together: give both to serve HTTPS, or neither")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert_file, key_file)
    except FileNotFoundError as e:
        fail(f"--tls-cert-file/--tls-key-file: no such file: {e.filename}")
    except (ssl.SSLError, OSError) as e:
        fail(f"--tls-cert-file/--tls-key-file: cannot load {cert_file} with key {key_file}: {e}")
    return ServingCertificate(cert_file, key_file)


def run_server(
    settings: AdvisorSettings,
    host: str,
    port: int,
    log_level: str = "info",
    certificate: ServingCertificate | None = None,
) -> None:
    """Migrate the store, build the app and serve it until interrupted, over HTTPS with `certificate`. The service's
    own log lines (model reloads, the Kubernetes watch, trainings) go to stderr at `log_level`, as uvicorn's do."""
    configure_logging(log_level)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # one line per migration plugin on every start
    # the liveness process first: it listens (answering "starting") while the store is migrated and the app built
    heartbeat = None
    if settings.liveness_port is not None:
        heartbeat = Heartbeat(host, settings.liveness_port, settings.liveness_stall_seconds)
        heartbeat.start_process()
    try:
        started = _build_and_serve(settings, host, port, log_level, certificate, heartbeat)
    finally:
        if heartbeat is not None:
            heartbeat.stop()
    if not started:
        raise SystemExit(STARTUP_FAILURE_EXIT)


def _build_and_serve(  # noqa: PLR0917 - run_server's parameters, passed on
    settings: AdvisorSettings,
    host: str,
    port: int,
    log_level: str,
    certificate: ServingCertificate | None,
    heartbeat: Heartbeat | None,
) -> bool:
    """Migrate the store, build the app and serve it until interrupted; whether the server started."""
    try:
        engine = db.make_engine(settings.db_url)
        db.upgrade(engine)
        engine.dispose()
        api = create_app(settings)
    except db.StoreError as e:
        store_failure(e)
    gc.collect()  # the start-up's cyclic garbage (the migrations'): frozen, nothing would ever reclaim it
    gc.freeze()  # everything imported and built so far lives as long as the process: never scan it again
    gc.set_threshold(*GC_THRESHOLDS)
    workers = ingest_workers(settings, certificate)
    pool = IngestWorkers(workers, api, api.state.ctx) if workers else None
    log.info("ingest workers: %d (GPUADVISOR_INGEST_WORKERS, --ingest-workers)", workers)
    limits = connection_limits(settings)
    log.info(
        "limits: %d connections, %.0f s for a request's headers, %.0f s for its body; request bodies may hold %d MiB "
        "while parsed (docs/operations.md)",
        limits.max_connections,
        limits.header_timeout_seconds,
        limits.body_timeout_seconds,
        settings.request_memory_budget_bytes // (1024 * 1024),
    )
    refuse = api.state.ctx.metrics.refuse
    protocol = guarded_protocol(limits, refuse, steering_protocol(pool)) if pool else guarded_protocol(limits, refuse)
    # keep-alive above the collectors' push interval: a push never races the server closing the connection
    config = uvicorn.Config(
        api,
        host=host,
        port=port,
        log_level=log_level,
        log_config=None,  # uvicorn's lines in the one format of `configure_logging`
        access_log=False,
        timeout_keep_alive=ADVISOR_KEEP_ALIVE_SECONDS,
        ssl_certfile=certificate.cert_file if certificate else None,
        ssl_keyfile=certificate.key_file if certificate else None,
        http=protocol,
    )
    server = SteeringServer(config, pool) if pool else uvicorn.Server(config)
    if heartbeat is not None:
        server = beating(server, heartbeat)
    with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run: Ctrl-C is how a foreground server stops
        server.run()
    return server.started


def beating(server: uvicorn.Server, heartbeat: Heartbeat) -> uvicorn.Server:
    """`server` that beats into the liveness process from its event loop once it serves (advisor.api.liveness)."""
    startup = server.startup

    async def startup_then_beat(sockets: list[socket.socket] | None = None) -> None:
        await startup(sockets)
        if not server.should_exit:
            heartbeat.start_beating()

    server.startup = startup_then_beat  # type: ignore[method-assign]
    return server


def ingest_workers(settings: AdvisorSettings, certificate: ServingCertificate | None) -> int:
    """How many ingest worker processes to start: the setting, else one when this process may use two cores or more;
    none over HTTPS (a TLS session cannot move to another process)."""
    wanted = settings.ingest_workers
    if settings.telemetry_auth == "serviceaccount":
        if wanted:
            log.warning("--ingest-workers %d ignored: collector tokens are reviewed by this process", wanted)
        return 0
    if certificate is not None:
        if wanted:
            log.warning("--ingest-workers %d ignored: over HTTPS one process serves every connection", wanted)
        return 0
    return default_ingest_workers(cores_available()) if wanted is None else wanted


@app.command()
def serve(  # noqa: PLR0917 - Typer maps every option to a parameter
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="TCP port.", min=1, max=65535)] = 8080,
    db_url: Annotated[str | None, typer.Option("--db", help="Database URL.")] = None,
    no_kube: Annotated[bool, typer.Option("--no-kube", help="Run without a Kubernetes API.")] = False,
    tls_cert_file: Annotated[
        Path | None, typer.Option(help="PEM certificate (chain): serve HTTPS instead of HTTP (with --tls-key-file).")
    ] = None,
    tls_key_file: Annotated[Path | None, typer.Option(help="PEM private key of --tls-cert-file.")] = None,
    ingest_workers: Annotated[
        int | None,
        typer.Option(
            help="Processes serving the collectors' connections beside the one holding the state "
            "(GPUADVISOR_INGEST_WORKERS; default: 1 with two cores or more; 0: one process).",
            min=0,
            max=64,
        ),
    ] = None,
) -> None:
    """Serve the scoring API, the scheduler extender and telemetry ingest."""
    certificate = check_certificate(tls_cert_file, tls_key_file)
    settings = build_settings(db_url, no_kube=no_kube or None, ingest_workers=ingest_workers)
    run_server(settings, host, port, certificate=certificate)


app.command("task-mix")(task_mix)
