"""What one read of a node's GPUs returns, and the protocol every GPU source implements.

The NVML backend (`collector.nvml.NvmlBackend`) and the simulated one (`collector.sim.SimulatedBackend`) both
produce a `NodeReading` whose GPUs and links are already the wire types of the snapshot (`GpuSnapshot`, `Link`):
one type per thing, so a GPU is validated once, where it is read. Processes come with `pod=None`; pod attribution
(`collector.attribution`) fills it in. A value a device cannot report is `None`, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from collector.snapshot import GpuSnapshot, Link


@dataclass(frozen=True, slots=True)
class NodeReading:
    """Everything one backend read returns: driver version, every GPU (a lost one with `healthy=False` and no
    values), the pairwise topology, and how many queries failed in this read by kind (e.g. `("nvml", 2)`), which
    the agent adds to `gpuadvisor_collector_errors_total`."""

    driver_version: str
    gpus: tuple[GpuSnapshot, ...]
    links: tuple[Link, ...] = ()
    error_counts: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class SharingFacts:
    """How one GPU is set up for sharing, as the driver says: its compute mode (`default`, `exclusive-process`,
    `prohibited`; None when it cannot tell), whether MIG is on (None: cannot tell), and the PIDs the driver lists as
    clients of an MPS server on it."""

    compute_mode: str | None = None
    mig_enabled: bool | None = None
    mps_pids: frozenset[int] = frozenset()


class GpuBackend(Protocol):
    """A source of GPU readings. `read()` never raises for one bad device: that device is reported unhealthy."""

    def read(self) -> NodeReading:
        """Read every GPU, its processes (with newest per-process SM utilisation) and the topology."""
        ...

    def close(self) -> None:
        """Release the underlying library; `read()` must not be called afterwards."""
        ...


class BackendUnavailableError(RuntimeError):
    """The GPU source cannot be opened at all (e.g. no NVML library)."""
