"""Builders of NodeSnapshots, node states and v1.Pod JSON for the advisor tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from advisor.placement.types import GpuState, NodeState, Resident, Topology
from collector.snapshot import LinkLevel

GIB = 1 << 30
H100 = "NVIDIA H100 80GB HBM3"


def dgx_links(gpus: int = 8) -> list[dict[str, Any]]:
    """All pairs NVLINK (an NVSwitch node)."""
    return [{"a": a, "b": b, "level": "NVLINK"} for a in range(gpus) for b in range(a + 1, gpus)]


def two_socket_links(gpus: int = 8) -> list[dict[str, Any]]:
    """Two NVLink islands of gpus/2, joined across sockets (NUMA)."""
    half = gpus // 2
    return [
        {"a": a, "b": b, "level": (LinkLevel.NVLINK if a // half == b // half else LinkLevel.NUMA).value}
        for a in range(gpus)
        for b in range(a + 1, gpus)
    ]


def process(
    pod: str, *, namespace: str = "ml", sm: float = 0.5, memory_bytes: int = 4 * GIB, workload: str | None = None
) -> dict[str, Any]:
    return {
        "pid": abs(hash((namespace, pod))) % 100000 + 1,
        "memory_used_bytes": memory_bytes,
        "sm_utilization_ratio": sm,
        "pod": {"namespace": namespace, "name": pod, "uid": f"uid-{pod}", "container": "main", "workload": workload},
    }


def snapshot(
    node: str,
    *,
    gpus: int = 8,
    model: str = H100,
    busy: Mapping[int, Sequence[dict[str, Any]]] | None = None,
    bandwidth: Mapping[int, float] | None = None,
    unhealthy: Sequence[int] = (),
    links: list[dict[str, Any]] | None = None,
    timestamp: datetime | None = None,
) -> dict[str, Any]:
    """A NodeSnapshot as JSON; `busy` maps a GPU index to its processes."""
    busy = busy or {}
    bandwidth = bandwidth or {}
    return {
        "node": node,
        "timestamp": (timestamp or datetime.now(UTC)).isoformat(),
        "gpus": [
            {
                "index": i,
                "uuid": f"GPU-{node}-{i}",
                "model": model,
                "healthy": i not in unhealthy,
                "memory_total_bytes": 80 * GIB,
                "memory_used_bytes": sum(p["memory_used_bytes"] for p in busy.get(i, ())),
                "utilization_ratio": min(1.0, sum(p["sm_utilization_ratio"] for p in busy.get(i, ()))),
                "memory_bandwidth_utilization_ratio": bandwidth.get(i, 0.3 if busy.get(i) else 0.0),
                "power_watts": 300.0,
                "temperature_celsius": 50.0,
                "processes": list(busy.get(i, ())),
            }
            for i in range(gpus)
        ],
        "links": dgx_links(gpus) if links is None else links,
    }


def mig_snapshot(
    node: str, layout: Sequence[Sequence[str | None]], model: str = "NVIDIA A100-SXM4-80GB"
) -> dict[str, Any]:
    """A snapshot of `node` whose GPU i is partitioned into the MIG instances `layout[i]` names, with their profile as
    the collector reads it (None: a MIG device without a profile, as an older collector sends it)."""
    raw = snapshot(node, gpus=len(layout), model=model)
    for gpu, profiles in zip(raw["gpus"], layout, strict=True):
        gpu["sharing"] = "mig"
        gpu["mig_devices"] = [
            {"index": i, "uuid": f"MIG-{node}-{gpu['index']}-{i}", "gpu_instance_id": i + 1, "compute_instance_id": 0}
            | ({} if profile is None else {"profile": profile})
            for i, profile in enumerate(profiles)
        ]
    return raw


def v1_pod(
    name: str = "train-0",
    *,
    gpus: int | None = 1,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A full v1.Pod as kube-scheduler sends it in ExtenderArgs (status, tolerations, probes and all)."""
    resources: dict[str, Any] = {
        "limits": {"cpu": "8", "memory": "64Gi"},
        "requests": {"cpu": "4", "memory": "32Gi"},
    }
    if gpus is not None:
        resources["limits"]["nvidia.com/gpu"] = str(gpus)
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": "0b4f7a2e-52a4-4c53-9c5e-3f3d7f2b9a10",
            "resourceVersion": "123456",
            "creationTimestamp": "2026-11-21T10:00:00Z",
            "labels": {"app": "trainer", "gpuadvisor.io/workload": "resnet50-bs64", **(labels or {})},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", **(annotations or {})},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "1c", "controller": True}
            ],
        },
        "spec": {
            "schedulerName": "gpuadvisor-scheduler",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "command": ["python", "train.py"],
                    "env": [{"name": "EPOCHS", "value": "3"}],
                    "resources": resources,
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                    "imagePullPolicy": "IfNotPresent",
                },
                {
                    "name": "sidecar",
                    "image": "busybox:1.36",
                    "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
                },
            ],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def node_state(
    name: str,
    *,
    allocated: dict[int, int] | None = None,
    residents: dict[int, tuple[Resident, ...]] | None = None,
    topology: Topology | None = None,
    model: str = H100,
    gpus: int = 8,
    observed_at: float | None = 1000.0,
    gangs: frozenset[str] = frozenset(),
    unhealthy: tuple[int, ...] = (),
) -> NodeState:
    """A scoring `NodeState`: `allocated` milli-GPU and `residents` per GPU index."""
    allocated = allocated or {}
    residents = residents or {}
    return NodeState(
        name=name,
        gpus=tuple(
            GpuState(
                index=i,
                model=model,
                healthy=i not in unhealthy,
                memory_total_bytes=80 * GIB,
                memory_used_bytes=sum(r.memory_used_bytes for r in residents.get(i, ())),
                allocated_milli=allocated.get(i, 0),
                residents=residents.get(i, ()),
            )
            for i in range(gpus)
        ),
        topology=topology or Topology.uniform(gpus, LinkLevel.NVLINK),
        observed_at_seconds=observed_at,
        gangs=gangs,
    )
