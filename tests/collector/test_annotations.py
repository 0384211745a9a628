"""Annotation planning (pure): what a pod's annotations say and when they are rewritten."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from collector.annotations import AnnotationPlanner, pod_usage, topology_annotation
from collector.snapshot import GpuSnapshot, Link, LinkLevel, NodeSnapshot, PodRef, ProcessSnapshot

T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
POD = PodRef(namespace="ml", name="ddp-0", uid="u1", owner_kind="Job", owner_name="ddp")


def _snapshot(*gpus: tuple[str, int, float | None, PodRef]) -> NodeSnapshot:
    return NodeSnapshot(
        node="n1",
        timestamp=T0,
        gpus=tuple(
            GpuSnapshot(
                index=i,
                uuid=uuid,
                processes=(ProcessSnapshot(pid=100 + i, memory_used_bytes=memory, sm_utilization_ratio=util, pod=pod),),
            )
            for i, (uuid, memory, util, pod) in enumerate(gpus)
        ),
    )


def test_multi_gpu_pod_sums_memory_and_averages_utilisation() -> None:
    usage = pod_usage(_snapshot(("GPU-b", 3, 0.9, POD), ("GPU-a", 5, 0.5, POD)))["u1"]
    assert (usage.memory_used_bytes, usage.utilization_ratio, usage.gpus, usage.job) == (
        8,
        0.7,
        ("GPU-a", "GPU-b"),
        "Job/ddp",
    )


def test_pods_known_only_by_uid_are_not_annotated() -> None:
    assert pod_usage(_snapshot(("GPU-a", 5, 0.5, PodRef(uid="u2")))) == {}


def test_unchanged_pod_is_refreshed_after_refresh_interval() -> None:
    planner = AnnotationPlanner(refresh_seconds=300)
    snapshot = _snapshot(("GPU-a", 1 << 30, 0.5, POD))
    assert len(planner.plan(snapshot, T0)) == 1
    assert planner.plan(snapshot, T0 + timedelta(seconds=299)) == []
    (patch,) = planner.plan(snapshot, T0 + timedelta(seconds=300))
    assert patch.annotations["gpuadvisor.io/updated-at"] == "2026-11-21T10:05:00Z"


def test_moving_to_another_gpu_is_a_meaningful_change() -> None:
    planner = AnnotationPlanner()
    planner.plan(_snapshot(("GPU-a", 1 << 30, 0.5, POD)), T0)
    (patch,) = planner.plan(_snapshot(("GPU-b", 1 << 30, 0.5, POD)), T0 + timedelta(seconds=1))
    assert patch.annotations["gpuadvisor.io/gpus"] == "GPU-b"


def test_topology_annotation_is_sorted_compact_json() -> None:
    links = [Link(a=1, b=2, level=LinkLevel.NUMA), Link(a=0, b=1, level=LinkLevel.NVLINK)]
    assert topology_annotation(links) == '[{"a":0,"b":1,"level":"NVLINK"},{"a":1,"b":2,"level":"NUMA"}]'


def test_a_pod_without_a_utilisation_sample_is_unknown_not_idle() -> None:
    """NVML gives no sample for a light process in some cycles (`nvidia-smi pmon` shows "-"): the annotation then
    says nothing (it is removed), never 0."""
    unsampled = _snapshot(("GPU-a", 1 << 30, None, POD))
    assert pod_usage(unsampled)["u1"].utilization_ratio is None
    (patch,) = AnnotationPlanner().plan(unsampled, T0)
    assert patch.annotations["gpuadvisor.io/gpu-utilization"] is None
    sampled = _snapshot(("GPU-a", 1 << 30, 0.25, POD))
    (patch,) = AnnotationPlanner().plan(sampled, T0)
    assert patch.annotations["gpuadvisor.io/gpu-utilization"] == "0.25"
