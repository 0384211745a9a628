"""The NodeSnapshot wire format (docs/design.md §3): what one collector cycle saw on one node.

Shared by the collector (producer) and the advisor (consumer) so both sides validate the same schema.
Every quantity carries its unit in the field name; ratios are 0..1.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class LinkLevel(StrEnum):
    """How two GPUs of one node are connected, best first (the order matters: see `LINK_RANK`)."""

    NVLINK = "NVLINK"
    PCIE_SWITCH = "PCIE_SWITCH"
    PCIE_HOSTBRIDGE = "PCIE_HOSTBRIDGE"
    NUMA = "NUMA"
    SYSTEM = "SYSTEM"


LINK_RANK: dict[LinkLevel, int] = {level: rank for rank, level in enumerate(LinkLevel)}


class _Frozen(BaseModel):
    """Numbers are strict (`strict=True` on each): `true` is no byte count, `"3"` no index (issue 40)."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class PodRef(_Frozen):
    """The pod a GPU process belongs to; only `uid` is known when the pod index is unavailable."""

    namespace: str = ""
    name: str = ""
    uid: str = ""
    container: str = ""
    workload: str | None = None
    owner_kind: str = ""
    owner_name: str = ""


class ProcessSnapshot(_Frozen):
    pid: int = Field(ge=0, strict=True)
    memory_used_bytes: int | None = Field(default=None, ge=0, strict=True)
    sm_utilization_ratio: float | None = Field(default=None, ge=0.0, le=1.0, strict=True)
    pod: PodRef | None = None


class MigDeviceSnapshot(_Frozen):
    """A MIG slice of its parent GPU (the `GpuSnapshot` holding it)."""

    index: int = Field(ge=0, strict=True)
    uuid: str
    gpu_instance_id: int | None = Field(default=None, strict=True)
    compute_instance_id: int | None = Field(default=None, strict=True)
    memory_total_bytes: int | None = Field(default=None, ge=0, strict=True)
    memory_used_bytes: int | None = Field(default=None, ge=0, strict=True)
    # Its GPU instance's profile as NVIDIA writes it ("1g.10gb", "3g.40gb", "1g.10gb+me"): what a pod asks for as
    # `nvidia.com/mig-<profile>`. None: unknown (the driver could not tell, or a snapshot of an older collector).
    # Not checked against a pattern here: a profile spelling this advisor does not know leaves that instance out of
    # placement (`advisor.cluster.nodeview`), never the whole snapshot.
    profile: str | None = Field(default=None, min_length=1, max_length=64)


class GpuSnapshot(_Frozen):
    index: int = Field(ge=0, strict=True)
    uuid: str
    model: str = ""
    pci_bus_id: str = ""
    healthy: bool = Field(default=True, strict=True)
    memory_total_bytes: int | None = Field(default=None, ge=0, strict=True)
    memory_used_bytes: int | None = Field(default=None, ge=0, strict=True)
    utilization_ratio: float | None = Field(default=None, ge=0.0, le=1.0, strict=True)
    memory_bandwidth_utilization_ratio: float | None = Field(default=None, ge=0.0, le=1.0, strict=True)
    power_watts: float | None = Field(default=None, ge=0.0, strict=True)
    temperature_celsius: float | None = Field(default=None, strict=True)
    energy_joules_total: float | None = Field(default=None, ge=0.0, strict=True)
    processes: tuple[ProcessSnapshot, ...] = ()
    # False when this cycle could not tell which processes use the GPU (an NVML process list failed, or could not be
    # read whole): `processes` is then only what was read, and the advisor counts the GPU as taken. Absent in
    # snapshots of older collectors: known.
    processes_known: bool = Field(default=True, strict=True)
    mig_devices: tuple[MigDeviceSnapshot, ...] = ()
    # How the GPU is shared between processes (`collector.sharing`): "time-slicing" (default compute mode),
    # "mps" (MPS clients listed or a control daemon listening), "mig" (MIG on), "" when it cannot tell (an
    # exclusive or prohibited compute mode, a lost GPU, or a snapshot of an older collector, which has no field).
    sharing: str = ""
    # The compute mode NVML reports ("default", "exclusive-process", "prohibited"); None: unknown or not read.
    compute_mode: str | None = None


class Link(_Frozen):
    a: int = Field(ge=0, strict=True)
    b: int = Field(ge=0, strict=True)
    level: LinkLevel


class NodeSnapshot(_Frozen):
    node: str = Field(min_length=1)
    timestamp: datetime
    driver_version: str = ""
    gpus: tuple[GpuSnapshot, ...] = ()
    links: tuple[Link, ...] = ()
