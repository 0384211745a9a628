"""What one read of a node's GPUs returns, and the protocol every GPU source implements.

The NVML backend (`collector.nvml.NvmlBackend`) and the simulated one (`collector.sim.SimulatedBackend`) both
produce these frozen readings; everything above them (pod attribution, exporter, snapshots, the profiler's local
runner) works on readings only and never touches NVML. A value a device cannot report is `None`, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from collector.snapshot import LinkLevel


@dataclass(frozen=True, slots=True)
class ProcessReading:
    """One process NVML lists on a GPU (compute, graphics or MPS list), identified by its host PID."""

    pid: int
    memory_used_bytes: int | None
    sm_utilization_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class MigReading:
    """One MIG device (GPU instance slice) of a GPU in MIG mode."""

    index: int
    uuid: str
    gpu_instance_id: int | None
    compute_instance_id: int | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One physical GPU as read in one cycle; `healthy=False` means NVML answered GPU_IS_LOST (values then None)."""

    index: int
    uuid: str
    model: str
    pci_bus_id: str
    healthy: bool = True
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    utilization_ratio: float | None = None
    memory_bandwidth_utilization_ratio: float | None = None
    power_watts: float | None = None
    temperature_celsius: float | None = None
    energy_joules_total: float | None = None
    processes: tuple[ProcessReading, ...] = ()
    mig_devices: tuple[MigReading, ...] = ()


@dataclass(frozen=True, slots=True)
class LinkReading:
    """The best connection between GPUs `a` < `b` of one node."""

    a: int
    b: int
    level: LinkLevel


@dataclass(frozen=True, slots=True)
class NodeReading:
    """Everything one backend read returns: driver version, every GPU, the pairwise topology, and how many queries
    failed in this read by kind (e.g. `("nvml", 2)`), which the agent adds to `gpuadvisor_collector_errors_total`."""

    driver_version: str
    gpus: tuple[GpuReading, ...]
    links: tuple[LinkReading, ...] = ()
    error_counts: tuple[tuple[str, int], ...] = ()


class GpuBackend(Protocol):
    """A source of GPU readings. `read()` never raises for one bad device: that device is reported unhealthy."""

    def read(self) -> NodeReading:
        """Read every GPU, its processes (with newest per-process SM utilisation) and the topology."""
        ...

    def close(self) -> None:
        """Release the underlying library; `read()` must not be called afterwards."""
        ...


class BackendUnavailableError(RuntimeError):
    """The GPU source cannot be opened at all (e.g. no NVML library); the collector exits with code 3."""
