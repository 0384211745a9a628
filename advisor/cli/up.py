"""`gpuadvisor up`: the local all-in-one, no cluster needed (docs/quickstart.md).

A SQLite store, the advisor API on one port, simulated GPU nodes (plus this machine's own GPUs when NVML finds any)
each with a collector agent pushing NodeSnapshots to the advisor over HTTP exactly as in a cluster, and models
trained on the first start from the bundled Gavel data. The advisor answers (with its heuristics) as soon as the
nodes report; the trained models are swapped in when ready. Starting shows each step with its duration, then prints
the URLs and ready-to-paste curl commands; Ctrl-C (or SIGTERM) stops everything cleanly.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import secrets
import shlex
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Annotated, Any

import httpx
import typer
import uvicorn
from prometheus_client import CollectorRegistry
from rich.console import Console
from sqlalchemy.orm import Session, sessionmaker

from advisor.api import create_app
from advisor.api.context import AppContext
from advisor.cli.common import EXIT_UNAVAILABLE, Stages, fail
from advisor.cli.db import store_failure
from advisor.cli.serve import build_settings
from advisor.datasets import gavel_trace_executions, load_gavel
from advisor.models.artifact import ArtifactError
from advisor.models.reference import GAVEL_THROUGHPUTS, GAVEL_TRACES, bundled_gavel_dir, train_reference_models
from advisor.settings import AdvisorSettings
from collector.agent import CollectorAgent
from collector.backend import BackendUnavailableError, GpuBackend
from collector.exporter import MergedCollector, MetricsServer, SnapshotCollector
from collector.logs import configure_logging
from collector.push import ADVISOR_KEEP_ALIVE_SECONDS, SnapshotPusher
from collector.settings import CollectorSettings
from collector.sim import SimulatedBackend
from collector.snapshot import NodeSnapshot
from collector.stats import CollectorStats
from profiler.csv_formats import InputDataError
from profiler.csv_table import read_csv_lines
from profiler.importers import parse_colocations, parse_throughputs
from profiler.records import ColocationRecord, ExecutionRecord, ProfileRecord
from profiler.store import db, repo

EXAMPLE_WORKLOAD = "resnet50-bs64"
READY_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class Example:
    title: str
    command: str


def node_names(count: int) -> list[str]:
    """Names of the simulated nodes: sim-node-1 … sim-node-N."""
    return [f"sim-node-{i}" for i in range(1, count + 1)]


def curl_post(url: str, body: dict[str, Any]) -> str:
    """A curl command line POSTing `body` as JSON to `url`, quoted for a POSIX shell."""
    return f"curl -s -X POST {url} -H 'Content-Type: application/json' -d {shlex.quote(json.dumps(body))}"


def examples(base_url: str, nodes: list[str]) -> list[Example]:
    """What to try once the stack is up: native scoring and the kube-scheduler extender call for a 1-GPU pod."""
    pod = {
        "metadata": {"name": "train-0", "namespace": "ml", "labels": {"gpuadvisor.io/workload": EXAMPLE_WORKLOAD}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    return [
        Example(
            "Score every node for a 1-GPU pod (native API)",
            curl_post(f"{base_url}/v1/score", {"pod": {"gpus": 1, "workload": EXAMPLE_WORKLOAD}}),
        ),
        Example(
            "What kube-scheduler's extender call gets back",
            curl_post(f"{base_url}/extender/prioritize", {"Pod": pod, "NodeNames": nodes}),
        ),
        Example("The cluster as the advisor sees it", f"curl -s {base_url}/v1/nodes"),
    ]


@dataclass
class LocalStack:
    """The running parts; `stop()` is idempotent and stops them in reverse order of starting."""

    server: uvicorn.Server | None = None
    server_thread: threading.Thread | None = None
    agents: list[CollectorAgent] = field(default_factory=list)
    backends: list[GpuBackend] = field(default_factory=list)
    pushers: list[SnapshotPusher] = field(default_factory=list)
    metrics: MetricsServer | None = None

    @property
    def running(self) -> bool:
        return self.server is not None or bool(self.agents or self.backends)

    def stop(self) -> None:
        if self.metrics is not None:
            self.metrics.stop()
            self.metrics = None
        for agent in self.agents:
            agent.stop()
        for pusher in self.pushers:
            pusher.stop()
        for backend in self.backends:
            backend.close()
        self.agents, self.pushers, self.backends = [], [], []
        if self.server is not None and self.server_thread is not None:
            self.server.should_exit = True
            self.server_thread.join(15)
            self.server = self.server_thread = None


# A mixed fleet, as real clusters are, so that the JCT component's heterogeneity shows in the scores:
# (NVML device name, memory GiB, board power W).
SIMULATED_FLEET: tuple[tuple[str, int, float], ...] = (
    ("NVIDIA H100 80GB HBM3", 80, 700.0),
    ("NVIDIA A100-SXM4-80GB", 80, 400.0),
    ("Tesla V100-SXM2-32GB", 32, 300.0),
    ("NVIDIA L4", 24, 72.0),
)


BUNDLED_SOURCE = "bundled:gavel"


SEED_CHUNK_ROWS = 500


def seed_store(sessions: sessionmaker[Session]) -> int:
    """On a store without profiles, import the bundled Gavel data the reference models train from — throughputs,
    co-locations and the executions derived from its traces — so that `POST /v1/models/train` (which trains on the
    store) works on the local stack as the banner says; the rows added (0: the store had profiles already).

    A transaction per `SEED_CHUNK_ROWS` rows, so that the running advisor's own writes wait for one chunk at most;
    the profiles go last, so an import cut short is started again (rows are upserted) by the next `up`."""
    with sessions() as session:
        if repo.profiles_mark(session=session)[0]:
            return 0
    gavel = bundled_gavel_dir()
    data = load_gavel(gavel / GAVEL_THROUGHPUTS)
    throughputs = read_csv_lines(data.throughputs.to_csv(index=False).splitlines(), source="bundled throughputs")
    pairs = read_csv_lines(data.colocations.to_csv(index=False).splitlines(), source="bundled colocations")
    profiles = parse_throughputs(throughputs, source=BUNDLED_SOURCE)
    colocations = parse_colocations(pairs, source=BUNDLED_SOURCE)
    executions = [
        ExecutionRecord(
            job_id=str(row.job_id),
            submit_time=datetime.fromtimestamp(float(row.submit_time_s), UTC),  # type: ignore[arg-type]
            start_time=datetime.fromtimestamp(float(row.start_time_s), UTC),  # type: ignore[arg-type]
            end_time=datetime.fromtimestamp(float(row.end_time_s), UTC),  # type: ignore[arg-type]
            workload=str(row.workload),
            user=str(row.user),
            queue=str(row.queue),
            gpu_model=str(row.gpu_model),
            gpu_count=int(row.gpu_count),  # type: ignore[arg-type]
            source=BUNDLED_SOURCE,
        )
        for row in gavel_trace_executions(gavel / GAVEL_TRACES, data.throughputs).itertuples()
    ]
    rows: list[Callable[[Session], object]] = [
        *(partial(_save_execution, e) for e in executions),
        *(partial(_save_colocation, c) for c in colocations),
        *(partial(_save_profile, p) for p in profiles),
    ]
    for start in range(0, len(rows), SEED_CHUNK_ROWS):
        with db.transaction(sessions) as session:
            for save in rows[start : start + SEED_CHUNK_ROWS]:
                save(session)
    return len(rows)


def _seed(sessions: sessionmaker[Session], done: threading.Event) -> None:
    """`seed_store`, then `done` set however it ended (training goes on with what the store holds)."""
    try:
        seed_store(sessions)
    finally:
        done.set()


def _save_execution(execution: ExecutionRecord, session: Session) -> int:
    return repo.save_execution(session=session, execution=execution)


def _save_colocation(colocation: ColocationRecord, session: Session) -> int:
    return repo.save_colocation(session=session, colocation=colocation)


def _save_profile(profile: ProfileRecord, session: Session) -> int:
    return repo.save_profile(session=session, profile=profile)


def serve_models(ctx: AppContext, settings: AdvisorSettings) -> str:
    """Train and promote the reference models of every kind that has none yet, then have the running advisor serve
    the promoted ones; what answers each scoring question, in one line."""
    try:
        trained = train_reference_models(settings.model_dir, ctx.sessions)
    except (InputDataError, ArtifactError, OSError) as e:
        return f"training from the bundled data failed ({e}); scores use the heuristics"
    ctx.reload_predictors()
    served = ", ".join(f"{question}: {name}" for question, name in ctx.predictors.names().items())
    origin = "trained now from the bundled Gavel data (MIT)" if trained else "from the store"
    return f"{served} ({origin})"


def check_port_free(host: str, port: int, option: str = "--port") -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except socket.gaierror as e:
            fail(f"--host: {host!r} is not an address or a name this machine can resolve ({e.strerror})")
        except OSError as e:
            if e.errno == errno.EADDRNOTAVAIL:
                fail(f"--host: {host} is not an address of this machine (e.g. --host 127.0.0.1 or --host 0.0.0.0)")
            fail(
                f"{option}: cannot listen on {host}:{port}: {e.strerror} (choose another port: {option} N"
                + (", or `make up PORT=N`)" if option == "--port" else ")"),
                EXIT_UNAVAILABLE,
            )


def wait_for(check: Callable[[], bool], timeout_seconds: float, alive: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline and alive():
        try:
            if check():
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    return False


def start_advisor(stack: LocalStack, settings: AdvisorSettings, host: str, port: int) -> tuple[str, AppContext]:
    """Serve the advisor on a background thread (uvicorn leaves signals to the main thread); base URL and context."""
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        log_config=None,  # the format of `configure_logging`
        access_log=False,
        timeout_keep_alive=ADVISOR_KEEP_ALIVE_SECONDS,
    )
    stack.server = uvicorn.Server(config)
    stack.server_thread = threading.Thread(target=stack.server.run, name="advisor", daemon=True)
    stack.server_thread.start()
    base_url = f"http://{'127.0.0.1' if host in {'0.0.0.0', '::'} else host}:{port}"
    thread = stack.server_thread
    if not wait_for(lambda: httpx.get(f"{base_url}/readyz").is_success, READY_TIMEOUT_SECONDS, thread.is_alive):
        stack.stop()
        fail(f"the advisor did not become ready on {base_url} (see the log above)", EXIT_UNAVAILABLE)
    ctx: AppContext = app.state.ctx
    return base_url, ctx


def local_gpu_backend() -> GpuBackend | None:
    """This machine's GPUs through NVML (library from GPUADVISOR_NVML_LIBRARY, as for the collector), or None when
    there is no NVML library or no GPU."""
    try:
        from collector.nvml import NvmlBackend

        backend: GpuBackend = NvmlBackend(CollectorSettings().nvml_library)
    except BackendUnavailableError:
        return None
    if not backend.read().gpus:
        backend.close()
        return None
    return backend


def start_nodes(
    stack: LocalStack,
    base_url: str,
    token: str,
    names: list[str],
    *,
    gpus: int,
    interval_seconds: float,
    local: GpuBackend | None,
) -> list[str]:
    """One collector agent per simulated node (and one for local GPUs), each pushing to the advisor; node names."""
    agents: list[tuple[str, CollectorAgent]] = []
    for seed, name in enumerate(names):
        model, memory_gib, power_watts = SIMULATED_FLEET[seed % len(SIMULATED_FLEET)]
        simulated = SimulatedBackend(
            gpus,
            seed=seed,
            node=name,
            model=model,
            memory_total_bytes=memory_gib * 1024**3,
            max_power_watts=power_watts,
        )
        stack.backends.append(simulated)
        agents.append(
            (
                name,
                CollectorAgent(
                    backend=simulated,
                    node=name,
                    resolver=simulated,
                    pods=simulated.pods,
                    interval_seconds=interval_seconds,
                    stats=CollectorStats(),
                ),
            )
        )
    if local is not None:
        stack.backends.append(local)
        name = socket.gethostname()
        agents.append((name, CollectorAgent(backend=local, node=name, interval_seconds=interval_seconds)))
    for _, agent in agents:
        pusher = SnapshotPusher(base_url, stats=agent.stats, token=token)
        pusher.start()
        agent.sinks.append(pusher)
        stack.pushers.append(pusher)
        stack.agents.append(agent)
        agent.start()
    return [name for name, _ in agents]


def _latest(agent: CollectorAgent) -> Callable[[], NodeSnapshot | None]:
    return lambda: agent.latest


def serve_collector_metrics(stack: LocalStack, host: str, port: int, interval_seconds: float) -> MetricsServer:
    """Every collector agent's `/metrics` on one port (as each node's collector serves its own on a cluster), with the
    same node names as the advisor's /v1/nodes: a Prometheus scraping it feeds the cluster, node and pod dashboards."""
    registry = CollectorRegistry()
    registry.register(MergedCollector([SnapshotCollector(_latest(a), a.stats, a.node) for a in stack.agents]))
    server = MetricsServer(
        registry, stack.agents[0].stats, host=host, port=port, stale_after_seconds=max(60.0, 3 * interval_seconds)
    )
    server.start()
    stack.metrics = server
    return server


def nodes_known(base_url: str, names: list[str]) -> bool:
    reply = httpx.get(f"{base_url}/v1/nodes")
    return reply.is_success and set(names) <= {node["name"] for node in reply.json()["nodes"]}


def print_summary(
    console: Console,
    base_url: str,
    *,
    simulated: list[str],
    local: list[str],
    gpus: int,
    settings: AdvisorSettings,
    models: str,
    token_at: str,
    collector_metrics: str,
    store_note: str = "",
) -> None:
    """The URLs, the token and the example commands, once everything answers."""
    nodes = simulated + local
    console.print()
    console.print(f"[bold]gpuadvisor is up[/] — {len(nodes)} nodes, store {settings.db_url}{store_note}")
    console.print(f"  models          {models}")
    console.print(f"  API and docs    {base_url}/docs")
    console.print(f"  cluster state   {base_url}/v1/nodes")
    console.print(f"  metrics         {base_url}/metrics (the advisor's)")
    console.print(f"  node metrics    {collector_metrics} (every node's collector: scrape it for the dashboards)")
    console.print(f"  nodes           {', '.join(simulated)} ({gpus} simulated GPUs each)")
    for name in local:
        console.print(f"                  {name} (this machine's GPUs, through NVML)")
    console.print(f"  API token       in {token_at} (writes: POST /v1/telemetry, /v1/models/train, /v1/trialruns)")
    for example in examples(base_url, nodes):
        console.print()
        console.print(f"[bold]{example.title}[/]")
        console.print(example.command, markup=False, highlight=False, soft_wrap=True)
    console.print()
    console.print("Press Ctrl-C to stop.")


def local_token(settings: AdvisorSettings) -> tuple[str, str]:
    """The local stack's API token and where it is: GPUADVISOR_API_TOKEN when set, else a new random one written
    (readable by this user only) next to the model directory, for curl or a second collector to use."""
    if settings.api_token:
        return settings.api_token, "GPUADVISOR_API_TOKEN"
    token = secrets.token_hex(16)
    path = settings.model_dir.parent / "api-token"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
    except OSError as e:
        fail(f"cannot write the API token to {path}: {e.strerror}")
    return token, str(path)


def up(  # noqa: PLR0915, PLR0917 - Typer maps every option to a parameter; the start-up steps in order
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port of the advisor API.", min=1, max=65535)] = 8080,
    nodes: Annotated[int, typer.Option(help="Simulated GPU nodes.", min=1, max=256)] = 4,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs of each simulated node.", min=1, max=64)] = 8,
    interval_seconds: Annotated[
        float, typer.Option("--interval-s", help="Seconds between two snapshots of a node.", min=0.2, max=60)
    ] = 2.0,
    db_url: Annotated[str | None, typer.Option("--db", help="Database URL.")] = None,
    metrics_port: Annotated[
        int,
        typer.Option(
            help="TCP port of the simulated collectors' /metrics (all nodes, for Prometheus).", min=1, max=65535
        ),
    ] = 9400,
) -> None:
    """Run everything locally: store, advisor, simulated GPU nodes with collectors; Ctrl-C stops it."""
    configure_logging(logging.WARNING)  # what goes wrong behind the banner, in every component's one format
    console = Console(highlight=False, soft_wrap=True)
    settings = build_settings(db_url, no_kube=True)
    token, token_at = local_token(settings)
    # A few local nodes: the node-detail dashboard's link matrix costs nothing here, so it is on unless set.
    links = {} if "GPUADVISOR_EXPORT_GPU_LINKS" in os.environ else {"export_gpu_links": True}
    settings = settings.model_copy(update={"api_token": token, **links})
    check_port_free(host, port)
    if metrics_port == port:
        fail(f"--metrics-port: {metrics_port} is the advisor's --port; choose another")
    check_port_free(host, metrics_port, "--metrics-port")
    # SIGTERM stops like Ctrl-C, wherever the start-up is; SIGINT too when the shell started us with it ignored (`&`)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stack = LocalStack()
    stages = Stages(console)
    try:
        with stages.stage(f"store ready ({settings.db_url})"):
            try:
                engine = db.make_engine(settings.db_url)
                db.upgrade(engine)
            except db.StoreError as e:
                store_failure(e)
            engine.dispose()
        with stages.stage(f"advisor serving on port {port}"):
            base_url, ctx = start_advisor(stack, settings, host, port)
        seeded = threading.Event()
        ctx.training.wait_for(seeded)  # POST /v1/models/train trains on the whole import below, not on part of it
        names = node_names(nodes)
        local = local_gpu_backend()
        label = f"{nodes} simulated nodes × {gpus_per_node} GPUs"
        if local is not None:
            label += f" and this machine's {len(local.read().gpus)} GPUs"
        with stages.stage(f"{label} pushing telemetry"):
            names = start_nodes(
                stack, base_url, token, names, gpus=gpus_per_node, interval_seconds=interval_seconds, local=local
            )
            if not wait_for(lambda: nodes_known(base_url, names), READY_TIMEOUT_SECONDS, lambda: True):
                fail("the advisor received no telemetry from the collectors", EXIT_UNAVAILABLE)
        with stages.stage(f"collector metrics on port {metrics_port}"):
            serve_collector_metrics(stack, host, metrics_port, interval_seconds)
        with stages.stage("models ready", "models: training them from the bundled Gavel data on a first start"):
            models = serve_models(ctx, settings)
        seeding = threading.Thread(target=_seed, args=(ctx.sessions, seeded), name="seed-store", daemon=True)
        seeding.start()
        print_summary(
            console,
            base_url,
            simulated=names[:nodes],
            local=names[nodes:],
            gpus=gpus_per_node,
            settings=settings,
            models=models,
            token_at=token_at,
            collector_metrics=f"{base_url.rsplit(':', 1)[0]}:{metrics_port}/metrics",
            store_note="" if not seeding.is_alive() else " (importing the bundled Gavel data into it: a minute or two)",
        )
        while stack.server_thread is not None:
            stack.server_thread.join(0.5)
            if not stack.server_thread.is_alive():
                fail("the advisor stopped unexpectedly", EXIT_UNAVAILABLE)
    except KeyboardInterrupt:
        pass
    finally:
        if stack.running:
            with stages.stage("stopped"):
                stack.stop()
