"""The job-history recorder: finished GPU pods (from a kmock API through the real client) → executions rows."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kmock
import pytest

from collector.kube import make_api_client
from profiler.kube import KubeCluster
from profiler.recorder import Recorder, execution_from_pod
from profiler.store import db, repo

NODES = kmock.resource("", "v1", "nodes")
PODS = kmock.resource("", "v1", "pods")


def _pod(
    name: str, *, phase: str, gpus: int | None, labels: dict[str, str] | None = None, **meta: Any
) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus is not None else {}
    finished = {"terminated": {"exitCode": 0, "finishedAt": "2026-11-20T12:30:00Z"}}
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-11-20T10:00:00Z",
            "labels": labels or {},
            "ownerReferences": [{"kind": "Job", "name": f"{name}-job", "controller": True}],
            **meta,
        },
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "main", "image": "x", "resources": resources}]},
        "status": {
            "phase": phase,
            "startTime": "2026-11-20T10:05:00Z",
            "containerStatuses": [{"name": "main", "state": finished if phase != "Running" else {"running": {}}}],
        },
    }


def test_a_finished_gpu_pod_becomes_an_execution() -> None:
    pod = _pod(
        "train-1",
        phase="Succeeded",
        gpus=4,
        labels={"gpuadvisor.io/workload": "bert-base", "kueue.x-k8s.io/queue-name": "research"},
    )
    record = execution_from_pod(pod, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, mean_utilization_ratio=0.5)
    assert record is not None
    assert record.job_id == "ml/Job/train-1-job"
    assert record.submit_time == datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
    assert (record.end_time - record.submit_time).total_seconds() == 2.5 * 3600
    assert (record.gpu_model, record.gpu_count, record.workload) == ("NVIDIA-A100-SXM4-80GB", 4, "bert-base")
    assert (record.user, record.queue, record.node) == ("ml", "research", "gpu-1")


def _share_pod(resources: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    pod = _pod("shared", phase="Succeeded", gpus=None, annotations=annotations or {})
    pod["spec"]["containers"][0]["resources"] = resources
    return pod


@pytest.mark.parametrize(
    ("pod", "count", "milli", "memory_bytes"),
    [
        (_share_pod({"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192"}}), 1, None, 8192 * 2**20),
        (_share_pod({"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"}}), 1, 300, None),
        (_share_pod({"requests": {"gpuadvisor.io/gpu-milli": "250"}}), 1, 250, None),
        (
            _share_pod({}, {"gpuadvisor.io/gpu-milli": "500", "gpuadvisor.io/gpu-memory-bytes": "10Gi"}),
            1,
            500,
            10 * 2**30,
        ),
        (_share_pod({"limits": {"aliyun.com/gpu-mem": "4"}}), 1, None, 4 * 2**30),
        (_share_pod({"limits": {"volcano.sh/vgpu-number": "2"}}), 2, None, None),
    ],
    ids=["HAMi memory", "HAMi cores", "gpu-milli resource", "gpu-milli annotations", "gpushare", "Volcano whole"],
)
def test_gpu_shares_are_recorded_as_the_scheduler_reads_them(
    pod: dict[str, Any], count: int, milli: int | None, memory_bytes: int | None
) -> None:
    """The JCT model's labels and the scheduler agree on what a pod asked for (`collector.pod_requests`)."""
    record = execution_from_pod(pod, {}, mean_utilization_ratio=None)
    assert record is not None
    assert record.gpu_count == count
    assert record.extra.get("gpu_milli") == milli
    assert record.extra.get("gpu_memory_bytes") == memory_bytes


def test_a_pod_with_an_unreadable_gpu_request_is_left_out_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    pod = _share_pod({"limits": {"nvidia.com/gpu": "two"}})
    assert execution_from_pod(pod, {}, mean_utilization_ratio=None) is None
    assert "spec.containers[0].resources.limits.nvidia.com/gpu" in caplog.text


@pytest.mark.parametrize(
    "pod",
    [
        _pod("cpu-only", phase="Succeeded", gpus=None),
        _pod("still-running", phase="Running", gpus=1),
        _pod("trial", phase="Succeeded", gpus=1, labels={"gpuadvisor.io/trialrun": "r1"}),
    ],
    ids=["no GPU", "not finished", "profiler trial"],
)
def test_pods_that_are_not_finished_gpu_jobs_are_skipped(pod: dict[str, Any]) -> None:
    assert execution_from_pod(pod, {}, mean_utilization_ratio=None) is None


@pytest.mark.asyncio
async def test_recorder_records_finished_pods_once_with_mean_utilisation(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    kmock.objects[NODES, None, "gpu-1"] = {
        "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
    }
    kmock.objects[PODS, "ml", "train-2"] = _pod("train-2", phase="Succeeded", gpus=2)
    kmock.objects[PODS, "ml", "web"] = _pod("web", phase="Succeeded", gpus=None)
    engine = db.make_engine(f"sqlite:///{tmp_path}/store.db")
    db.upgrade(engine)
    sessions = db.session_factory(engine)
    cluster = KubeCluster(make_api_client(str(kmock.url).rstrip("/")))
    recorder = Recorder(sessions=sessions, node_labels=cluster.node_labels, source="k8s/test")

    running = _pod("train-2", phase="Running", gpus=2)
    for stamp, ratio in (("2026-11-20T10:10:00Z", "0.6"), ("2026-11-20T10:20:00Z", "0.8")):
        annotations = {"gpuadvisor.io/updated-at": stamp, "gpuadvisor.io/gpu-utilization": ratio}
        assert recorder.observe({**running, "metadata": {**running["metadata"], "annotations": annotations}}) is None

    pods = await asyncio.to_thread(cluster.list_pods, "ml", {})
    recorded = [r for pod in pods if (r := await asyncio.to_thread(recorder.observe, pod)) is not None]
    assert [r.job_id for r in recorded] == ["ml/Job/train-2-job"]
    assert [await asyncio.to_thread(recorder.observe, pod) for pod in pods] == [None, None]  # already recorded

    restarted = Recorder(sessions=sessions, node_labels=cluster.node_labels, source="k8s/test")
    for pod in pods:  # a restarted recorder sees the same pods again: same row, not a second one
        await asyncio.to_thread(restarted.observe, pod)
    with sessions() as s:
        (row,) = repo.list_executions(session=s)
    assert row.gpu_model == "NVIDIA-H100-80GB-HBM3"
    assert row.gpu_count == 2
    assert row.source == "k8s/test"
    assert row.mean_utilization_ratio == pytest.approx(0.7)
    engine.dispose()
