"""Turns one backend reading plus PID→pod identities into a NodeSnapshot (pure: no /proc, no API, no NVML).

A process is attributed to its pod (full identity from the pod index, or its UID alone), to the host (its cgroup
names no pod), or, when its cgroup could not be read, to nobody: `owner_kind="unknown"`. An unreadable cgroup
file says nothing about where the process runs, so it must not be counted as host use.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime

from collector.backend import NodeReading
from collector.podmap import CgroupIdentity
from collector.pods import PodLookup
from collector.snapshot import GpuSnapshot, NodeSnapshot, PodRef, ProcessSnapshot

UNRESOLVED_OWNER_KIND = "unknown"
UNRESOLVED = PodRef(owner_kind=UNRESOLVED_OWNER_KIND)


def pod_ref(identity: CgroupIdentity | None, pods: PodLookup) -> PodRef | None:
    """The pod of a process: full identity when the pod index knows the UID, the UID alone otherwise, None on host."""
    if identity is None:
        return None
    info = pods.get(identity.pod_uid)
    if info is None:
        return PodRef(uid=identity.pod_uid)
    return PodRef(
        namespace=info.namespace,
        name=info.name,
        uid=info.uid,
        container=info.container_name(identity.container_id),
        workload=info.workload,
        owner_kind=info.owner_kind,
        owner_name=info.owner_name,
    )


def _attributed(
    gpu: GpuSnapshot,
    identities: Mapping[int, CgroupIdentity | None],
    gone: Collection[int],
    unresolved: Collection[int],
    pods: PodLookup,
) -> GpuSnapshot:
    if not gpu.processes:
        return gpu
    processes: list[ProcessSnapshot] = []
    for process in gpu.processes:
        if process.pid in gone:
            continue
        pod = UNRESOLVED if process.pid in unresolved else pod_ref(identities.get(process.pid), pods)
        # validated when read: a copy with the pod filled in needs no second validation
        processes.append(process.model_copy(update={"pod": pod}))
    return gpu.model_copy(update={"processes": tuple(processes)})


def build_snapshot(
    node: str,
    *,
    timestamp: datetime,
    reading: NodeReading,
    identities: Mapping[int, CgroupIdentity | None],
    pods: PodLookup,
    gone: Collection[int] = (),
    unresolved: Collection[int] = (),
) -> NodeSnapshot:
    """The NodeSnapshot of one cycle. PIDs in `gone` exited before their cgroup was read and are left out; PIDs in
    `unresolved` had a cgroup file that could not be read and are marked `owner_kind="unknown"`."""
    return NodeSnapshot(
        node=node,
        timestamp=timestamp,
        driver_version=reading.driver_version,
        gpus=tuple(_attributed(g, identities, gone, unresolved, pods) for g in reading.gpus),
        links=reading.links,
    )
