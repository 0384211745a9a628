"""`gpuadvisor collector run`: the node agent's entrypoint (docs/design.md §2/§3), registered in advisor/cli/main.py.

Exit codes: 2 bad input, 3 a needed resource is missing (no NVML library, no Kubernetes API configuration). A
long-running collector with the Kubernetes API does not exit when NVML is missing: it reports the missing GPU access
(`collector.access`) on /metrics and /healthz, where the DaemonSet's operators look.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, Protocol

import typer
from prometheus_client import CollectorRegistry, generate_latest

from collector.access import GpuAccessMonitor, NoGpuBackend
from collector.agent import CollectorAgent, SnapshotSink
from collector.backend import BackendUnavailableError, GpuBackend
from collector.exporter import Allocations, MetricsServer, SnapshotCollector
from collector.kube_errors import KubeUnavailableError
from collector.kubelet_pods import PodResourcesUnavailableError
from collector.logs import configure_logging
from collector.podmap import PidResolver
from collector.pods import PodLookup
from collector.push import SnapshotPusher, push_targets
from collector.settings import MAX_INTERVAL_SECONDS, CollectorSettings
from collector.sim import SimulatedBackend
from collector.stats import CollectorStats

if TYPE_CHECKING:
    from collector import kube

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3

app = typer.Typer(help="The node agent: NVML telemetry, pod attribution, /metrics, snapshots to the advisor.")
log = logging.getLogger(__name__)


class _Stoppable(Protocol):
    def stop(self) -> None: ...


class OutputFormat(StrEnum):
    json = "json"
    prometheus = "prometheus"


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """One line on stderr, no traceback (same convention as the advisor CLI)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def render_prometheus(
    agent: CollectorAgent, *, pid_labels: bool = False, allocations: Allocations | None = None
) -> str:
    """The exposition text of the agent's latest snapshot, through a fresh registry."""
    registry = CollectorRegistry()
    registry.register(
        SnapshotCollector(lambda: agent.latest, agent.stats, agent.node, pid_labels=pid_labels, allocations=allocations)
    )
    return generate_latest(registry).decode()


@app.command("run")
def run(  # noqa: PLR0917 - Typer maps every option to a parameter
    node: Annotated[str | None, typer.Option(help="Node name (default: $GPUADVISOR_NODE_NAME, else hostname).")] = None,
    port: Annotated[
        int | None, typer.Option(help="Port of /metrics and /healthz (default 9400).", min=0, max=65535)
    ] = None,
    interval_seconds: Annotated[
        float | None,
        typer.Option("--interval-s", help=f"Seconds between cycles (default 5, at most {MAX_INTERVAL_SECONDS:g})."),
    ] = None,
    proc_root: Annotated[Path | None, typer.Option(help="Root of the host's /proc (default /proc).")] = None,
    advisor_url: Annotated[
        str | None, typer.Option(help="Advisor base URL; snapshots go to <url>/v1/telemetry.")
    ] = None,
    no_kube: Annotated[
        bool, typer.Option("--no-kube", help="Run without the Kubernetes API (pods by UID only).")
    ] = False,
    once: Annotated[bool, typer.Option("--once", help="Print one snapshot and exit.")] = False,
    output_format: Annotated[OutputFormat, typer.Option("--format", help="Output of --once.")] = OutputFormat.json,
    simulate: Annotated[
        int | None, typer.Option(help="Simulate N GPUs instead of reading NVML.", min=1, max=1024)
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of --simulate.")] = 0,
    nvml_library: Annotated[str | None, typer.Option(help="Path of libnvidia-ml.so.1 to load.")] = None,
    pid_labels: Annotated[bool, typer.Option("--pid-labels", help="Per-process series with a pid label.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Collect GPU telemetry on this node; serve /metrics, push snapshots, annotate pods."""
    configure_logging(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("httpx").setLevel(logging.DEBUG if verbose else logging.WARNING)  # one line per push otherwise
    settings = CollectorSettings()
    plan = _plan(settings, node=node, interval_seconds=interval_seconds, proc_root=proc_root, advisor_url=advisor_url)
    plan.use_kube = not (no_kube or settings.no_kube or simulate is not None)
    plan.once = once
    parts = _open_backend(plan, settings, simulate=simulate, seed=seed, nvml_library=nvml_library)
    if plan.use_kube:
        _connect_kube(plan, parts, settings, simulated=simulate is not None)
    agent = CollectorAgent(
        backend=parts.backend,
        node=plan.node_name,
        proc_root=plan.root,
        resolver=parts.resolver,
        pods=parts.pods,
        sinks=parts.sinks,
        interval_seconds=plan.interval_seconds,
        stats=parts.stats,
        access=parts.access,
    )
    with_pids = pid_labels or settings.pid_labels
    if once:
        _print_once(agent, parts, output_format, pid_labels=with_pids)
        return
    _serve(agent, plan, parts, settings, port=port if port is not None else settings.port, pid_labels=with_pids)


@dataclass
class _Plan:
    """What `run` resolved from its options and the settings, checked."""

    node_name: str
    interval_seconds: float
    root: Path
    url: str | None
    use_kube: bool = False
    once: bool = False


@dataclass
class _Parts:
    """The agent's parts as they are opened, and what must be stopped when it ends."""

    backend: GpuBackend
    stats: CollectorStats
    resolver: PidResolver | None = None
    pods: PodLookup | None = None
    nvml_error: str | None = None
    access: GpuAccessMonitor | None = None
    allocations: Allocations | None = None  # which pod holds which GPU device, where the kubelet tells
    sinks: list[SnapshotSink] = field(default_factory=list)
    stoppables: list[_Stoppable] = field(default_factory=list)


def _plan(
    settings: CollectorSettings,
    *,
    node: str | None,
    interval_seconds: float | None,
    proc_root: Path | None,
    advisor_url: str | None,
) -> _Plan:
    node_name = node or settings.node_name or socket.gethostname()
    if interval_seconds is None:
        interval_seconds = settings.interval_seconds
    if not 0 < interval_seconds <= MAX_INTERVAL_SECONDS:  # also false for nan
        fail(f"--interval-s: expected seconds above 0 and at most {MAX_INTERVAL_SECONDS:g}, got {interval_seconds}")
    return _Plan(node_name, interval_seconds, proc_root or settings.proc_root, advisor_url or settings.advisor_url)


def _open_backend(
    plan: _Plan, settings: CollectorSettings, *, simulate: int | None, seed: int, nvml_library: str | None
) -> _Parts:
    """The GPU backend: simulated, NVML, or — for a long-running collector with the Kubernetes API and no GPU
    access — one that reports the missing access (`collector.access`) on /metrics and /healthz."""
    if simulate is None and not plan.root.is_dir():
        fail(f"--proc-root: {plan.root} is not a directory")
    if plan.url and not plan.once:
        try:
            push_targets(plan.url, lambda host, port: [])
        except ValueError as e:
            fail(f"--advisor-url: {e}")
    stats = CollectorStats()
    if simulate is not None:
        simulated = SimulatedBackend(simulate, seed=seed, node=plan.node_name)
        return _Parts(simulated, stats, resolver=simulated, pods=simulated.pods)
    try:
        from collector.nvml import NvmlBackend

        return _Parts(NvmlBackend(nvml_library or settings.nvml_library), stats)
    except BackendUnavailableError as e:
        if plan.once or not plan.use_kube:
            fail(str(e), EXIT_UNAVAILABLE)
        return _Parts(NoGpuBackend(), stats, nvml_error=str(e))


def _connect_kube(plan: _Plan, parts: _Parts, settings: CollectorSettings, *, simulated: bool) -> None:
    """The pods of this node (`_pod_index`), the GPU-access check, and (when long-running) the annotator."""
    from collector import kube

    try:
        api = kube.make_api_client()
    except KubeUnavailableError as e:
        parts.backend.close()
        fail(f"{e} (use --no-kube to run without it)", EXIT_UNAVAILABLE)
    stats = parts.stats
    index = _pod_index(api, plan, parts, settings)
    parts.pods = index
    if not simulated:
        reader = kube.NodeReader(api, plan.node_name, stats=stats)
        parts.access = GpuAccessMonitor(reader, stats=stats, nvml_error=parts.nvml_error)
    if plan.once:
        if isinstance(index, kube.PodIndex):
            try:
                index.refresh()
            except kube.TRANSIENT_ERRORS as e:
                stats.add_error("kube")
                log.warning("Kubernetes API unreachable, pods known by UID only: %s", e)
        return
    index.start()
    annotator = kube.PodAnnotator(api, plan.node_name, stats=stats, grace_seconds=settings.annotation_grace_seconds)
    annotator.start()
    parts.sinks.append(annotator)
    parts.stoppables += [index, annotator]


def _pod_index(
    api: Any, plan: _Plan, parts: _Parts, settings: CollectorSettings
) -> kube.KubeletPodIndex | kube.PodIndex:
    """This node's pods: from the kubelet's pod-resources API where its socket answers — the authority on which pod
    holds which GPU, and the API server is then asked only about those pods, by name — else (development, a kubelet
    without the API) from the API server's list of this node's pods. One log line says which, and why."""
    from collector import kube
    from collector.podresources import PodResourcesClient

    client = PodResourcesClient(settings.pod_resources_socket, timeout_seconds=settings.pod_resources_timeout_seconds)
    index = kube.KubeletPodIndex(
        api, plan.node_name, client.list, stats=parts.stats, interval_seconds=plan.interval_seconds
    )
    try:
        reads = index.refresh()
    except PodResourcesUnavailableError as e:
        client.close()
        log_at = log.info if not settings.pod_resources_socket.exists() else log.warning
        log_at(
            "pod source: the API server's list of node %s's pods, which needs list and watch on pods "
            "(docs/operations.md, 'Tokens and credentials'); the kubelet's pod-resources API is not used: %s",
            plan.node_name,
            e,
        )
        return kube.PodIndex(api, plan.node_name, stats=parts.stats)
    log.info(
        "pod source: the kubelet's pod-resources API at %s; %d pods holding GPUs read by name from the API server",
        settings.pod_resources_socket,
        reads,
    )
    parts.stoppables.append(_Closing(client.close))
    parts.allocations = index.allocations
    return index


@dataclass(frozen=True)
class _Closing:
    """A client's close() where a stop() is called."""

    close: Callable[[], None]

    def stop(self) -> None:
        self.close()


def _print_once(agent: CollectorAgent, parts: _Parts, output_format: OutputFormat, *, pid_labels: bool) -> None:
    snapshot = agent.run_cycle()
    parts.backend.close()
    for part in parts.stoppables:
        part.stop()
    if snapshot is None:
        fail("the collection cycle failed (see the log above)", EXIT_UNAVAILABLE)
    if output_format is OutputFormat.json:
        typer.echo(snapshot.model_dump_json(indent=2))
    else:
        typer.echo(render_prometheus(agent, pid_labels=pid_labels, allocations=parts.allocations), nl=False)


def _serve(
    agent: CollectorAgent, plan: _Plan, parts: _Parts, settings: CollectorSettings, *, port: int, pid_labels: bool
) -> None:
    """Push snapshots (with an advisor URL), serve /metrics and /healthz, and run cycles until SIGTERM or ^C."""
    if plan.url:
        pusher = SnapshotPusher(
            plan.url,
            stats=parts.stats,
            token=settings.api_token,
            token_file=settings.api_token_file,
            timeout_seconds=settings.push_timeout_seconds,
        )
        pusher.start()
        agent.sinks.append(pusher)
        parts.stoppables.append(pusher)
    registry = CollectorRegistry()
    registry.register(
        SnapshotCollector(
            lambda: agent.latest, parts.stats, plan.node_name, pid_labels=pid_labels, allocations=parts.allocations
        )
    )
    try:
        server = MetricsServer(
            registry, parts.stats, port=port, stale_after_seconds=max(60.0, 3 * plan.interval_seconds)
        )
    except OSError as e:
        fail(f"--port: cannot listen: {e}", EXIT_UNAVAILABLE)
    server.start()
    log.info(
        "collector on node %s: /metrics on port %d, every %.1fs", plan.node_name, server.port, plan.interval_seconds
    )

    def _terminate(signum: int, frame: FrameType | None) -> None:
        agent.stop(timeout_seconds=0)

    signal.signal(signal.SIGTERM, _terminate)
    try:
        agent.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        for part in parts.stoppables:
            part.stop()
        parts.backend.close()
    sys.stdout.flush()
