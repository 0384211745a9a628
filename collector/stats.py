"""The collector's own health figures (errors by kind, cycle duration, last success), shared across threads."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class StatsView:
    """A consistent copy for one scrape."""

    errors: dict[str, int] = field(default_factory=dict)
    cycle_duration_seconds: float | None = None
    last_success_timestamp_seconds: float | None = None
    gpu_access_reason: str | None = None
    gpu_access_message: str | None = None


class CollectorStats:
    """Thread-safe counters (error kinds: `collector.exporter.ERROR_KINDS`) and the GPU-access problem, if any."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._errors: Counter[str] = Counter()
        self._cycle_duration_seconds: float | None = None
        self._last_success_timestamp_seconds: float | None = None
        self._gpu_access: tuple[str | None, str | None] = (None, None)

    def add_error(self, kind: str, count: int = 1) -> None:
        if count <= 0:
            return
        with self._lock:
            self._errors[kind] += count

    def record_cycle(self, duration_seconds: float, finished_at_seconds: float, *, success: bool) -> None:
        with self._lock:
            self._cycle_duration_seconds = duration_seconds
            if success:
                self._last_success_timestamp_seconds = finished_at_seconds

    def set_gpu_access_problem(self, reason: str | None, message: str | None) -> None:
        """`collector.access`: why this collector cannot see its node's GPUs (metric label, text), or None twice."""
        with self._lock:
            self._gpu_access = (reason, message)

    def view(self) -> StatsView:
        with self._lock:
            return StatsView(
                errors=dict(self._errors),
                cycle_duration_seconds=self._cycle_duration_seconds,
                last_success_timestamp_seconds=self._last_success_timestamp_seconds,
                gpu_access_reason=self._gpu_access[0],
                gpu_access_message=self._gpu_access[1],
            )
