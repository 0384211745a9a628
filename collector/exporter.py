"""Prometheus exposition of the latest snapshot (docs/design.md §3) and the /metrics + /healthz server.

`SnapshotCollector` is a custom prometheus-client Collector: every scrape builds fresh metric families from the
latest NodeSnapshot, so series of vanished pods or GPUs disappear by themselves. Unknown values are left out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from collector.kubelet_pods import DeviceAllocation, gpu_of_device
from collector.pods import PodInfo
from collector.snapshot import GpuSnapshot, NodeSnapshot, ProcessSnapshot
from collector.stats import CollectorStats

GPU_LABELS = ("node", "gpu", "uuid")
POD_LABELS = (*GPU_LABELS, "namespace", "pod", "container", "pod_uid", "owner_kind", "owner_name")
ALLOCATION_LABELS = (
    *GPU_LABELS,
    "device",
    "resource",
    "namespace",
    "pod",
    "container",
    "pod_uid",
    "owner_kind",
    "owner_name",
)
HOST_OWNER_KIND = "host"
ERROR_KINDS = (
    "nvml",
    "gpu_lost",
    "process_gone",
    "cgroup",
    "kube",
    "podresources",
    "annotate",
    "push",
    "push_retry",
    "gpu_access",
    "cycle",
)


@dataclass(frozen=True, slots=True)
class PodSeries:
    """GPU use of one pod container (or of host processes) on one GPU, summed over its processes."""

    labels: tuple[str, ...]
    memory_used_bytes: int | None
    utilization_ratio: float | None


def _sum_or_none(values: Iterable[float | int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(sum(known)) if known else None


def _process_labels(node: str, gpu: GpuSnapshot, process: ProcessSnapshot) -> tuple[str, ...]:
    pod = process.pod
    base = (node, str(gpu.index), gpu.uuid)
    if pod is None:
        return (*base, "", "", "", "", HOST_OWNER_KIND, "")
    return (*base, pod.namespace, pod.name, pod.container, pod.uid, pod.owner_kind, pod.owner_name)


def pod_series(snapshot: NodeSnapshot, *, pid_labels: bool = False) -> list[PodSeries]:
    """Per-pod (per-process with `pid_labels`) series; host processes of a GPU share one series marked `host`."""
    groups: dict[tuple[str, ...], list[ProcessSnapshot]] = {}
    for gpu in snapshot.gpus:
        for process in gpu.processes:
            labels = _process_labels(snapshot.node, gpu, process)
            if pid_labels:
                labels = (*labels, str(process.pid))
            groups.setdefault(labels, []).append(process)
    series: list[PodSeries] = []
    for labels, processes in groups.items():
        memory = _sum_or_none(p.memory_used_bytes for p in processes)
        utilization = _sum_or_none(p.sm_utilization_ratio for p in processes)
        series.append(
            PodSeries(
                labels=labels,
                memory_used_bytes=None if memory is None else int(memory),
                utilization_ratio=None if utilization is None else min(1.0, utilization),
            )
        )
    return series


Allocations = Callable[[], Sequence[tuple[DeviceAllocation, PodInfo | None]]]


class SnapshotCollector(Collector):
    """Metric families of the latest snapshot returned by `source` plus the collector's own stats, and — where the
    kubelet tells (`allocations`, `collector.kube.KubeletPodIndex.allocations`) — which pod holds which GPU device,
    used or idle."""

    def __init__(
        self,
        source: Callable[[], NodeSnapshot | None],
        stats: CollectorStats,
        node: str,
        *,
        pid_labels: bool = False,
        allocations: Allocations | None = None,
    ) -> None:
        self._source = source
        self._stats = stats
        self._node = node
        self._pid_labels = pid_labels
        self._allocations = allocations

    def collect(self) -> Iterator[Metric]:
        snapshot = self._source()
        if snapshot is not None:
            yield from self._gpu_families(snapshot)
            yield from self._pod_families(snapshot)
            if self._allocations is not None:
                yield self._allocation_family(snapshot, self._allocations())
        yield from self._own_families()

    def _allocation_family(
        self, snapshot: NodeSnapshot, allocations: Sequence[tuple[DeviceAllocation, PodInfo | None]]
    ) -> Metric:
        allocated = GaugeMetricFamily(
            "gpuadvisor_pod_gpu_allocated",
            "1 for each GPU device (whole GPU, shared replica, MIG device) the kubelet allocated to a pod's container, "
            "whether the pod uses it or not; gpu and uuid name the GPU holding the device, empty when NVML shows none.",
            labels=list(ALLOCATION_LABELS),
        )
        for allocation, info in allocations:
            gpu = gpu_of_device(allocation.device_id, snapshot.gpus)
            allocated.add_metric(
                [
                    self._node,
                    "" if gpu is None else str(gpu.index),
                    "" if gpu is None else gpu.uuid,
                    allocation.device_id,
                    allocation.resource,
                    allocation.namespace,
                    allocation.pod,
                    allocation.container,
                    "" if info is None else info.uid,
                    "" if info is None else info.owner_kind,
                    "" if info is None else info.owner_name,
                ],
                1,
            )
        return allocated

    def _gpu_families(self, snapshot: NodeSnapshot) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "gpuadvisor_gpu_info",
            "GPU identity (value 1).",
            labels=[*GPU_LABELS, "model", "driver_version", "pci_bus_id"],
        )
        gauges: dict[str, tuple[GaugeMetricFamily, Callable[[GpuSnapshot], float | int | None]]] = {
            name: (GaugeMetricFamily(name, doc, labels=list(GPU_LABELS)), getter)
            for name, doc, getter in (
                ("gpuadvisor_gpu_memory_total_bytes", "GPU memory size.", lambda g: g.memory_total_bytes),
                ("gpuadvisor_gpu_memory_used_bytes", "GPU memory in use.", lambda g: g.memory_used_bytes),
                (
                    "gpuadvisor_gpu_utilization_ratio",
                    "Fraction of time a kernel ran (0..1).",
                    lambda g: g.utilization_ratio,
                ),
                (
                    "gpuadvisor_gpu_memory_bandwidth_utilization_ratio",
                    "Fraction of time device memory was read or written (0..1).",
                    lambda g: g.memory_bandwidth_utilization_ratio,
                ),
                ("gpuadvisor_gpu_power_watts", "Power draw.", lambda g: g.power_watts),
                ("gpuadvisor_gpu_temperature_celsius", "GPU core temperature.", lambda g: g.temperature_celsius),
                (
                    "gpuadvisor_gpu_healthy",
                    "1 while NVML answers for the GPU, 0 once it is lost.",
                    lambda g: int(g.healthy),
                ),
            )
        }
        energy = CounterMetricFamily(
            "gpuadvisor_gpu_energy_joules", "Energy used since the driver was loaded.", labels=list(GPU_LABELS)
        )
        mig_total = GaugeMetricFamily(
            "gpuadvisor_mig_memory_total_bytes",
            "Memory of a MIG device; gpu/uuid name its parent GPU.",
            labels=[*GPU_LABELS, "mig_index", "mig_uuid", "gpu_instance_id", "compute_instance_id"],
        )
        mig_used = GaugeMetricFamily(
            "gpuadvisor_mig_memory_used_bytes",
            "Memory in use on a MIG device; gpu/uuid name its parent GPU.",
            labels=[*GPU_LABELS, "mig_index", "mig_uuid", "gpu_instance_id", "compute_instance_id"],
        )
        for gpu in snapshot.gpus:
            labels = [snapshot.node, str(gpu.index), gpu.uuid]
            info.add_metric([*labels, gpu.model, snapshot.driver_version, gpu.pci_bus_id], 1)
            for family, getter in gauges.values():
                value = getter(gpu)
                if value is not None:
                    family.add_metric(labels, float(value))
            if gpu.energy_joules_total is not None:
                energy.add_metric(labels, gpu.energy_joules_total)
            for mig in gpu.mig_devices:
                mig_labels = [
                    *labels,
                    str(mig.index),
                    mig.uuid,
                    "" if mig.gpu_instance_id is None else str(mig.gpu_instance_id),
                    "" if mig.compute_instance_id is None else str(mig.compute_instance_id),
                ]
                if mig.memory_total_bytes is not None:
                    mig_total.add_metric(mig_labels, mig.memory_total_bytes)
                if mig.memory_used_bytes is not None:
                    mig_used.add_metric(mig_labels, mig.memory_used_bytes)
        yield info
        yield from (family for family, _ in gauges.values())
        yield energy
        yield mig_total
        yield mig_used

    def _pod_families(self, snapshot: NodeSnapshot) -> Iterator[Metric]:
        labels = [*POD_LABELS, "pid"] if self._pid_labels else list(POD_LABELS)
        memory = GaugeMetricFamily(
            "gpuadvisor_pod_gpu_memory_used_bytes", "GPU memory used by a pod's processes on one GPU.", labels=labels
        )
        utilization = GaugeMetricFamily(
            "gpuadvisor_pod_gpu_utilization_ratio",
            "SM utilisation of a pod's processes on one GPU (0..1).",
            labels=labels,
        )
        for series in pod_series(snapshot, pid_labels=self._pid_labels):
            if series.memory_used_bytes is not None:
                memory.add_metric(list(series.labels), series.memory_used_bytes)
            if series.utilization_ratio is not None:
                utilization.add_metric(list(series.labels), series.utilization_ratio)
        yield memory
        yield utilization

    def _own_families(self) -> Iterator[Metric]:
        view = self._stats.view()
        duration = GaugeMetricFamily(
            "gpuadvisor_collector_cycle_duration_seconds", "Wall time of the last collection cycle.", labels=["node"]
        )
        if view.cycle_duration_seconds is not None:
            duration.add_metric([self._node], view.cycle_duration_seconds)
        errors = CounterMetricFamily(
            "gpuadvisor_collector_errors", "Failed or skipped reads, by kind.", labels=["node", "kind"]
        )
        for kind in sorted(set(ERROR_KINDS) | set(view.errors)):
            errors.add_metric([self._node, kind], view.errors.get(kind, 0))
        last = GaugeMetricFamily(
            "gpuadvisor_collector_last_success_timestamp_seconds",
            "Unix time the last successful cycle finished.",
            labels=["node"],
        )
        if view.last_success_timestamp_seconds is not None:
            last.add_metric([self._node], view.last_success_timestamp_seconds)
        access = GaugeMetricFamily(
            "gpuadvisor_collector_gpu_access_missing",
            "1 when this collector cannot see the GPUs of its node (reason: nvml_unavailable, no_gpu_visible).",
            labels=["node", "reason"],
        )
        access.add_metric([self._node, view.gpu_access_reason or ""], 0 if view.gpu_access_reason is None else 1)
        yield duration
        yield errors
        yield last
        yield access


class MergedCollector(Collector):
    """Several collectors' families as one exposition: one family per metric name holding every collector's samples.
    One `/metrics` for several nodes' agents (`gpuadvisor up`), which a registry cannot hold side by side: it refuses
    two collectors of the same metric names."""

    def __init__(self, collectors: Sequence[Collector]) -> None:
        self._collectors = tuple(collectors)

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for collector in self._collectors:
            for family in collector.collect():
                held = families.get(family.name)
                if held is None:
                    families[family.name] = family
                else:
                    held.samples.extend(family.samples)
        yield from families.values()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds would flood the log."""


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class MetricsServer:
    """`/metrics` (the registry), `/healthz` (200 while the last successful cycle is recent, else 503 with the reason:
    no cycle yet, a stale one, or no GPU access) and `/livez` (the same without GPU access: the DaemonSet's liveness
    probe, since restarting a pod that has no GPU access would not give it any)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        stats: CollectorStats,
        *,
        host: str = "0.0.0.0",
        port: int = 9400,
        stale_after_seconds: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._metrics = make_wsgi_app(registry)
        self._stats = stats
        self._stale_after_seconds = stale_after_seconds
        self._clock = clock
        self._server = make_server(
            host, port, self._app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler
        )
        self.port: int = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="collector-metrics", daemon=True)

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path in ("/healthz", "/livez"):
            status, body = self._health(liveness=path == "/livez")
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [body.encode()]
        if path in ("/metrics", "/"):
            return self._metrics(environ, start_response)  # type: ignore[no-any-return]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: try /metrics, /healthz or /livez\n"]

    def _health(self, *, liveness: bool) -> tuple[str, str]:
        view = self._stats.view()
        if view.gpu_access_message is not None and not liveness:
            return "503 Service Unavailable", view.gpu_access_message + "\n"
        last = view.last_success_timestamp_seconds
        if last is None:
            return "503 Service Unavailable", "no successful collection cycle yet\n"
        age_seconds = self._clock() - last
        if age_seconds > self._stale_after_seconds:
            return "503 Service Unavailable", f"last successful cycle {age_seconds:.0f}s ago\n"
        return "200 OK", "ok\n"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
