"""The NVML backend: the only module that imports pynvml (nvidia-ml-py).

Every query goes through `_Query.__call__`, which turns NVML "not supported" and "function not found" into None
(the latter logged once per function), maps GPU_IS_LOST to an unhealthy GPU, and counts any other failure.
Static facts (UUID, name, PCI bus id, topology) are read once at start-up; everything else each `read()`.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pynvml

from collector.backend import (
    BackendUnavailableError,
    GpuReading,
    LinkReading,
    MigReading,
    NodeReading,
    ProcessReading,
)
from collector.snapshot import LinkLevel

log = logging.getLogger(__name__)

LIBRARY_ENV = "GPUADVISOR_NVML_LIBRARY"
T = TypeVar("T")

_ABSENT = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,  # an older driver without this struct version
    }
)
# nvmlGpuTopologyLevel_t → our link levels (INTERNAL/SINGLE/MULTIPLE all mean "behind PCIe switches").
_TOPOLOGY_LEVELS: dict[int, LinkLevel] = {
    pynvml.NVML_TOPOLOGY_INTERNAL: LinkLevel.PCIE_SWITCH,
    pynvml.NVML_TOPOLOGY_SINGLE: LinkLevel.PCIE_SWITCH,
    pynvml.NVML_TOPOLOGY_MULTIPLE: LinkLevel.PCIE_SWITCH,
    pynvml.NVML_TOPOLOGY_HOSTBRIDGE: LinkLevel.PCIE_HOSTBRIDGE,
    pynvml.NVML_TOPOLOGY_NODE: LinkLevel.NUMA,
    pynvml.NVML_TOPOLOGY_SYSTEM: LinkLevel.SYSTEM,
}


class GpuLostError(Exception):
    """NVML answered GPU_IS_LOST for this device."""


class _Query:
    """Runs NVML calls: absent values become None, lost GPUs raise GpuLostError, other failures are counted."""

    def __init__(self) -> None:
        self._reported: set[tuple[str, int]] = set()
        self.errors: Counter[str] = Counter()

    def __call__(self, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(*args)
        except pynvml.NVMLError as e:
            self.absorb(fn.__name__, e)
            return None

    def absorb(self, function: str, error: pynvml.NVMLError) -> None:
        """Classify a failed call: raise GpuLostError for a lost GPU, else count (unless absent) and log once."""
        code = error.value
        if code == pynvml.NVML_ERROR_GPU_IS_LOST:
            raise GpuLostError(function) from error
        if code not in _ABSENT:
            self.errors["nvml"] += 1
        if (function, code) not in self._reported:
            self._reported.add((function, code))
            level = logging.INFO if code in _ABSENT else logging.WARNING
            log.log(level, "NVML %s: %s (reported once)", function, error)


@dataclass(frozen=True, slots=True)
class _Identity:
    uuid: str
    model: str
    pci_bus_id: str


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _ratio(percent: int | float | None) -> float | None:
    return None if percent is None else min(1.0, max(0.0, percent / 100.0))


class NvmlBackend:
    """`GpuBackend` over NVML. `library_path` (or $GPUADVISOR_NVML_LIBRARY) names a libnvidia-ml.so.1 to use.

    Raises BackendUnavailableError when the library is missing or refuses to initialise.
    """

    def __init__(self, library_path: str | None = None) -> None:
        library_path = library_path or os.environ.get(LIBRARY_ENV) or None
        if library_path is not None:
            try:
                # pynvml loads "libnvidia-ml.so.1" by soname; a library already loaded with that soname is reused.
                ctypes.CDLL(library_path, mode=ctypes.RTLD_GLOBAL)
            except OSError as e:
                raise BackendUnavailableError(f"NVML library not found: {library_path} ({e})") from e
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound as e:
            raise BackendUnavailableError(f"NVML library not found: libnvidia-ml.so.1 ({e})") from e
        except pynvml.NVMLError as e:
            raise BackendUnavailableError(f"NVML initialisation failed: {e}") from e
        self._query = _Query()
        self._closed = False
        self.driver_version = _text(self._query(pynvml.nvmlSystemGetDriverVersion))
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as e:
            pynvml.nvmlShutdown()
            raise BackendUnavailableError(f"NVML cannot list the GPUs: {e}") from e
        self._handles: list[Any] = [self._query(pynvml.nvmlDeviceGetHandleByIndex, i) for i in range(count)]
        self._identities: list[_Identity | None] = [None] * count
        self._last_sample_us = [0] * count
        self._links: tuple[LinkReading, ...] | None = None
        for index, handle in enumerate(self._handles):
            if handle is not None:
                # identities now, so a GPU lost later keeps its UUID label; a GPU lost already is counted by read()
                with contextlib.suppress(GpuLostError):
                    self._identity(index)

    def _identity(self, index: int) -> _Identity:
        known = self._identities[index]
        if known is not None:
            return known
        handle = self._handles[index]
        pci = self._query(pynvml.nvmlDeviceGetPciInfo, handle)
        identity = _Identity(
            uuid=_text(self._query(pynvml.nvmlDeviceGetUUID, handle)),
            model=_text(self._query(pynvml.nvmlDeviceGetName, handle)),
            pci_bus_id=_text(pci.busId) if pci is not None else "",
        )
        self._identities[index] = identity
        return identity

    def read(self) -> NodeReading:
        self._query.errors.clear()
        gpus = tuple(self._read_gpu(index) for index in range(len(self._handles)))
        links = self._links if self._links is not None else self._read_links(gpus)
        return NodeReading(
            driver_version=self.driver_version,
            gpus=gpus,
            links=links,
            error_counts=tuple(sorted(self._query.errors.items())),
        )

    def _read_gpu(self, index: int) -> GpuReading:
        handle = self._handles[index]
        try:
            if handle is None:
                handle = self._handles[index] = self._query(pynvml.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                raise GpuLostError("nvmlDeviceGetHandleByIndex")
            identity = self._identity(index)
            return self._read_healthy(index, handle, identity)
        except GpuLostError:
            self._query.errors["gpu_lost"] += 1
            known = self._identities[index] or _Identity(uuid="", model="", pci_bus_id="")
            return GpuReading(
                index=index, uuid=known.uuid, model=known.model, pci_bus_id=known.pci_bus_id, healthy=False
            )

    def _read_healthy(self, index: int, handle: Any, identity: _Identity) -> GpuReading:
        q = self._query
        memory = q(pynvml.nvmlDeviceGetMemoryInfo, handle, pynvml.nvmlMemory_v2) or q(
            pynvml.nvmlDeviceGetMemoryInfo, handle
        )
        rates = q(pynvml.nvmlDeviceGetUtilizationRates, handle)
        power_mw = q(pynvml.nvmlDeviceGetPowerUsage, handle)
        temperature = q(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
        energy_mj = q(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        return GpuReading(
            index=index,
            uuid=identity.uuid,
            model=identity.model,
            pci_bus_id=identity.pci_bus_id,
            healthy=True,
            memory_total_bytes=int(memory.total) if memory is not None else None,
            memory_used_bytes=int(memory.used) if memory is not None else None,
            utilization_ratio=_ratio(rates.gpu) if rates is not None else None,
            memory_bandwidth_utilization_ratio=_ratio(rates.memory) if rates is not None else None,
            power_watts=power_mw / 1000.0 if power_mw is not None else None,
            temperature_celsius=float(temperature) if temperature is not None else None,
            energy_joules_total=energy_mj / 1000.0 if energy_mj is not None else None,
            processes=self._read_processes(index, handle),
            mig_devices=self._read_migs(handle),
        )

    def _read_processes(self, index: int, handle: Any) -> tuple[ProcessReading, ...]:
        q = self._query
        memory_by_pid: dict[int, int | None] = {}
        for lister in (
            pynvml.nvmlDeviceGetComputeRunningProcesses,
            pynvml.nvmlDeviceGetGraphicsRunningProcesses,
            pynvml.nvmlDeviceGetMPSComputeRunningProcesses,
        ):
            for info in q(lister, handle) or ():
                used = None if info.usedGpuMemory is None else int(info.usedGpuMemory)
                previous = memory_by_pid.get(info.pid)
                # a PID may be listed as compute and graphics; its memory is the same allocation, not a sum
                memory_by_pid[info.pid] = used if previous is None else max(previous, used or 0)
        sm_by_pid = self._read_process_utilization(index, handle)
        return tuple(
            ProcessReading(
                pid=pid,
                memory_used_bytes=used,
                sm_utilization_ratio=None if sm_by_pid is None else sm_by_pid.get(pid, 0.0),
            )
            for pid, used in sorted(memory_by_pid.items())
        )

    def _read_process_utilization(self, index: int, handle: Any) -> dict[int, float] | None:
        """Newest SM-utilisation sample per PID since the previous read; None when the GPU cannot tell."""
        name = "nvmlDeviceGetProcessUtilization"
        try:
            samples = pynvml.nvmlDeviceGetProcessUtilization(handle, self._last_sample_us[index])
        except pynvml.NVMLLibraryMismatchError:
            self._query.absorb(name, pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND))
            return None
        except pynvml.NVMLError as e:
            if e.value == pynvml.NVML_ERROR_NOT_FOUND:
                return {}  # no process was sampled since the last read: all idle
            self._query.absorb(name, e)
            return None
        newest: dict[int, tuple[int, float]] = {}
        for sample in samples:
            ratio = _ratio(sample.smUtil) or 0.0
            seen = newest.get(sample.pid)
            if seen is None or sample.timeStamp >= seen[0]:
                newest[sample.pid] = (sample.timeStamp, ratio)
            self._last_sample_us[index] = max(self._last_sample_us[index], sample.timeStamp)
        return {pid: ratio for pid, (_, ratio) in newest.items()}

    def _read_migs(self, handle: Any) -> tuple[MigReading, ...]:
        q = self._query
        mode = q(pynvml.nvmlDeviceGetMigMode, handle)
        if not mode or mode[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            return ()
        migs: list[MigReading] = []
        for slot in range(q(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except pynvml.NVMLError as e:
                if e.value == pynvml.NVML_ERROR_GPU_IS_LOST:
                    raise GpuLostError("nvmlDeviceGetMigDeviceHandleByIndex") from e
                continue  # NOT_FOUND: no MIG device in this slot
            memory = q(pynvml.nvmlDeviceGetMemoryInfo, mig)
            migs.append(
                MigReading(
                    index=slot,
                    uuid=_text(q(pynvml.nvmlDeviceGetUUID, mig)),
                    gpu_instance_id=q(pynvml.nvmlDeviceGetGpuInstanceId, mig),
                    compute_instance_id=q(pynvml.nvmlDeviceGetComputeInstanceId, mig),
                    memory_total_bytes=int(memory.total) if memory is not None else None,
                    memory_used_bytes=int(memory.used) if memory is not None else None,
                )
            )
        return tuple(migs)

    def _read_links(self, gpus: tuple[GpuReading, ...]) -> tuple[LinkReading, ...]:
        """Pairwise link levels between healthy GPUs; cached once every GPU answered (topology does not change)."""
        links: list[LinkReading] = []
        for a in range(len(gpus)):
            for b in range(a + 1, len(gpus)):
                if not (gpus[a].healthy and gpus[b].healthy):
                    continue
                level = self._link_level(self._handles[a], self._handles[b])
                if level is not None:
                    links.append(LinkReading(a, b, level))
        if all(g.healthy for g in gpus):
            self._links = tuple(links)
        return tuple(links)

    def _link_level(self, first: Any, second: Any) -> LinkLevel | None:
        q = self._query
        try:
            nvlink = q(pynvml.nvmlDeviceGetP2PStatus, first, second, pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
            if nvlink == pynvml.NVML_P2P_STATUS_OK:
                return LinkLevel.NVLINK
            ancestor = q(pynvml.nvmlDeviceGetTopologyCommonAncestor, first, second)
        except GpuLostError:
            return None
        return None if ancestor is None else _TOPOLOGY_LEVELS.get(ancestor, LinkLevel.SYSTEM)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._query(pynvml.nvmlShutdown)
