"""The NVML backend: the only module that imports pynvml (nvidia-ml-py).

Drivers differ in which versions of an NVML function they export: an R470 driver has no `_v3` process lists and no
`nvmlDeviceGetMemoryInfo_v2`, older ones lack `_v2` symbols too. nvidia-ml-py calls one fixed version (its
unversioned process-list helpers raise `NVMLLibraryMismatchError`, which is no `NVMLError`). So, as nvitop does, the
backend probes each versioned entry point once at start-up, newest first (`_v3`, `_v2`, then the unversioned v1
symbol), and calls the one the driver has, with the structure layout of that version.

Every query goes through `_Query.__call__`, which turns NVML "not supported" and "function not found" into None
(the latter logged once per function), maps GPU_IS_LOST to an unhealthy GPU, and counts any other failure.
Static facts (UUID, name, PCI bus id, topology) are read once at start-up; everything else each `read()`. A GPU
that is lost before start-up (Xid 79: no handle at all) is reported unhealthy and asked for again every read.

Every call is timed into a histogram per NVML function (`NvmlBackend.call_latency`, logged with `--verbose`), so a
run on a real driver tells which calls a cycle's time goes to.

No sample is not zero: NVML gives a process an SM-utilisation sample only when the driver sampled it since the
previous read (`nvidia-smi pmon` prints "-" otherwise). Such a process keeps its last sample for at most
`SM_SAMPLE_MAX_AGE_SECONDS` and is unknown (None) after that, never 0.0, which would read as "idle".
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

from collector.backend import BackendUnavailableError, NodeReading, SharingFacts
from collector.sharing import mps_daemon_running, sharing_mode
from collector.snapshot import GpuSnapshot, Link, LinkLevel, MigDeviceSnapshot, ProcessSnapshot

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
_COMPUTE_MODES = {
    pynvml.NVML_COMPUTEMODE_DEFAULT: "default",
    pynvml.NVML_COMPUTEMODE_EXCLUSIVE_THREAD: "exclusive-process",  # deprecated; drivers treat it as exclusive
    pynvml.NVML_COMPUTEMODE_PROHIBITED: "prohibited",
    pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: "exclusive-process",
}
_MPS_PROCESS_LIST = "nvmlDeviceGetMPSComputeRunningProcesses"
_NOT_AVAILABLE_ULL = 2**64 - 1
# A MIG profile as NVIDIA writes it: `1g.10gb`, `1c.3g.40gb` (a compute instance of a larger one), with a variant's
# suffix where it has one: `1g.10gb+me`, `1g.24gb+me.all`, `1g.24gb+gfx`, `1g.24gb-me`.
_MIG_PROFILE = re.compile(r"(?:\d+c\.)?\d+g\.\d+gb(?:\+(?:me\.all|me|gfx)|-me)?")
# How long a process without a new SM-utilisation sample keeps its last one (a few collector cycles).
SM_SAMPLE_MAX_AGE_SECONDS = 5.0  # NVML_VALUE_NOT_AVAILABLE for unsigned long long fields


class _ProcessInfoV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t: what the unversioned process lists fill (drivers before the `_v2` functions)."""

    _fields_ = (("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong))


class _ProcessInfoV2(ctypes.Structure):
    """nvmlProcessInfo_v2_t: what `_v2` and `_v3` process lists fill (the layout nvidia-ml-py uses for both)."""

    _fields_ = (
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    )


# Each process list: (symbol, entry layout), newest first.
_PROCESS_LISTS: tuple[tuple[tuple[str, type[ctypes.Structure]], ...], ...] = tuple(
    ((f"{base}_v3", _ProcessInfoV2), (f"{base}_v2", _ProcessInfoV2), (base, _ProcessInfoV1))
    for base in (
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses",
        "nvmlDeviceGetMPSComputeRunningProcesses",
    )
)
# nvmlPciInfo_t v2/v3 carry the 32-character bus id in `busId`; v1 had a 16-character one where v2 has `busIdLegacy`.
_PCI_INFO_VERSIONS = (
    ("nvmlDeviceGetPciInfo_v3", "busId"),
    ("nvmlDeviceGetPciInfo_v2", "busId"),
    ("nvmlDeviceGetPciInfo", "busIdLegacy"),
)


class GpuLostError(Exception):
    """NVML answered GPU_IS_LOST for this device."""


def _symbol(name: str) -> Any:
    """The library's function `name`; raises NVMLError FUNCTION_NOT_FOUND when the driver does not export it."""
    return pynvml._nvmlGetFunctionPointer(name)  # the bindings' own symbol cache and lock


def _check(code: int) -> None:
    if code != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(code)


def _first_present(names: tuple[str, ...]) -> str | None:
    """The first of `names` the loaded library exports (probed once at start-up: symbols do not come and go)."""
    for name in names:
        try:
            _symbol(name)
        except pynvml.NVMLError:
            continue
        return name
    return None


# Upper bounds (seconds) of the per-call latency histogram, 10 µs to 50 ms; slower calls land in the last (+Inf) one.
CALL_SECONDS_BUCKETS = (1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2)
LATENCY_LOG_EVERY_READS = 60


@dataclass(slots=True)
class CallLatency:
    """How long one NVML function's calls took: a histogram over CALL_SECONDS_BUCKETS (+Inf last), sum and max."""

    count: int = 0
    total_seconds: float = 0.0
    max_seconds: float = 0.0
    bucket_counts: list[int] = field(default_factory=lambda: [0] * (len(CALL_SECONDS_BUCKETS) + 1))

    def observe(self, seconds: float) -> None:
        self.count += 1
        self.total_seconds += seconds
        self.max_seconds = max(self.max_seconds, seconds)
        self.bucket_counts[bisect.bisect_left(CALL_SECONDS_BUCKETS, seconds)] += 1

    def quantile_bound_seconds(self, q: float) -> float:
        """Upper bound of the bucket holding the `q` quantile (the max for the +Inf bucket)."""
        rank = q * self.count
        seen = 0
        for bound, count in zip((*CALL_SECONDS_BUCKETS, self.max_seconds), self.bucket_counts, strict=True):
            seen += count
            if seen >= rank:
                return min(bound, self.max_seconds)
        return self.max_seconds


class _Query:
    """Runs NVML calls: absent values become None, lost GPUs raise GpuLostError, other failures are counted; every
    call's duration goes into its function's `CallLatency`."""

    def __init__(self, timer: Callable[[], float] = time.perf_counter) -> None:
        self._reported: set[tuple[str, int]] = set()
        self.errors: Counter[str] = Counter()
        self.latency: dict[str, CallLatency] = {}
        self._timer = timer

    def __call__(self, fn: Callable[..., T], *args: Any) -> T | None:
        return self.named(fn.__name__, fn, *args)

    def timed(self, function: str, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)`, its duration observed under `function` whether it returns or raises."""
        started = self._timer()
        try:
            return fn(*args)
        finally:
            self.latency.setdefault(function, CallLatency()).observe(self._timer() - started)

    def named(self, function: str, fn: Callable[..., T], *args: Any) -> T | None:
        """`fn(*args)`, with failures logged under the name `function`."""
        try:
            return self.timed(function, fn, *args)
        except pynvml.NVMLError as e:
            self.absorb(function, e)
            return None
        except pynvml.NVMLLibraryMismatchError:
            # an unversioned helper of the bindings whose versioned symbol this driver lacks: function not found
            self.absorb(function, pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND))
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


_UNKNOWN = _Identity(uuid="", model="", pci_bus_id="")


def _sharing_facts(compute_mode: int | None, mig_mode: Any, mps_pids: frozenset[int]) -> SharingFacts:
    """The facts from NVML's answers: nvmlComputeMode_t, nvmlDeviceGetMigMode's (current, pending), MPS clients."""
    return SharingFacts(
        compute_mode=None if compute_mode is None else _COMPUTE_MODES.get(compute_mode),
        mig_enabled=None if not mig_mode else mig_mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE,
        mps_pids=mps_pids,
    )


def mig_profile_of(name: str) -> str | None:
    """The profile in an NVML name: a profile info's "MIG 1g.10gb", a MIG device's "NVIDIA A100-SXM4-80GB MIG
    1g.10gb" (the word after the last "MIG"); None when the name carries none."""
    _, mig, profile = name.rpartition("MIG ")
    profile = profile.strip().lower()
    return profile if mig and _MIG_PROFILE.fullmatch(profile) else None


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _ratio(percent: int | float | None) -> float | None:
    return None if percent is None else min(1.0, max(0.0, percent / 100.0))


class _Driver:
    """The entry points this driver has, chosen once, and calls through them with each version's layout."""

    def __init__(self) -> None:
        self.count_symbol = _first_present(("nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"))
        self.handle_symbol = _first_present(("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"))
        self.pci = next(((s, f) for s, f in _PCI_INFO_VERSIONS if _first_present((s,))), None)
        self.memory_v2 = _first_present(("nvmlDeviceGetMemoryInfo_v2",)) is not None
        self.process_lists = [
            next(((s, layout) for s, layout in versions if _first_present((s,))), None) for versions in _PROCESS_LISTS
        ]
        chosen = [symbol for symbol, _ in filter(None, self.process_lists)]
        log.info("NVML process lists through %s", ", ".join(chosen) or "no symbol: processes unknown")

    def device_count(self) -> int:
        if self.count_symbol is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        count = ctypes.c_uint(0)
        _check(_symbol(self.count_symbol)(ctypes.byref(count)))
        return int(count.value)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:  # noqa: N802 - named as the NVML call in the log
        if self.handle_symbol is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        handle = pynvml.c_nvmlDevice_t()
        _check(_symbol(self.handle_symbol)(ctypes.c_uint(index), ctypes.byref(handle)))
        return handle

    def nvmlDeviceGetPciInfo(self, handle: Any) -> str:  # noqa: N802
        if self.pci is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        symbol, field = self.pci
        info = pynvml.nvmlPciInfo_t()  # the largest layout: v1's fields are a prefix of it
        _check(_symbol(symbol)(handle, ctypes.byref(info)))
        return _text(getattr(info, field))

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:  # noqa: N802
        if self.memory_v2:
            return pynvml.nvmlDeviceGetMemoryInfo(handle, pynvml.nvmlMemory_v2)
        return pynvml.nvmlDeviceGetMemoryInfo(handle)


def _running_processes(symbol: str, layout: type[ctypes.Structure], handle: Any) -> list[tuple[int, int | None]]:
    """(pid, used bytes or None) of one process list, through `symbol` with its version's entry `layout`."""
    fn = _symbol(symbol)
    count = ctypes.c_uint(0)
    code = fn(handle, ctypes.byref(count), None)
    if code == pynvml.NVML_SUCCESS:
        return []
    if code != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
        raise pynvml.NVMLError(code)
    count.value = count.value * 2 + 5  # room for processes started between the two calls
    entries = (layout * count.value)()
    _check(fn(handle, ctypes.byref(count), entries))
    return [
        (int(e.pid), None if e.usedGpuMemory == _NOT_AVAILABLE_ULL else int(e.usedGpuMemory))
        for e in entries[: count.value]
    ]


def _init_nvml() -> None:
    """nvmlInit, with the older entry points for a library without nvmlInitWithFlags."""
    try:
        pynvml.nvmlInit()
        return
    except pynvml.NVMLError as e:
        if e.value != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            raise
    for name in ("nvmlInit_v2", "nvmlInit"):
        try:
            init = _symbol(name)
        except pynvml.NVMLError:
            continue
        _check(init())
        return
    raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)


class NvmlBackend:
    """`GpuBackend` over NVML. `library_path` (or $GPUADVISOR_NVML_LIBRARY) names a libnvidia-ml.so.1 to use.

    Raises BackendUnavailableError when the library is missing or refuses to initialise.
    """

    def __init__(
        self,
        library_path: str | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        mps_daemon: Callable[[], bool] | None = None,
    ) -> None:
        library_path = library_path or os.environ.get(LIBRARY_ENV) or None
        self._clock = clock
        # whether an MPS control daemon listens (its pipe directory, as this process's CUDA clients would find it)
        self._mps_daemon = mps_daemon or (lambda: mps_daemon_running(os.environ))
        if library_path is not None:
            try:
                # pynvml loads "libnvidia-ml.so.1" by soname; a library already loaded with that soname is reused.
                ctypes.CDLL(library_path, mode=ctypes.RTLD_GLOBAL)
            except OSError as e:
                raise BackendUnavailableError(f"NVML library not found: {library_path} ({e})") from e
        try:
            _init_nvml()
        except pynvml.NVMLError_LibraryNotFound as e:
            raise BackendUnavailableError(f"NVML library not found: libnvidia-ml.so.1 ({e})") from e
        except pynvml.NVMLError as e:
            raise BackendUnavailableError(f"NVML initialisation failed: {e}") from e
        self._query = _Query()
        self._reads = 0
        self._closed = False
        self._driver = _Driver()
        self.driver_version = _text(self._query(pynvml.nvmlSystemGetDriverVersion))
        try:
            count = self._driver.device_count()
        except pynvml.NVMLError as e:
            self.close()
            raise BackendUnavailableError(f"NVML cannot list the GPUs: {e}") from e
        self._handles: list[Any] = [None] * count
        self._identities: list[_Identity | None] = [None] * count
        self._last_sample_us = [0] * count
        # per GPU: pid -> (clock seconds, SM ratio) of its newest sample, for processes NVML skips in a read
        self._last_sm: list[dict[int, tuple[float, float]]] = [{} for _ in range(count)]
        self._links: tuple[Link, ...] | None = None
        # per GPU: its GPU instance profiles, id -> name (static for a GPU; None until read whole)
        self._gi_profiles: list[dict[int, str] | None] = [None] * count
        for index in range(count):
            # identities now, so a GPU lost later keeps its UUID label; a GPU lost already is counted by read()
            with contextlib.suppress(GpuLostError):
                self._handle(index)
                self._identity(index)

    def _handle(self, index: int) -> Any:
        """The device handle, asked for again while NVML has none (raises GpuLostError while it cannot give one)."""
        handle = self._handles[index]
        if handle is None:
            handle = self._handles[index] = self._query(self._driver.nvmlDeviceGetHandleByIndex, index)
        if handle is None:
            raise GpuLostError("nvmlDeviceGetHandleByIndex")
        return handle

    def _identity(self, index: int) -> _Identity:
        known = self._identities[index]
        if known is not None:
            return known
        handle = self._handles[index]
        identity = _Identity(
            uuid=_text(self._query(pynvml.nvmlDeviceGetUUID, handle)),
            model=_text(self._query(pynvml.nvmlDeviceGetName, handle)),
            pci_bus_id=self._query(self._driver.nvmlDeviceGetPciInfo, handle) or "",
        )
        self._identities[index] = identity
        return identity

    def call_latency(self) -> dict[str, CallLatency]:
        """Per NVML function, how long its calls took since start-up (a copy)."""
        return {
            name: CallLatency(c.count, c.total_seconds, c.max_seconds, list(c.bucket_counts))
            for name, c in sorted(self._query.latency.items())
        }

    def _log_latency(self) -> None:
        """With debug logging (`--verbose`): after the first read and every LATENCY_LOG_EVERY_READS reads, one line
        per NVML function, slowest total first."""
        self._reads += 1
        if not log.isEnabledFor(logging.DEBUG) or (self._reads != 1 and self._reads % LATENCY_LOG_EVERY_READS):
            return
        by_total = sorted(self._query.latency.items(), key=lambda item: -item[1].total_seconds)
        for name, c in by_total:
            log.debug(
                "NVML %s: %d calls in %d reads, mean %.1f µs, p50 <= %.1f µs, p95 <= %.1f µs, max %.1f µs",
                name,
                c.count,
                self._reads,
                c.total_seconds / c.count * 1e6,
                c.quantile_bound_seconds(0.5) * 1e6,
                c.quantile_bound_seconds(0.95) * 1e6,
                c.max_seconds * 1e6,
            )

    def read(self) -> NodeReading:
        self._query.errors.clear()
        mps_daemon = self._mps_daemon()  # once per read: one directory lookup for every GPU
        gpus = tuple(self._read_gpu(index, mps_daemon) for index in range(len(self._handles)))
        links = self._links if self._links is not None else self._read_links(gpus)
        self._log_latency()
        return NodeReading(
            driver_version=self.driver_version,
            gpus=gpus,
            links=links,
            error_counts=tuple(sorted(self._query.errors.items())),
        )

    def _read_gpu(self, index: int, mps_daemon: bool) -> GpuSnapshot:
        try:
            handle = self._handle(index)
            return self._read_healthy(index, handle, self._identity(index), mps_daemon)
        except GpuLostError:
            self._query.errors["gpu_lost"] += 1
            known = self._identities[index] or _UNKNOWN
            return GpuSnapshot(
                index=index, uuid=known.uuid, model=known.model, pci_bus_id=known.pci_bus_id, healthy=False
            )

    def _read_healthy(self, index: int, handle: Any, identity: _Identity, mps_daemon: bool) -> GpuSnapshot:
        q = self._query
        compute_mode = q(pynvml.nvmlDeviceGetComputeMode, handle)
        mig_mode = q(pynvml.nvmlDeviceGetMigMode, handle)  # once per read: the sharing facts and the MIG devices
        memory = q(self._driver.nvmlDeviceGetMemoryInfo, handle)
        rates = q(pynvml.nvmlDeviceGetUtilizationRates, handle)
        power_mw = q(pynvml.nvmlDeviceGetPowerUsage, handle)
        temperature = q(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
        energy_mj = q(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        processes, processes_known, mps_pids = self._read_processes(index, handle)
        facts = _sharing_facts(compute_mode, mig_mode, mps_pids)
        return GpuSnapshot(
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
            processes=processes,
            processes_known=processes_known,
            mig_devices=self._read_migs(index, handle, facts.mig_enabled),
            sharing=sharing_mode(facts, set(), mps_daemon),
            compute_mode=facts.compute_mode,
        )

    def _read_processes(self, index: int, handle: Any) -> tuple[tuple[ProcessSnapshot, ...], bool, frozenset[int]]:
        """The GPU's processes, and whether that is all of them: False when a process list failed (UNKNOWN, TIMEOUT,
        still INSUFFICIENT_SIZE after the retry with room to spare, ...) — an empty list must not read as idle. A list
        the driver does not have (not supported, not found) says nothing is missing. Third: the PIDs the driver
        lists as MPS clients (an MPS server runs on the GPU)."""
        memory_by_pid: dict[int, int | None] = {}
        mps_pids: set[int] = set()
        known = True
        for symbol, layout in filter(None, self._driver.process_lists):
            try:
                listed = self._query.timed(symbol, _running_processes, symbol, layout, handle)
            except pynvml.NVMLError as e:
                self._query.absorb(symbol, e)  # a lost GPU raises here
                known = known and e.value in _ABSENT
                continue
            if symbol.startswith(_MPS_PROCESS_LIST):
                mps_pids.update(pid for pid, _ in listed)
            for pid, used in listed:
                previous = memory_by_pid.get(pid)
                # a PID may be listed as compute and graphics; its memory is the same allocation, not a sum
                memory_by_pid[pid] = used if previous is None else max(previous, used or 0)
        sm_by_pid = self._sm_by_pid(index, handle, set(memory_by_pid))
        processes = tuple(
            ProcessSnapshot(pid=pid, memory_used_bytes=used, sm_utilization_ratio=sm_by_pid.get(pid))
            for pid, used in sorted(memory_by_pid.items())
        )
        return processes, known, frozenset(mps_pids)

    def _sm_by_pid(self, index: int, handle: Any, running: set[int]) -> dict[int, float]:
        """SM ratio of each running process with a sample this read or one at most SM_SAMPLE_MAX_AGE_SECONDS old;
        the others are left out (unknown)."""
        now = self._clock()
        known = self._last_sm[index]
        for pid, ratio in (self._read_process_utilization(index, handle) or {}).items():
            known[pid] = (now, ratio)
        for pid in [p for p, (seen, _) in known.items() if p not in running or now - seen > SM_SAMPLE_MAX_AGE_SECONDS]:
            del known[pid]
        return {pid: ratio for pid, (_, ratio) in known.items()}

    def _read_process_utilization(self, index: int, handle: Any) -> dict[int, float] | None:
        """Newest SM-utilisation sample per PID since the previous read; None when the GPU cannot tell."""
        name = "nvmlDeviceGetProcessUtilization"
        try:
            samples = self._query.timed(
                name, pynvml.nvmlDeviceGetProcessUtilization, handle, self._last_sample_us[index]
            )
        except pynvml.NVMLLibraryMismatchError:
            self._query.absorb(name, pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND))
            return None
        except pynvml.NVMLError as e:
            if e.value == pynvml.NVML_ERROR_NOT_FOUND:
                return {}  # no process was sampled since the last read
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

    def sharing_facts(self, index: int) -> SharingFacts:
        """How GPU `index` is set up for sharing (compute mode, MIG, MPS clients); asked for by the local runner
        once per trial sample. The collector's cycle reads the same facts in `read()` (`GpuSnapshot.sharing`)."""
        q = self._query
        mps_list = next(
            (entry for entry in filter(None, self._driver.process_lists) if entry[0].startswith(_MPS_PROCESS_LIST)),
            None,
        )
        mps: list[tuple[int, int | None]] = []
        try:
            handle = self._handle(index)
            mode = q(pynvml.nvmlDeviceGetComputeMode, handle)
            mig = q(pynvml.nvmlDeviceGetMigMode, handle)
            if mps_list is not None:
                symbol, layout = mps_list
                mps = q.named(symbol, _running_processes, symbol, layout, handle) or []
        except GpuLostError:
            return SharingFacts()
        return _sharing_facts(mode, mig, frozenset(pid for pid, _ in mps))

    def _read_migs(self, index: int, handle: Any, mig_enabled: bool | None) -> tuple[MigDeviceSnapshot, ...]:
        q = self._query
        if not mig_enabled:
            return ()
        migs: list[MigDeviceSnapshot] = []
        for slot in range(q(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except pynvml.NVMLError as e:
                if e.value == pynvml.NVML_ERROR_GPU_IS_LOST:
                    raise GpuLostError("nvmlDeviceGetMigDeviceHandleByIndex") from e
                continue  # NOT_FOUND: no MIG device in this slot
            memory = q(pynvml.nvmlDeviceGetMemoryInfo, mig)
            gpu_instance_id = q(pynvml.nvmlDeviceGetGpuInstanceId, mig)
            migs.append(
                MigDeviceSnapshot(
                    index=slot,
                    uuid=_text(q(pynvml.nvmlDeviceGetUUID, mig)),
                    gpu_instance_id=gpu_instance_id,
                    compute_instance_id=q(pynvml.nvmlDeviceGetComputeInstanceId, mig),
                    memory_total_bytes=int(memory.total) if memory is not None else None,
                    memory_used_bytes=int(memory.used) if memory is not None else None,
                    profile=self._mig_profile(index, handle, mig, gpu_instance_id),
                )
            )
        return tuple(migs)

    def _mig_profile(self, index: int, parent: Any, mig: Any, gpu_instance_id: int | None) -> str | None:
        """A MIG device's profile: its GPU instance's profile id (nvmlDeviceGetGpuInstanceById, nvmlGpuInstanceGetInfo)
        looked up in the parent's profile table, whose v2 entries carry NVIDIA's name ("MIG 3g.40gb"); where the
        driver has no such table (before the `V` function, or NOT_SUPPORTED), the suffix of the MIG device's own name
        ("NVIDIA A100-SXM4-80GB MIG 3g.40gb"). A device whose name says it is a compute instance of that GPU instance
        ("MIG 1c.3g.40gb": the device plugin's mixed strategy names its resource so) is that. Never guessed from the
        memory size: profiles of one memory size differ in compute slices. None when neither tells."""
        q = self._query
        from_table = None
        if gpu_instance_id is not None:
            table = self._gi_profile_table(index, parent)
            instance = q(pynvml.nvmlDeviceGetGpuInstanceById, parent, gpu_instance_id) if table else None
            info = q(pynvml.nvmlGpuInstanceGetInfo, instance) if instance is not None else None
            from_table = table.get(int(info.profileId)) if table and info is not None else None
        named = mig_profile_of(_text(q(pynvml.nvmlDeviceGetName, mig)))
        if from_table is None or (named is not None and named.endswith(f"c.{from_table}")):
            return named
        return from_table

    def _gi_profile_table(self, index: int, parent: Any) -> dict[int, str]:
        """GPU `index`'s GPU instance profiles by id, read once (nvmlDeviceGetGpuInstanceProfileInfoV over every
        profile index; a profile the GPU lacks answers NOT_SUPPORTED or INVALID_ARGUMENT). A driver without the `V`
        function, or without names in its answers, gives an empty table, kept too (symbols do not come and go); any
        other failure is asked again at the next read."""
        known = self._gi_profiles[index]
        if known is not None:
            return known
        table: dict[int, str] = {}
        name = "nvmlDeviceGetGpuInstanceProfileInfoV"
        for profile_index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = self._query.timed(name, pynvml.nvmlDeviceGetGpuInstanceProfileInfoV, parent, profile_index)
            except pynvml.NVMLError as e:
                if e.value in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                    continue  # no profile of this index on this GPU
                self._query.absorb(name, e)  # a lost GPU raises here
                if e.value in _ABSENT:
                    self._gi_profiles[index] = table
                return table
            if (profile := mig_profile_of(_text(info.name))) is not None:
                table[int(info.id)] = profile
        self._gi_profiles[index] = table
        return table

    def _read_links(self, gpus: tuple[GpuSnapshot, ...]) -> tuple[Link, ...]:
        """Pairwise link levels between healthy GPUs; cached once every GPU answered (topology does not change)."""
        links: list[Link] = []
        for a in range(len(gpus)):
            for b in range(a + 1, len(gpus)):
                if not (gpus[a].healthy and gpus[b].healthy):
                    continue
                level = self._link_level(self._handles[a], self._handles[b])
                if level is not None:
                    links.append(Link(a=a, b=b, level=level))
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
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()
