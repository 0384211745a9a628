"""Turns one backend reading plus PID→pod identities into a NodeSnapshot (pure: no /proc, no API, no NVML)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime

from collector.backend import GpuReading, NodeReading, ProcessReading
from collector.podmap import CgroupIdentity
from collector.pods import PodLookup
from collector.snapshot import GpuSnapshot, Link, MigDeviceSnapshot, NodeSnapshot, PodRef, ProcessSnapshot


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


def _process(reading: ProcessReading, identity: CgroupIdentity | None, pods: PodLookup) -> ProcessSnapshot:
    return ProcessSnapshot(
        pid=reading.pid,
        memory_used_bytes=reading.memory_used_bytes,
        sm_utilization_ratio=reading.sm_utilization_ratio,
        pod=pod_ref(identity, pods),
    )


def _gpu(
    gpu: GpuReading, identities: Mapping[int, CgroupIdentity | None], gone: Collection[int], pods: PodLookup
) -> GpuSnapshot:
    return GpuSnapshot(
        index=gpu.index,
        uuid=gpu.uuid,
        model=gpu.model,
        pci_bus_id=gpu.pci_bus_id,
        healthy=gpu.healthy,
        memory_total_bytes=gpu.memory_total_bytes,
        memory_used_bytes=gpu.memory_used_bytes,
        utilization_ratio=gpu.utilization_ratio,
        memory_bandwidth_utilization_ratio=gpu.memory_bandwidth_utilization_ratio,
        power_watts=gpu.power_watts,
        temperature_celsius=gpu.temperature_celsius,
        energy_joules_total=gpu.energy_joules_total,
        processes=tuple(_process(p, identities.get(p.pid), pods) for p in gpu.processes if p.pid not in gone),
        mig_devices=tuple(
            MigDeviceSnapshot(
                index=m.index,
                uuid=m.uuid,
                gpu_instance_id=m.gpu_instance_id,
                compute_instance_id=m.compute_instance_id,
                memory_total_bytes=m.memory_total_bytes,
                memory_used_bytes=m.memory_used_bytes,
            )
            for m in gpu.mig_devices
        ),
    )


def build_snapshot(
    node: str,
    *,
    timestamp: datetime,
    reading: NodeReading,
    identities: Mapping[int, CgroupIdentity | None],
    pods: PodLookup,
    gone: Collection[int] = (),
) -> NodeSnapshot:
    """The NodeSnapshot of one cycle. PIDs in `gone` exited before their cgroup was read and are left out."""
    return NodeSnapshot(
        node=node,
        timestamp=timestamp,
        driver_version=reading.driver_version,
        gpus=tuple(_gpu(g, identities, gone, pods) for g in reading.gpus),
        links=tuple(Link(a=link.a, b=link.b, level=link.level) for link in reading.links),
    )
