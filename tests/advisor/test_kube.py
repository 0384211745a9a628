"""GPU allocations and CPU/memory requests from bound pods, allocatable from nodes: the pure reading, and the watch
against kmock (a Kubernetes API stand-in)."""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, cast

import kmock
import pytest
from kubernetes import client as k8s

from advisor.api.metrics import AdvisorMetrics
from advisor.cluster.kube import (
    KubeWatch,
    allocatable_from_node,
    allocation_from_pod,
    pending_from_pod,
    resources_from_pod,
)
from advisor.cluster.state import ClusterState, PodAllocation, PodResources
from collector.snapshot import NodeSnapshot
from tests.advisor.factories import snapshot
from tests.support.net import free_port


def pod(
    name: str,
    *,
    node: str | None = "n1",
    gpus: int | None = 2,
    phase: str = "Running",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    limits = {"cpu": "1"} if gpus is None else {"cpu": "1", "nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "train", "resources": {"limits": limits}}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"u-{name}",
            "labels": {"gpuadvisor.io/workload": "bert", "volcano.sh/job-name": "job-1"},
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def test_a_bound_running_gpu_pod_is_an_allocation() -> None:
    assert allocation_from_pod(pod("a")) == PodAllocation(
        pod="ml/a", node="n1", gpus=2, gpu_milli=0, gpu_memory_bytes=None, workload="bert", gang="job-1"
    )
    share = allocation_from_pod(pod("s", gpus=None, annotations={"gpuadvisor.io/gpu-milli": "300"}))
    assert share is not None
    assert (share.gpus, share.gpu_milli) == (0, 300)


@pytest.mark.parametrize(
    "manifest",
    [pod("unbound", node=None), pod("cpu-only", gpus=None), pod("done", phase="Succeeded"), pod("bad", gpus=-1)],
)
def test_pods_that_hold_no_gpu_are_not_allocations(manifest: dict[str, Any]) -> None:
    assert allocation_from_pod(manifest) is None


async def _eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    for _ in range(int(timeout_s / 0.05)):
        if check():
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.mark.asyncio
async def test_the_watch_reserves_and_releases_gpus_of_bound_pods(kmock: kmock.KubernetesEmulator) -> None:
    kmock.objects["v1/pods", "ml", "train-0"] = pod("train-0")
    kmock.objects["v1/nodes", None, "n1"] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    configuration = k8s.Configuration()
    configuration.host = str(kmock.url).rstrip("/")
    api = k8s.CoreV1Api(k8s.ApiClient(configuration))
    state = ClusterState()
    state.ingest(NodeSnapshot.model_validate(snapshot("n1")))
    metrics = AdvisorMetrics()
    watch = KubeWatch(state, metrics, api, read_timeout_seconds=0.5).start()
    try:
        assert await _eventually(lambda: state.nodes["n1"].free_gpus == 6)
        assert state.nodes["n1"].gangs == frozenset({"job-1"})
        await asyncio.to_thread(api.create_namespaced_pod, "ml", cast(Any, pod("train-1", gpus=1)))
        assert await _eventually(lambda: state.nodes["n1"].free_gpus == 5)
        await asyncio.to_thread(api.delete_namespaced_pod, "train-0", "ml")
        assert await _eventually(lambda: state.nodes["n1"].free_gpus == 7)
        assert metrics.allocations._value.get() == 1
    finally:
        await asyncio.to_thread(watch.stop)


def node(name: str, cpu: str = "8", memory: str = "64Gi") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": "8", "pods": "110"}},
    }


def cpu_pod(
    name: str, cpu: str, memory: str = "1Gi", *, node: str | None = "n1", phase: str = "Running"
) -> dict[str, Any]:
    manifest = pod(name, node=node, gpus=None, phase=phase)
    manifest["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": memory}}
    return manifest


def test_every_bound_non_terminated_pod_holds_its_cpu_and_memory() -> None:
    gpu = pod("g")  # limits cpu 1 (its request) and 2 GPUs
    assert resources_from_pod(gpu) == PodResources("ml/g", "n1", 1000, 0)
    web = cpu_pod("web", "1500m", "512Mi")
    web["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "3", "memory": "64Mi"}}}]
    web["spec"]["overhead"] = {"cpu": "250m", "memory": "128Mi"}
    assert resources_from_pod(web) == PodResources("ml/web", "n1", 3250, 640)
    terminating = cpu_pod("t", "1", phase="Running")
    terminating["metadata"]["deletionTimestamp"] = "2026-11-21T10:00:00Z"
    assert resources_from_pod(terminating) == PodResources("ml/t", "n1", 1000, 1024)  # kube-scheduler counts it too
    assert resources_from_pod(cpu_pod("p", "1", phase="Pending")) is not None
    for gone in (cpu_pod("u", "1", node=None), cpu_pod("s", "1", phase="Succeeded"), cpu_pod("f", "1", phase="Failed")):
        assert resources_from_pod(gone) is None
    assert resources_from_pod(cpu_pod("zero", "0", "0")) is None  # nothing to count: no record kept
    assert resources_from_pod(cpu_pod("bad", "lots")) is None


def test_a_node_object_gives_its_allocatable() -> None:
    assert allocatable_from_node(node("n1", "7910m", "1Ti")) == (7910, 1024 * 1024)
    assert allocatable_from_node({"metadata": {"name": "x"}, "status": {}}) is None


def _api(kmock: kmock.KubernetesEmulator) -> k8s.CoreV1Api:
    configuration = k8s.Configuration()
    configuration.host = str(kmock.url).rstrip("/")
    return k8s.CoreV1Api(k8s.ApiClient(configuration))


@pytest.mark.asyncio
async def test_the_watch_tracks_free_cpu_and_memory_of_every_bound_pod(kmock: kmock.KubernetesEmulator) -> None:
    kmock.objects["v1/pods", "ml", "train-0"] = pod("train-0")  # 2 GPUs, cpu 1
    kmock.objects["v1/pods", "ml", "web"] = cpu_pod("web", "2", "4Gi")  # no GPU
    kmock.objects["v1/pods", "ml", "done"] = cpu_pod("done", "4", phase="Succeeded")
    kmock.objects["v1/nodes", None, "n1"] = node("n1", "8", "64Gi")
    api = _api(kmock)
    state = ClusterState()
    state.ingest(NodeSnapshot.model_validate(snapshot("n1")))
    watch = KubeWatch(state, AdvisorMetrics(), api, read_timeout_seconds=0.5).start()

    def free() -> tuple[int | None, int | None]:
        return state.nodes["n1"].cpu_free_milli, state.nodes["n1"].memory_free_mib

    try:
        assert await _eventually(lambda: free() == (5000, 61440))
        assert state.nodes["n1"].cpu_allocatable_milli == 8000
        assert state.nodes["n1"].free_gpus == 6
        await asyncio.to_thread(api.create_namespaced_pod, "ml", cast(Any, cpu_pod("batch", "2500m", "10Gi")))
        assert await _eventually(lambda: free() == (2500, 51200))
        await asyncio.to_thread(api.delete_namespaced_pod, "web", "ml")
        assert await _eventually(lambda: free() == (4500, 55296))
        await asyncio.to_thread(api.patch_node, "n1", {"status": {"allocatable": {"cpu": "16"}}})
        assert await _eventually(lambda: free() == (12500, 55296))
        assert {r.pod for r in state.pod_resources()} == {"ml/train-0", "ml/batch"}
    finally:
        await asyncio.to_thread(watch.stop)


@pytest.mark.asyncio
async def test_the_watch_keeps_every_nodes_labels_for_node_selectors(kmock: kmock.KubernetesEmulator) -> None:
    t4 = node("t4")
    t4["metadata"]["labels"] = {"nvidia.com/gpu.product": "Tesla-T4"}
    kmock.objects["v1/nodes", None, "t4"] = t4
    kmock.objects["v1/nodes", None, "bare"] = node("bare")
    api = _api(kmock)
    state = ClusterState()
    watch = KubeWatch(state, AdvisorMetrics(), api, read_timeout_seconds=0.5).start()
    try:
        assert await _eventually(lambda: state.node_labels("t4") == {"nvidia.com/gpu.product": "Tesla-T4"})
        assert state.node_labels("bare") == {}  # seen, without labels
        assert state.node_labels("never-listed") is None
        await asyncio.to_thread(api.patch_node, "bare", {"metadata": {"labels": {"zone": "a"}}})
        assert await _eventually(lambda: state.node_labels("bare") == {"zone": "a"})
        await asyncio.to_thread(api.delete_node, "t4")
        assert await _eventually(lambda: state.node_labels("t4") is None)
    finally:
        await asyncio.to_thread(watch.stop)


def waiting(name: str, **changes: Any) -> dict[str, Any]:
    """An unbound Pending GPU pod with a priority, a creation time and a node selector."""
    manifest = pod(name, node=None, phase="Pending")
    manifest["metadata"]["creationTimestamp"] = "2026-11-21T10:00:00Z"
    manifest["spec"].update({"priority": 10, "schedulerName": "gpuadvisor-scheduler", "nodeSelector": {"zone": "a"}})
    manifest["spec"].update(changes)
    return manifest


def test_an_unbound_pending_gpu_pod_is_in_the_queue() -> None:
    queued = pending_from_pod(waiting("w"))
    assert queued is not None
    assert (queued.pod, queued.request.whole_gpus, queued.request.gang) == ("ml/w", 2, "job-1")
    assert (queued.scheduler, queued.priority) == ("gpuadvisor-scheduler", 10)
    assert queued.created_seconds == datetime(2026, 11, 21, 10, 0, tzinfo=UTC).timestamp()
    assert queued.placement is not None
    assert queued.placement.admits("n", {"zone": "a"})
    plain = pending_from_pod(pod("p", node=None, phase="Pending"))
    assert plain is not None
    assert (plain.scheduler, plain.priority, plain.created_seconds, plain.placement) == (
        "default-scheduler",
        0,
        None,
        None,
    )


@pytest.mark.parametrize(
    "manifest",
    [
        pod("bound", phase="Pending"),
        pod("cpu", node=None, gpus=None, phase="Pending"),
        pod("r", node=None),
        pod("bad", node=None, gpus=-1, phase="Pending"),
    ],
)
def test_bound_gpu_less_running_or_unreadable_pods_are_not_queued(manifest: dict[str, Any]) -> None:
    assert pending_from_pod(manifest) is None


@pytest.mark.asyncio
async def test_the_watch_keeps_the_pending_gpu_pods_until_they_are_bound(kmock: kmock.KubernetesEmulator) -> None:
    kmock.objects["v1/pods", "ml", "w"] = waiting("w")
    kmock.objects["v1/pods", "ml", "running"] = pod("running")
    api = _api(kmock)
    state = ClusterState()
    watch = KubeWatch(state, AdvisorMetrics(), api, read_timeout_seconds=0.5).start()
    try:
        assert await _eventually(lambda: [p.pod for p in state.pending()] == ["ml/w"])
        await asyncio.to_thread(api.create_namespaced_pod, "ml", cast(Any, waiting("urgent", priority=100)))
        assert await _eventually(lambda: [p.pod for p in state.pending()] == ["ml/urgent", "ml/w"])  # queue order
        await asyncio.to_thread(api.patch_namespaced_pod, "w", "ml", {"spec": {"nodeName": "n1"}})
        assert await _eventually(lambda: [p.pod for p in state.pending()] == ["ml/urgent"])
        await asyncio.to_thread(api.delete_namespaced_pod, "urgent", "ml")
        assert await _eventually(lambda: state.pending() == [])
    finally:
        await asyncio.to_thread(watch.stop)


@pytest.fixture
def tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process in a time zone 9 hours off UTC, so local-time readings show."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("tokyo")
def test_a_started_pod_carries_its_start_time_in_unix_seconds(caplog: pytest.LogCaptureFixture) -> None:
    expected = datetime(2026, 11, 21, 10, 0, tzinfo=UTC).timestamp()
    # `Z` as the API server writes it, `+00:00` as the client's serialiser does, an offset, and no offset (UTC).
    for raw in (
        "2026-11-21T10:00:00Z",
        "2026-11-21T10:00:00+00:00",
        "2026-11-21T11:00:00+01:00",
        "2026-11-21T10:00:00",
    ):
        manifest = pod("a")
        manifest["status"]["startTime"] = raw
        allocation = allocation_from_pod(manifest)
        assert allocation is not None
        assert allocation.started_seconds == expected, raw
    pending = allocation_from_pod(pod("p", phase="Pending"))  # the kubelet has not started it
    assert pending is not None
    assert pending.started_seconds is None
    for bad in ("yesterday", 1763719200):
        manifest = pod("bad")
        manifest["status"]["startTime"] = bad
        with caplog.at_level(logging.WARNING, logger="advisor.cluster.kube"):
            allocation = allocation_from_pod(manifest)
        assert allocation is not None  # still holds its GPUs
        assert allocation.started_seconds is None
        assert f"pod ml/bad: status.startTime {bad!r} is not an RFC 3339 time" in caplog.text


@pytest.mark.asyncio
async def test_the_watch_reads_start_times_through_the_client(kmock: kmock.KubernetesEmulator) -> None:
    started = pod("train-0")
    started["status"]["startTime"] = "2026-11-21T10:00:00Z"
    kmock.objects["v1/pods", "ml", "train-0"] = started
    state = ClusterState()
    watch = KubeWatch(state, AdvisorMetrics(), _api(kmock), read_timeout_seconds=0.5).start()
    try:
        assert await _eventually(lambda: len(state.allocations()) == 1)
        [allocation] = state.allocations()
        assert allocation.started_seconds == datetime(2026, 11, 21, 10, 0, tzinfo=UTC).timestamp()
    finally:
        await asyncio.to_thread(watch.stop)


class _Forbidding(http.server.BaseHTTPRequestHandler):
    """An API server that refuses every request, as one whose RBAC does not let the advisor list pods or nodes."""

    def do_GET(self) -> None:
        body = json.dumps({"kind": "Status", "code": 403, "message": "pods is forbidden"}).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def _watch_errors(metrics: AdvisorMetrics, watch: str, kind: str) -> float:
    return (
        metrics.registry.get_sample_value("gpuadvisor_advisor_kube_watch_errors_total", {"watch": watch, "kind": kind})
        or 0.0
    )


@pytest.mark.asyncio
async def test_the_watch_counts_a_forbidden_list_as_permanent_and_a_dead_server_as_temporary() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Forbidding)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    forbidden, down = AdvisorMetrics(), AdvisorMetrics()
    watches = []
    try:
        for metrics, port in ((forbidden, server.server_address[1]), (down, free_port())):
            configuration = k8s.Configuration()
            configuration.host = f"http://127.0.0.1:{port}"
            api = k8s.CoreV1Api(k8s.ApiClient(configuration))
            watches.append(KubeWatch(ClusterState(), metrics, api, read_timeout_seconds=0.5, pending=False).start())
        assert await _eventually(
            lambda: (
                _watch_errors(forbidden, "pods", "permanent") >= 1
                and _watch_errors(forbidden, "nodes", "permanent") >= 1
            )
        )
        assert _watch_errors(forbidden, "pods", "temporary") == 0
        assert await _eventually(lambda: _watch_errors(down, "pods", "temporary") >= 1)
        assert _watch_errors(down, "pods", "permanent") == 0
    finally:
        for w in watches:
            await asyncio.to_thread(w.stop)
        server.shutdown()
        server.server_close()
