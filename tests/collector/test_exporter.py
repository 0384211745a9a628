"""Prometheus exposition of snapshots: names, labels and base units of DESIGN §3, through a registry and over HTTP."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from collector.exporter import MetricsServer, SnapshotCollector
from collector.snapshot import GpuSnapshot, MigDeviceSnapshot, NodeSnapshot, PodRef, ProcessSnapshot
from collector.stats import CollectorStats

GIB = 1024**3
POD = PodRef(namespace="ml", name="train-0", uid="uid-1", container="main", owner_kind="PyTorchJob", owner_name="bert")
SNAPSHOT = NodeSnapshot(
    node="n1",
    timestamp=datetime(2026, 11, 21, 10, 0, tzinfo=UTC),
    driver_version="550.54.15",
    gpus=(
        GpuSnapshot(
            index=0,
            uuid="GPU-0",
            model="NVIDIA H100 80GB HBM3",
            pci_bus_id="00000000:17:00.0",
            memory_total_bytes=80 * GIB,
            memory_used_bytes=7 * GIB,
            utilization_ratio=0.9,
            memory_bandwidth_utilization_ratio=0.4,
            power_watts=350.5,
            temperature_celsius=70.0,
            energy_joules_total=1234.5,
            processes=(
                ProcessSnapshot(pid=10, memory_used_bytes=4 * GIB, sm_utilization_ratio=0.5, pod=POD),
                ProcessSnapshot(pid=11, memory_used_bytes=2 * GIB, sm_utilization_ratio=0.3, pod=POD),
                ProcessSnapshot(pid=12, memory_used_bytes=GIB, sm_utilization_ratio=None, pod=None),
                ProcessSnapshot(pid=13, memory_used_bytes=GIB, pod=PodRef(uid="uid-unknown")),
            ),
            mig_devices=(
                MigDeviceSnapshot(
                    index=0,
                    uuid="MIG-0",
                    gpu_instance_id=1,
                    compute_instance_id=0,
                    memory_total_bytes=10 * GIB,
                    memory_used_bytes=GIB,
                ),
            ),
        ),
        GpuSnapshot(index=1, uuid="GPU-1", model="NVIDIA H100 80GB HBM3", healthy=False),
    ),
)
GPU0 = {"node": "n1", "gpu": "0", "uuid": "GPU-0"}
POD_LABELS = {
    **GPU0,
    "namespace": "ml",
    "pod": "train-0",
    "container": "main",
    "pod_uid": "uid-1",
    "owner_kind": "PyTorchJob",
    "owner_name": "bert",
}
HOST_LABELS = {
    **GPU0,
    "namespace": "",
    "pod": "",
    "container": "",
    "pod_uid": "",
    "owner_kind": "host",
    "owner_name": "",
}


def _registry(snapshot: NodeSnapshot | None, stats: CollectorStats, *, pid_labels: bool = False) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: snapshot, stats, "n1", pid_labels=pid_labels))
    return registry


def test_gpu_metrics_in_base_units() -> None:
    registry = _registry(SNAPSHOT, CollectorStats())
    info = {**GPU0, "model": "NVIDIA H100 80GB HBM3", "driver_version": "550.54.15", "pci_bus_id": "00000000:17:00.0"}
    assert registry.get_sample_value("gpuadvisor_gpu_info", info) == 1
    expected = {
        "gpuadvisor_gpu_memory_total_bytes": 80 * GIB,
        "gpuadvisor_gpu_memory_used_bytes": 7 * GIB,
        "gpuadvisor_gpu_utilization_ratio": 0.9,
        "gpuadvisor_gpu_memory_bandwidth_utilization_ratio": 0.4,
        "gpuadvisor_gpu_power_watts": 350.5,
        "gpuadvisor_gpu_temperature_celsius": 70.0,
        "gpuadvisor_gpu_energy_joules_total": 1234.5,
        "gpuadvisor_gpu_healthy": 1,
    }
    for name, value in expected.items():
        assert registry.get_sample_value(name, GPU0) == pytest.approx(value), name
    mig = {**GPU0, "mig_index": "0", "mig_uuid": "MIG-0", "gpu_instance_id": "1", "compute_instance_id": "0"}
    assert registry.get_sample_value("gpuadvisor_mig_memory_used_bytes", mig) == GIB


def test_lost_gpu_reports_unhealthy_and_no_values() -> None:
    registry = _registry(SNAPSHOT, CollectorStats())
    gpu1 = {"node": "n1", "gpu": "1", "uuid": "GPU-1"}
    assert registry.get_sample_value("gpuadvisor_gpu_healthy", gpu1) == 0
    assert registry.get_sample_value("gpuadvisor_gpu_memory_used_bytes", gpu1) is None


def test_pod_series_sum_processes_and_mark_host_and_unknown_pods() -> None:
    registry = _registry(SNAPSHOT, CollectorStats())
    assert registry.get_sample_value("gpuadvisor_pod_gpu_memory_used_bytes", POD_LABELS) == 6 * GIB
    assert registry.get_sample_value("gpuadvisor_pod_gpu_utilization_ratio", POD_LABELS) == pytest.approx(0.8)
    assert registry.get_sample_value("gpuadvisor_pod_gpu_memory_used_bytes", HOST_LABELS) == GIB
    assert registry.get_sample_value("gpuadvisor_pod_gpu_utilization_ratio", HOST_LABELS) is None
    unknown = {**HOST_LABELS, "pod_uid": "uid-unknown", "owner_kind": ""}
    assert registry.get_sample_value("gpuadvisor_pod_gpu_memory_used_bytes", unknown) == GIB


def test_pid_labels_only_when_asked() -> None:
    plain = _registry(SNAPSHOT, CollectorStats())
    assert plain.get_sample_value("gpuadvisor_pod_gpu_memory_used_bytes", {**POD_LABELS, "pid": "10"}) is None
    with_pids = _registry(SNAPSHOT, CollectorStats(), pid_labels=True)
    assert with_pids.get_sample_value("gpuadvisor_pod_gpu_memory_used_bytes", {**POD_LABELS, "pid": "10"}) == 4 * GIB


def test_fresh_families_each_scrape_drop_vanished_series() -> None:
    current: list[NodeSnapshot] = [SNAPSHOT]
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: current[0], CollectorStats(), "n1"))
    assert registry.get_sample_value("gpuadvisor_pod_gpu_memory_used_bytes", POD_LABELS) == 6 * GIB
    current[0] = SNAPSHOT.model_copy(update={"gpus": ()})
    assert registry.get_sample_value("gpuadvisor_pod_gpu_memory_used_bytes", POD_LABELS) is None


def test_own_metrics() -> None:
    stats = CollectorStats()
    stats.add_error("push", 3)
    stats.record_cycle(0.004, 1_700_000_000.0, success=True)
    registry = _registry(None, stats)
    assert registry.get_sample_value("gpuadvisor_collector_errors_total", {"node": "n1", "kind": "push"}) == 3
    assert registry.get_sample_value("gpuadvisor_collector_errors_total", {"node": "n1", "kind": "nvml"}) == 0
    assert registry.get_sample_value("gpuadvisor_collector_cycle_duration_seconds", {"node": "n1"}) == 0.004
    assert registry.get_sample_value("gpuadvisor_collector_last_success_timestamp_seconds", {"node": "n1"}) == 1.7e9


@pytest.fixture
def server() -> Iterator[tuple[MetricsServer, CollectorStats, list[float]]]:
    stats = CollectorStats()
    now = [1000.0]
    served = MetricsServer(
        _registry(SNAPSHOT, stats), stats, host="127.0.0.1", port=0, stale_after_seconds=30, clock=lambda: now[0]
    )
    served.start()
    yield served, stats, now
    served.stop()


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_http_scrape_and_health(server: tuple[MetricsServer, CollectorStats, list[float]]) -> None:
    served, stats, now = server
    status, body = _get(served.port, "/metrics")
    assert status == 200
    assert 'gpuadvisor_gpu_power_watts{gpu="0",node="n1",uuid="GPU-0"} 350.5' in body
    assert _get(served.port, "/healthz")[0] == 503
    stats.record_cycle(0.01, 995.0, success=True)
    assert _get(served.port, "/healthz") == (200, "ok\n")
    now[0] = 1100.0
    assert _get(served.port, "/healthz")[0] == 503
    assert _get(served.port, "/nope")[0] == 404
