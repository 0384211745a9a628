"""What a bound pod holds on its node, as the Kubernetes API says: its GPUs (`PodAllocation`) and its CPU/memory
requests (`PodResources`).

The cluster state (`advisor.cluster.state.ClusterState`) keeps one of each per pod from the watch
(`advisor.cluster.kube`) and the DRA index (`advisor.cluster.dra`); a node's scoring view is built from them
(`advisor.cluster.nodeview`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from advisor.placement.types import PodRequest


@dataclass(frozen=True, slots=True)
class PodAllocation:
    """A pod bound to a node that holds GPUs (from the Kubernetes API); `started_seconds` is its `status.startTime`
    in Unix seconds — the clock of a default `ClusterState` (`time.time`), against which `jct_leave_times` measures
    how long it has run — or None before the kubelet has started it."""

    pod: str
    node: str
    gpus: int = 0
    gpu_milli: int = 0
    gpu_memory_bytes: int | None = None
    workload: str | None = None
    gang: str | None = None
    started_seconds: float | None = None
    # GPUs known by UUID to be this pod's (Dynamic Resource Allocation names the device): (GPU UUID, milli held
    # there: 1000 for a whole GPU, a MIG instance's share of its parent). They are reserved on exactly those GPUs.
    pinned: tuple[tuple[str, int], ...] = ()
    # MIG instances it holds by profile, (profile, count), asked as `nvidia.com/mig-<profile>` (the device plugin's
    # mixed strategy): taken among its node's free instances of that profile.
    mig: tuple[tuple[str, int], ...] = ()


def holds_gpus(a: PodAllocation) -> bool:
    """Whether an allocation holds any GPU (whole, a share, pinned devices or MIG instances)."""
    return a.gpus > 0 or a.gpu_milli > 0 or a.gpu_memory_bytes is not None or bool(a.pinned) or bool(a.mig)


def merged_allocation(own: PodAllocation | None, claimed: PodAllocation | None) -> PodAllocation | None:
    """A pod's allocation from its own resources (`own`, which leaves out the resources a claim serves: KEP-5004)
    and from its ResourceClaims (`claimed`, `advisor.cluster.dra`); None when together they hold no GPU."""
    if claimed is None:
        return own if own is not None and holds_gpus(own) else None
    if own is None:
        return claimed
    return dataclasses.replace(
        own,
        node=own.node,
        gpus=own.gpus + claimed.gpus,
        gpu_milli=own.gpu_milli if own.gpu_milli or claimed.gpus else claimed.gpu_milli,
        pinned=(*own.pinned, *claimed.pinned),
    )


def allocation_of(pod: str, request: PodRequest, node: str, started_seconds: float | None = None) -> PodAllocation:
    """What pod `pod` (its key, `namespace/name`), which asks for `request`, holds once bound to `node`."""
    return PodAllocation(
        pod=pod,
        node=node,
        gpus=request.whole_gpus,
        gpu_milli=request.share_milli,
        gpu_memory_bytes=request.gpu_memory_bytes,
        workload=request.workload,
        gang=request.gang,
        started_seconds=started_seconds,
        mig=request.mig,
    )


@dataclass(frozen=True, slots=True)
class PodResources:
    """CPU (milli-CPU) and memory (MiB) that a bound, non-terminated pod requests on its node (Kubernetes API)."""

    pod: str
    node: str
    cpu_milli: int
    memory_mib: int
