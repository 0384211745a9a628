"""GPU allocations from bound pods: the pure reading, and the watch against kmock (a Kubernetes API stand-in)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import kmock
import pytest
from kubernetes import client as k8s

from advisor.api.metrics import AdvisorMetrics
from advisor.kube import KubeWatch, allocation_from_pod
from advisor.state import ClusterState, PodAllocation
from collector.snapshot import NodeSnapshot
from tests.advisor.factories import snapshot


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
