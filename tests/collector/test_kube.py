"""Pod index and annotation patching against kmock (a Kubernetes API stand-in over HTTP) with the real client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import kmock
import pytest

from collector.annotations import AnnotationPlanner
from collector.kube import PodAnnotator, PodIndex, make_api_client
from collector.snapshot import GpuSnapshot, Link, LinkLevel, NodeSnapshot, PodRef, ProcessSnapshot
from collector.stats import CollectorStats
from tests.support.net import free_port

pytestmark = pytest.mark.asyncio
GIB = 1024**3
CID = "ef" * 32


def _pod(
    name: str,
    uid: str,
    *,
    node: str = "n1",
    owner: tuple[str, str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "ml", "uid": uid, "labels": labels or {}}
    if owner is not None:
        api_version, kind, owner_name = owner
        metadata["ownerReferences"] = [
            {"apiVersion": api_version, "kind": kind, "name": owner_name, "uid": "x", "controller": True}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "train"}]},
        "status": {
            "containerStatuses": [
                {
                    "name": "main",
                    "containerID": f"containerd://{CID}",
                    "image": "train",
                    "imageID": "sha256:0",
                    "ready": True,
                    "restartCount": 0,
                }
            ]
        },
    }


def _owned(name: str, owner: tuple[str, str, str]) -> dict[str, Any]:
    api_version, kind, owner_name = owner
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": owner_name, "controller": True}],
        }
    }


async def _eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    for _ in range(int(timeout_s / 0.05)):
        if check():
            return True
        await asyncio.sleep(0.05)
    return False


def _url(server: kmock.KubernetesEmulator) -> str:
    return str(server.url).rstrip("/")


async def test_index_holds_this_nodes_pods_with_top_level_owners(kmock: kmock.KubernetesEmulator) -> None:
    objects = kmock.objects
    objects["v1/pods", "ml", "web-1"] = _pod("web-1", "u-web", owner=("apps/v1", "ReplicaSet", "web-5d8f"))
    objects["apps/v1/replicasets", "ml", "web-5d8f"] = _owned("web-5d8f", ("apps/v1", "Deployment", "web"))
    objects["v1/pods", "ml", "trial-1"] = _pod("trial-1", "u-trial", owner=("batch/v1", "Job", "trial-job"))
    objects["batch/v1/jobs", "ml", "trial-job"] = _owned("trial-job", ("gpuadvisor.io/v1", "TrialRun", "resnet-sweep"))
    objects["v1/pods", "ml", "ddp-0"] = _pod("ddp-0", "u-ddp", owner=("kubeflow.org/v1", "PyTorchJob", "bert"))
    objects["v1/pods", "ml", "mpi-0"] = _pod("mpi-0", "u-mpi", owner=("kubeflow.org/v2beta1", "MPIJob", "hvd"))
    objects["v1/pods", "ml", "vc-0"] = _pod("vc-0", "u-vc", owner=("batch.volcano.sh/v1alpha1", "Job", "vcjob"))
    objects["v1/pods", "ml", "bare"] = _pod("bare", "u-bare", labels={"gpuadvisor.io/workload": "bert-base-bs32"})
    objects["v1/pods", "ml", "elsewhere"] = _pod("elsewhere", "u-other", node="n2")

    index = PodIndex(make_api_client(_url(kmock)), "n1", stats=CollectorStats())
    await asyncio.to_thread(index.refresh)

    owners = {}
    for uid in ("u-web", "u-trial", "u-ddp", "u-mpi", "u-vc", "u-bare"):
        info = index.get(uid)
        assert info is not None, uid
        owners[uid] = (info.owner_kind, info.owner_name)
    assert owners == {
        "u-web": ("Deployment", "web"),
        "u-trial": ("TrialRun", "resnet-sweep"),
        "u-ddp": ("PyTorchJob", "bert"),
        "u-mpi": ("MPIJob", "hvd"),
        "u-vc": ("Job", "vcjob"),
        "u-bare": ("", ""),
    }
    bare = index.get("u-bare")
    assert bare is not None
    assert bare.workload == "bert-base-bs32"
    assert bare.container_name(CID) == "main"
    assert index.get("u-other") is None
    assert len(index) == 6


async def test_watch_follows_added_and_deleted_pods(kmock: kmock.KubernetesEmulator) -> None:
    from kubernetes import client as k8s

    kmock.objects["v1/pods", "ml", "other-node"] = _pod("other-node", "u-other", node="n2")
    api = make_api_client(_url(kmock))
    index = PodIndex(api, "n1", stats=CollectorStats())
    index.start()
    try:
        assert await _eventually(index.synced.is_set)
        core = k8s.CoreV1Api(api)
        await asyncio.to_thread(core.create_namespaced_pod, "ml", cast(Any, _pod("new", "u-new")))
        assert await _eventually(lambda: index.get("u-new") is not None)
        await asyncio.to_thread(core.delete_namespaced_pod, "new", "ml")
        assert await _eventually(lambda: index.get("u-new") is None)
    finally:
        await asyncio.to_thread(index.stop)


async def test_api_outage_keeps_the_last_index_and_retries(kmock: kmock.KubernetesEmulator) -> None:
    kmock.objects["v1/pods", "ml", "p"] = _pod("p", "u-p")
    api = make_api_client(_url(kmock))
    stats = CollectorStats()
    index = PodIndex(api, "n1", stats=stats, backoff_initial_seconds=0.05, backoff_max_seconds=0.1)
    await asyncio.to_thread(index.refresh)
    api.configuration.host = f"http://127.0.0.1:{free_port()}"  # the API server becomes unreachable
    index.start()
    try:
        assert await _eventually(lambda: stats.view().errors.get("kube", 0) >= 3)
        assert index.get("u-p") is not None
        kmock.objects["v1/pods", "ml", "q"] = _pod("q", "u-q")
        api.configuration.host = _url(kmock)
        assert await _eventually(lambda: index.get("u-q") is not None)
    finally:
        await asyncio.to_thread(index.stop)


async def test_unreachable_api_is_counted() -> None:
    stats = CollectorStats()
    index = PodIndex(
        make_api_client(f"http://127.0.0.1:{free_port()}"), "n1", stats=stats, backoff_initial_seconds=0.05
    )
    index.start()
    try:
        assert await _eventually(lambda: stats.view().errors.get("kube", 0) >= 2)
    finally:
        await asyncio.to_thread(index.stop)
    assert len(index) == 0


def _snapshot(
    memory_bytes: int, utilization: float, *, with_pod: bool = True, links: tuple[Link, ...] = ()
) -> NodeSnapshot:
    pod = PodRef(
        namespace="ml", name="train-0", uid="u-train", container="main", owner_kind="PyTorchJob", owner_name="bert"
    )
    processes = (ProcessSnapshot(pid=7, memory_used_bytes=memory_bytes, sm_utilization_ratio=utilization, pod=pod),)
    gpu = GpuSnapshot(index=0, uuid="GPU-0", processes=processes if with_pod else ())
    return NodeSnapshot(
        node="n1",
        timestamp=datetime(2026, 11, 21, tzinfo=UTC),
        gpus=(gpu, GpuSnapshot(index=1, uuid="GPU-1")),
        links=links,
    )


async def test_the_node_annotation_says_how_each_gpu_is_shared_and_follows_its_changes(
    kmock: kmock.KubernetesEmulator,
) -> None:
    kmock.objects["v1/pods", "ml", "train-0"] = _pod("train-0", "u-train")
    kmock.objects["v1/nodes", None, "n1"] = {"metadata": {"name": "n1"}}
    annotator = PodAnnotator(
        make_api_client(_url(kmock)),
        "n1",
        stats=CollectorStats(),
        planner=AnnotationPlanner(grace_seconds=120, refresh_seconds=600),
        clock=lambda: datetime(2026, 11, 21, 10, 0, tzinfo=UTC),
    )
    base = _snapshot(4 * GIB, 0.5)

    def shared(*modes: str) -> NodeSnapshot:
        gpus = tuple(g.model_copy(update={"sharing": m}) for g, m in zip(base.gpus, modes, strict=True))
        return base.model_copy(update={"gpus": gpus})

    def node_sharing() -> Any:
        return json.loads(kmock.objects["v1/nodes", None, "n1"]["metadata"]["annotations"]["gpuadvisor.io/gpu-sharing"])

    await asyncio.to_thread(annotator.apply, shared("mps", ""))
    assert node_sharing() == {"GPU-0": "mps"}  # GPU-1 could not tell: left out
    assert await asyncio.to_thread(annotator.apply, shared("mps", "")) == 0  # unchanged: no node patch
    assert await asyncio.to_thread(annotator.apply, shared("time-slicing", "time-slicing")) == 1
    assert node_sharing() == {"GPU-0": "time-slicing", "GPU-1": "time-slicing"}


async def test_annotations_patched_on_meaningful_change_and_removed_after_grace(
    kmock: kmock.KubernetesEmulator,
) -> None:
    kmock.objects["v1/pods", "ml", "train-0"] = _pod("train-0", "u-train")
    kmock.objects["v1/nodes", None, "n1"] = {"metadata": {"name": "n1"}}
    now = [datetime(2026, 11, 21, 10, 0, tzinfo=UTC)]
    stats = CollectorStats()
    annotator = PodAnnotator(
        make_api_client(_url(kmock)),
        "n1",
        stats=stats,
        planner=AnnotationPlanner(grace_seconds=120, refresh_seconds=600),
        clock=lambda: now[0],
    )
    links = (Link(a=0, b=1, level=LinkLevel.NVLINK),)

    def annotations() -> dict[str, str]:
        result: dict[str, str] = kmock.objects["v1/pods", "ml", "train-0"]["metadata"].get("annotations", {})
        return result

    assert await asyncio.to_thread(annotator.apply, _snapshot(4 * GIB, 0.5, links=links)) == 2  # pod + node
    assert annotations() == {
        "gpuadvisor.io/gpu-memory-used-bytes": str(4 * GIB),
        "gpuadvisor.io/gpu-utilization": "0.5",
        "gpuadvisor.io/gpus": "GPU-0",
        "gpuadvisor.io/updated-at": "2026-11-21T10:00:00Z",
        "gpuadvisor.io/job": "PyTorchJob/bert",
    }
    topology = json.loads(
        kmock.objects["v1/nodes", None, "n1"]["metadata"]["annotations"]["gpuadvisor.io/gpu-topology"]
    )
    assert topology == [{"a": 0, "b": 1, "level": "NVLINK"}]

    now[0] += timedelta(seconds=5)
    assert await asyncio.to_thread(annotator.apply, _snapshot(4 * GIB + (10 << 20), 0.52, links=links)) == 0  # noise
    now[0] += timedelta(seconds=5)
    assert await asyncio.to_thread(annotator.apply, _snapshot(6 * GIB, 0.52, links=links)) == 1
    assert annotations()["gpuadvisor.io/gpu-memory-used-bytes"] == str(6 * GIB)

    now[0] += timedelta(seconds=60)
    assert await asyncio.to_thread(annotator.apply, _snapshot(0, 0, with_pod=False, links=links)) == 0  # within grace
    now[0] += timedelta(seconds=120)
    assert await asyncio.to_thread(annotator.apply, _snapshot(0, 0, with_pod=False, links=links)) == 1
    assert annotations() == {}
    assert stats.view().errors == {}


async def test_annotating_a_deleted_pod_is_not_an_error(kmock: kmock.KubernetesEmulator) -> None:
    kmock.objects["v1/nodes", None, "n1"] = {"metadata": {"name": "n1"}}
    stats = CollectorStats()
    annotator = PodAnnotator(make_api_client(_url(kmock)), "n1", stats=stats)
    assert await asyncio.to_thread(annotator.apply, _snapshot(GIB, 0.1)) == 1  # only the node
    assert stats.view().errors == {}
