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
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Annotated, NoReturn, Protocol

import typer
from prometheus_client import CollectorRegistry, generate_latest

from collector.access import GpuAccessMonitor, NoGpuBackend
from collector.agent import CollectorAgent, SnapshotSink
from collector.backend import BackendUnavailableError, GpuBackend
from collector.exporter import MetricsServer, SnapshotCollector
from collector.logs import configure_logging
from collector.podmap import PidResolver
from collector.pods import PodLookup
from collector.push import SnapshotPusher, push_targets
from collector.settings import CollectorSettings
from collector.sim import SimulatedBackend
from collector.stats import CollectorStats

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


def render_prometheus(agent: CollectorAgent, *, pid_labels: bool = False) -> str:
    """The exposition text of the agent's latest snapshot, through a fresh registry."""
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: agent.latest, agent.stats, agent.node, pid_labels=pid_labels))
    return generate_latest(registry).decode()


@app.command("run")
def run(  # noqa: PLR0917 - Typer maps every option to a parameter
    node: Annotated[str | None, typer.Option(help="Node name (default: $GPUADVISOR_NODE_NAME, else hostname).")] = None,
    port: Annotated[
        int | None, typer.Option(help="Port of /metrics and /healthz (default 9400).", min=0, max=65535)
    ] = None,
    interval_s: Annotated[
        float | None, typer.Option("--interval-s", help="Seconds between cycles (default 5).")
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
    node_name = node or settings.node_name or socket.gethostname()
    interval_seconds = interval_s if interval_s is not None else settings.interval_seconds
    if interval_seconds <= 0:
        fail(f"--interval-s: expected a positive number of seconds, got {interval_seconds}")
    root = proc_root or settings.proc_root
    if simulate is None and not root.is_dir():
        fail(f"--proc-root: {root} is not a directory")
    use_kube = not (no_kube or settings.no_kube or simulate is not None)
    url = advisor_url or settings.advisor_url
    if url and not once:
        try:
            push_targets(url, lambda host, port: [])
        except ValueError as e:
            fail(f"--advisor-url: {e}")
    stats = CollectorStats()

    backend: GpuBackend
    resolver: PidResolver | None = None
    pods: PodLookup | None = None
    nvml_error: str | None = None
    access: GpuAccessMonitor | None = None
    if simulate is not None:
        simulated = SimulatedBackend(simulate, seed=seed, node=node_name)
        backend, resolver, pods = simulated, simulated, simulated.pods
    else:
        try:
            from collector.nvml import NvmlBackend

            backend = NvmlBackend(nvml_library or settings.nvml_library)
        except BackendUnavailableError as e:
            if once or not use_kube:
                fail(str(e), EXIT_UNAVAILABLE)
            # a DaemonSet pod without GPU access: keep serving /metrics and /healthz, which say so (collector.access)
            backend, nvml_error = NoGpuBackend(), str(e)

    sinks: list[SnapshotSink] = []
    stoppables: list[_Stoppable] = []
    if use_kube:
        from collector import kube

        try:
            api = kube.make_api_client()
        except kube.KubeUnavailableError as e:
            backend.close()
            fail(f"{e} (use --no-kube to run without it)", EXIT_UNAVAILABLE)
        index = kube.PodIndex(api, node_name, stats=stats)
        pods = index
        if simulate is None:
            access = GpuAccessMonitor(kube.NodeReader(api, node_name, stats=stats), stats=stats, nvml_error=nvml_error)
        if once:
            try:
                index.refresh()
            except kube.TRANSIENT_ERRORS as e:
                stats.add_error("kube")
                log.warning("Kubernetes API unreachable, pods known by UID only: %s", e)
        else:
            index.start()
            annotator = kube.PodAnnotator(api, node_name, stats=stats, grace_seconds=settings.annotation_grace_seconds)
            annotator.start()
            sinks.append(annotator)
            stoppables += [index, annotator]

    agent = CollectorAgent(
        backend=backend,
        node=node_name,
        proc_root=root,
        resolver=resolver,
        pods=pods,
        sinks=sinks,
        interval_seconds=interval_seconds,
        stats=stats,
        access=access,
    )
    if once:
        snapshot = agent.run_cycle()
        backend.close()
        if snapshot is None:
            fail("the collection cycle failed (see the log above)", EXIT_UNAVAILABLE)
        if output_format is OutputFormat.json:
            typer.echo(snapshot.model_dump_json(indent=2))
        else:
            typer.echo(render_prometheus(agent, pid_labels=pid_labels or settings.pid_labels), nl=False)
        return

    if url:
        pusher = SnapshotPusher(
            url,
            stats=stats,
            token=settings.api_token,
            token_file=settings.api_token_file,
            timeout_seconds=settings.push_timeout_seconds,
        )
        pusher.start()
        agent.sinks.append(pusher)
        stoppables.append(pusher)
    registry = CollectorRegistry()
    registry.register(
        SnapshotCollector(lambda: agent.latest, stats, node_name, pid_labels=pid_labels or settings.pid_labels)
    )
    try:
        server = MetricsServer(
            registry,
            stats,
            port=port if port is not None else settings.port,
            stale_after_seconds=max(60.0, 3 * interval_seconds),
        )
    except OSError as e:
        fail(f"--port: cannot listen: {e}", EXIT_UNAVAILABLE)
    server.start()
    log.info("collector on node %s: /metrics on port %d, every %.1fs", node_name, server.port, interval_seconds)

    def _terminate(signum: int, frame: FrameType | None) -> None:
        agent.stop(timeout_seconds=0)

    signal.signal(signal.SIGTERM, _terminate)
    try:
        agent.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        for part in stoppables:
            part.stop()
        backend.close()
    sys.stdout.flush()
