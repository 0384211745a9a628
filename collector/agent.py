"""The collector's cycle: read GPUs, attribute processes to pods, keep the latest snapshot, hand it to sinks.

`CollectorAgent` is what `gpuadvisor collector run` drives and what `gpuadvisor up` starts in a thread per
simulated node. Sinks (the advisor pusher, the pod annotator) must not block: each queues work on its own thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from collector.access import GpuAccessMonitor
from collector.attribution import build_snapshot
from collector.backend import GpuBackend
from collector.podmap import (
    CgroupIdentity,
    CgroupOversizedError,
    CgroupUnreadableError,
    PidResolver,
    ProcCgroupResolver,
    ProcessGoneError,
)
from collector.pods import NoPods, PodLookup
from collector.snapshot import NodeSnapshot
from collector.stats import CollectorStats

log = logging.getLogger(__name__)


class SnapshotSink(Protocol):
    """Receives every snapshot; must return quickly (queue the work)."""

    def submit(self, snapshot: NodeSnapshot) -> None: ...


class CollectorAgent:
    """One node's collector. `resolver` defaults to the cgroup files under `proc_root`, `pods` to UID-only pods;
    `access` (when the node object can be read) checks every cycle that NVML sees the node's GPUs."""

    def __init__(
        self,
        *,
        backend: GpuBackend,
        node: str,
        proc_root: Path = Path("/proc"),
        resolver: PidResolver | None = None,
        pods: PodLookup | None = None,
        sinks: Sequence[SnapshotSink] = (),
        interval_seconds: float = 5.0,
        stats: CollectorStats | None = None,
        access: GpuAccessMonitor | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not node:
            raise ValueError("node: expected a non-empty node name")
        if interval_seconds <= 0:
            raise ValueError(f"interval_seconds: expected > 0, got {interval_seconds}")
        self.backend = backend
        self.node = node
        self.resolver: PidResolver = resolver if resolver is not None else ProcCgroupResolver(proc_root)
        self.pods: PodLookup = pods if pods is not None else NoPods()
        self.sinks = list(sinks)
        self.interval_seconds = interval_seconds
        self.stats = stats if stats is not None else CollectorStats()
        self.access = access
        self._clock = clock
        self._latest: NodeSnapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cgroup_fault_logged = False

    @property
    def latest(self) -> NodeSnapshot | None:
        """The snapshot of the last successful cycle (what /metrics shows)."""
        return self._latest

    def collect_once(self) -> NodeSnapshot:
        """Read everything once and return the snapshot; vanished PIDs are left out and counted."""
        reading = self.backend.read()
        for kind, count in reading.error_counts:
            self.stats.add_error(kind, count)
        if self.access is not None:
            self.access.check(reading)
        identities: dict[int, CgroupIdentity | None] = {}
        gone: set[int] = set()
        unresolved: set[int] = set()
        for gpu in reading.gpus:
            for process in gpu.processes:
                pid = process.pid
                if pid in identities or pid in gone or pid in unresolved:
                    continue
                try:
                    identities[pid] = self.resolver.resolve(pid)
                except ProcessGoneError:
                    gone.add(pid)
                    self.stats.add_error("process_gone")
                except CgroupOversizedError as e:
                    identities[pid] = e.identity
                    self._cgroup_fault(e)
                except CgroupUnreadableError as e:
                    unresolved.add(pid)  # where it runs is unknown: not counted as host use
                    self._cgroup_fault(e)
        timestamp = datetime.fromtimestamp(self._clock(), tz=UTC)
        snapshot = build_snapshot(
            self.node,
            timestamp=timestamp,
            reading=reading,
            identities=identities,
            pods=self.pods,
            gone=gone,
            unresolved=unresolved,
        )
        self._latest = snapshot
        return snapshot

    def _cgroup_fault(self, error: CgroupUnreadableError) -> None:
        self.stats.add_error("cgroup")
        if not self._cgroup_fault_logged:
            self._cgroup_fault_logged = True
            log.warning('%s (further cgroup faults are only counted: errors_total{kind="cgroup"})', error)

    def run_cycle(self) -> NodeSnapshot | None:
        """One cycle with bookkeeping: never raises; a failed cycle is counted (kind `cycle`) and logged."""
        started = time.perf_counter()
        try:
            snapshot = self.collect_once()
        except Exception:
            log.exception("collection cycle failed")
            self.stats.add_error("cycle")
            self.stats.record_cycle(time.perf_counter() - started, self._clock(), success=False)
            return None
        if self.access is None or self.access.problem is None:
            # without GPU access the snapshot is empty: pushing it would tell the advisor the node has no GPUs
            for sink in self.sinks:
                sink.submit(snapshot)
        self.stats.record_cycle(time.perf_counter() - started, self._clock(), success=True)
        return snapshot

    def run(self) -> None:
        """Run cycles every `interval_seconds` until `stop()` (blocking)."""
        next_start = time.monotonic()
        while not self._stop.is_set():
            self.run_cycle()
            next_start += self.interval_seconds
            delay = next_start - time.monotonic()
            if delay < 0:  # a cycle overran: skip the missed ticks instead of bursting
                next_start = time.monotonic()
                delay = 0.0
            self._stop.wait(delay)

    def start(self) -> None:
        """Run cycles on a daemon thread."""
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name=f"collector-{self.node}", daemon=True)
        self._thread.start()

    def stop(self, timeout_seconds: float = 10.0) -> None:
        """Stop the loop (the backend stays open: the caller owns it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_seconds)
            self._thread = None
