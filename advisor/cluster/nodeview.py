"""One node's scoring view (`NodeState`) built from its latest snapshot and the allocations of the pods bound to it.

Allocation (which GPU is held by which pod):

* A pod known from the Kubernetes API (`PodAllocation`) holds what it requested: a whole GPU for each GPU it runs a
  process on, its `gpu_milli` on a shared GPU (a memory-only share counts as its fraction of the GPU memory). Whole
  GPUs it was granted but does not use yet are reserved among the free GPUs without processes (lowest index first).
  Its start time goes into each of its residents (`Resident.started_seconds`: the extender filter predicts from it
  when the pod leaves, `advisor.placement.waiting.jct_leave_times`).
* A pod seen only in telemetry (`--no-kube`, tests, `make up`, or a watch that lags): alone on its GPU it holds the
  whole GPU; sharing with other pods, each holds its share of the GPU memory (at least 100 milli, in steps of 50,
  capped so the GPU is at most full).
* Processes without a pod (host processes) hold nothing but count as residents for interference.
* A GPU whose collector could not read its process list (`GpuSnapshot.processes_known` false) is wholly taken.

MIG instances (`NodeState.mig_instances`, what pods asking `nvidia.com/mig-<profile>` or a DRA claim for a profile
are placed on) come from Dynamic Resource Allocation's devices where NVIDIA's DRA driver publishes the node's (they
say which are allocated), else from the snapshot's MIG devices with a profile. A bound pod asking instances by
profile (the device plugin's mixed strategy: which instance it got is not published) takes free instances of that
profile on its node, the GPUs with the fewest free instances first (`advisor.placement.mig.take`), until it goes.

Per-process memory-bandwidth use is not measured by NVML; the GPU's figure is split over its residents in proportion
to their SM use (evenly when that is unknown too).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from advisor.cluster.allocation import PodAllocation
from advisor.cluster.pods import pod_key
from advisor.placement.mig import MigProfileError, parse_profile, take
from advisor.placement.types import WHOLE_GPU_MILLI, GpuState, MigInstance, NodeState, Resident, Topology
from advisor.sharing import node_sharing
from collector.snapshot import GpuSnapshot, NodeSnapshot, ProcessSnapshot

log = logging.getLogger(__name__)

HOST_RESIDENT = "host"
_MIN_INFERRED_SHARE_MILLI = 100
_SHARE_STEP_MILLI = 50


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """A node's allocatable CPU/memory and what its pods request; free is the difference, at least 0."""

    cpu_allocatable_milli: int
    cpu_requested_milli: int
    memory_allocatable_mib: int
    memory_requested_mib: int


def _process_pod(p: ProcessSnapshot) -> tuple[str, str | None]:
    """(resident key, workload) of a process: `namespace/name`, the pod UID, or the host marker."""
    ref = p.pod
    if ref is None:
        return HOST_RESIDENT, None
    if ref.name:
        return pod_key(ref.namespace, ref.name), ref.workload
    if ref.uid:
        return f"uid:{ref.uid}", ref.workload
    return HOST_RESIDENT, ref.workload


@dataclass(slots=True)
class _Use:
    workload: str | None
    sm: float | None
    memory_bytes: int


def _residents(gpu: GpuSnapshot) -> dict[str, _Use]:
    uses: dict[str, _Use] = {}
    for p in gpu.processes:
        key, workload = _process_pod(p)
        use = uses.get(key)
        if use is None:
            use = uses[key] = _Use(workload, None, 0)
        if p.sm_utilization_ratio is not None:
            use.sm = (use.sm or 0.0) + p.sm_utilization_ratio
        use.memory_bytes += p.memory_used_bytes or 0
        use.workload = use.workload or workload
    return uses


def _inferred_share_milli(memory_bytes: int, total_bytes: int) -> int:
    if total_bytes <= 0:
        return _MIN_INFERRED_SHARE_MILLI
    milli = math.ceil(memory_bytes / total_bytes * WHOLE_GPU_MILLI / _SHARE_STEP_MILLI) * _SHARE_STEP_MILLI
    return max(_MIN_INFERRED_SHARE_MILLI, min(WHOLE_GPU_MILLI, milli))


def _gpu_state(gpu: GpuSnapshot, allocations: Mapping[str, PodAllocation]) -> tuple[GpuState, set[str]]:
    """One GPU's scoring view and the pods that hold it."""
    uses = _residents(gpu)
    total_memory = gpu.memory_total_bytes or 0
    pods = [k for k in uses if k != HOST_RESIDENT]
    allocated = 0
    for key in pods:
        alloc = allocations.get(key)
        if alloc is not None and alloc.gpus > 0:
            allocated += WHOLE_GPU_MILLI
        elif alloc is not None and alloc.gpu_milli > 0:
            allocated += alloc.gpu_milli
        elif alloc is not None and alloc.gpu_memory_bytes is not None:
            allocated += _inferred_share_milli(alloc.gpu_memory_bytes, total_memory)
        elif alloc is not None and alloc.mig:
            allocated += min(WHOLE_GPU_MILLI, sum(_mig_milli(p) * n for p, n in alloc.mig))
        elif len(pods) == 1:
            allocated += WHOLE_GPU_MILLI
        else:
            allocated += _inferred_share_milli(uses[key].memory_bytes, total_memory)
    known_sm = [u.sm for u in uses.values() if u.sm is not None]
    sm_total = sum(known_sm)
    gpu_sm = gpu.utilization_ratio or 0.0
    gpu_bw = gpu.memory_bandwidth_utilization_ratio or 0.0
    n = len(uses)
    residents: list[Resident] = []
    for key, use in uses.items():
        sm = use.sm if use.sm is not None else (gpu_sm / n if not known_sm else 0.0)
        bw_share = sm / sm_total if sm_total > 0 else 1.0 / n
        alloc = allocations.get(key)
        # Positional (field order of `Resident` / `GpuState`): one per process on every ingest.
        residents.append(
            Resident(
                key,
                use.workload or (alloc.workload if alloc else None),
                0 if key == HOST_RESIDENT else (alloc.gpu_milli if alloc and alloc.gpu_milli else 0),
                min(1.0, sm),
                min(1.0, gpu_bw * bw_share),
                use.memory_bytes,
                alloc.started_seconds if alloc else None,
            )
        )
    state = GpuState(
        gpu.index,
        gpu.model,
        gpu.healthy,
        total_memory,
        gpu.memory_used_bytes or 0,
        gpu_sm,
        gpu_bw,
        # unknown is never free: a GPU whose process list could not be read may be in use
        min(WHOLE_GPU_MILLI, allocated) if gpu.processes_known else WHOLE_GPU_MILLI,
        tuple(residents),
        gpu.processes_known,
    )
    return state, set(pods)


def _reserve_pinned(
    gpus: list[GpuSnapshot],
    states: list[GpuState],
    holders_at: list[set[str]],
    seen: dict[str, int],
    allocations: Mapping[str, PodAllocation],
) -> None:
    """Reserve the GPUs that allocations name by UUID (DRA devices) where the pod runs no process yet; a whole GPU
    so reserved counts among the pod's GPUs, so it is not reserved a second time among the free ones."""
    position = {g.uuid: pos for pos, g in enumerate(gpus)}
    for alloc in allocations.values():
        for uuid, milli in alloc.pinned:
            pos = position.get(uuid)
            if pos is None:
                continue
            if alloc.pod not in holders_at[pos]:
                s = states[pos]
                states[pos] = dataclasses.replace(s, allocated_milli=min(WHOLE_GPU_MILLI, s.allocated_milli + milli))
                holders_at[pos].add(alloc.pod)
                if milli >= WHOLE_GPU_MILLI:
                    seen[alloc.pod] = seen.get(alloc.pod, 0) + 1


@functools.lru_cache(maxsize=256)
def _profile_name(text: str) -> str | None:
    """A snapshot's MIG profile spelling as placement names it, None (logged once per spelling) when it is none."""
    try:
        return parse_profile(text).name
    except MigProfileError as e:
        log.warning("snapshot MIG device left out of placement: %s", e)
        return None


def _mig_milli(profile: str) -> int:
    name = _profile_name(profile)
    return parse_profile(name).milli if name is not None else 0


def mig_instances_of(
    gpus: list[GpuSnapshot], dra: Iterable[tuple[str, str, bool]], allocations: Mapping[str, PodAllocation]
) -> tuple[MigInstance, ...]:
    """A node's MIG instances: DRA's (parent GPU UUID, profile, taken) where the node has any on its GPUs, else the
    healthy GPUs' snapshot MIG devices that carry a profile (free); then the bound pods' instances asked by profile
    taken among the free ones."""
    if not dra and not any(g.mig_devices for g in gpus):
        return ()
    gpu_index = {g.uuid: g.index for g in gpus}
    instances = [
        MigInstance(index, profile, taken) for uuid, profile, taken in dra if (index := gpu_index.get(uuid)) is not None
    ]
    if not instances:
        instances = [
            MigInstance(g.index, name)
            for g in gpus
            if g.healthy
            for m in g.mig_devices
            if m.profile is not None and (name := _profile_name(m.profile)) is not None
        ]
    if not instances:
        return ()
    held = [a.mig for a in allocations.values() if a.mig]
    return take(instances, held) if held else tuple(instances)


def topology_of(snapshot: NodeSnapshot, gpus: list[GpuSnapshot]) -> Topology:
    """The link topology of a snapshot's GPUs (`gpus` in position order)."""
    position = {g.index: pos for pos, g in enumerate(gpus)}
    links = [
        (position[link.a], position[link.b], link.level)
        for link in snapshot.links
        if link.a in position and link.b in position
    ]
    return Topology.from_links(len(gpus), links)


def build_node_state(
    snapshot: NodeSnapshot,
    allocations: Mapping[str, PodAllocation],
    *,
    observed_at_seconds: float | None,
    topology: Callable[[NodeSnapshot, list[GpuSnapshot]], Topology] = topology_of,
    capacity: NodeCapacity | None = None,
    labels: Mapping[str, str] | None = None,
    mig: Iterable[tuple[str, str, bool]] = (),
) -> NodeState:
    """The scoring view of one node from its latest snapshot, the allocations of pods bound to it, (when known)
    its CPU/memory, and how its GPUs are shared (its snapshot's sharing facts and MIG devices, then its labels:
    `advisor.sharing.node_sharing`); `mig` are its MIG instances (parent GPU UUID, profile, taken) from Dynamic
    Resource Allocation, kept where the snapshot has the parent GPU (`mig_instances_of`)."""
    gpus = sorted(snapshot.gpus, key=lambda g: g.index)
    node_topology = topology(snapshot, gpus)
    states: list[GpuState] = []
    seen: dict[str, int] = {}
    holders_at: list[set[str]] = []
    for g in gpus:
        state, holders = _gpu_state(g, allocations)
        states.append(state)
        holders_at.append(holders)
        for pod in holders:
            seen[pod] = seen.get(pod, 0) + 1
    _reserve_pinned(gpus, states, holders_at, seen, allocations)
    for alloc in allocations.values():
        missing = alloc.gpus - seen.get(alloc.pod, 0)
        for pos, s in enumerate(states):
            if missing <= 0:
                break
            if s.healthy and s.allocated_milli == 0 and not s.residents:
                states[pos] = GpuState(
                    index=s.index,
                    model=s.model,
                    healthy=s.healthy,
                    memory_total_bytes=s.memory_total_bytes,
                    memory_used_bytes=s.memory_used_bytes,
                    sm_utilization_ratio=s.sm_utilization_ratio,
                    memory_bandwidth_utilization_ratio=s.memory_bandwidth_utilization_ratio,
                    allocated_milli=WHOLE_GPU_MILLI,
                    residents=s.residents,
                )
                missing -= 1
    gangs = frozenset(a.gang for a in allocations.values() if a.gang)
    c = capacity
    sharing, source = node_sharing(
        labels, (g.sharing for g in snapshot.gpus if g.healthy), any(g.mig_devices for g in snapshot.gpus)
    )
    return NodeState(
        name=snapshot.node,
        gpus=tuple(states),
        topology=node_topology,
        observed_at_seconds=observed_at_seconds,
        gangs=gangs,
        cpu_allocatable_milli=c.cpu_allocatable_milli if c else None,
        cpu_free_milli=max(0, c.cpu_allocatable_milli - c.cpu_requested_milli) if c else None,
        memory_allocatable_mib=c.memory_allocatable_mib if c else None,
        memory_free_mib=max(0, c.memory_allocatable_mib - c.memory_requested_mib) if c else None,
        sharing_mode=sharing,
        sharing_source=source,
        mig_instances=mig_instances_of(gpus, mig, allocations),
    )
