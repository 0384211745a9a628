"""Plain records that cross the store boundary: what a trial measured, what a job did.

The store's repository functions take and return these, so the summariser, the importers and the models
never touch ORM objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class ProfileRecord:
    """One measured (or imported) configuration of a workload."""

    workload: str
    gpu_model: str
    throughput_samples_per_s: float
    gpu_count: int = 1
    node_count: int = 1
    batch_size: int = 0
    amp: bool = False
    source: str = "import"
    step_time_seconds: float | None = None
    sm_util_mean_ratio: float | None = None
    sm_util_p95_ratio: float | None = None
    mem_bw_util_ratio: float | None = None
    peak_memory_bytes: int | None = None
    power_watts: float | None = None
    trial_run: tuple[str, str] | None = None  # (namespace, name)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ColocationRecord:
    """Two workloads sharing one GPU; `norm_*` is each side's co-located / solo throughput."""

    gpu_model: str
    workload_a: str
    workload_b: str
    solo_throughput_a: float
    solo_throughput_b: float
    coloc_throughput_a: float
    coloc_throughput_b: float
    batch_size_a: int = 0
    batch_size_b: int = 0
    amp_a: bool = False
    amp_b: bool = False
    sm_util_a: float | None = None
    mem_bw_util_a: float | None = None
    mem_bytes_a: int | None = None
    sm_util_b: float | None = None
    mem_bw_util_b: float | None = None
    mem_bytes_b: int | None = None
    source: str = "import"
    trial_run: tuple[str, str] | None = None
    # How the pair shared the GPU: one of `profiler.csv_formats.SHARING_MODES`, or "" when unknown.
    sharing: str = ""
    # Repeats folded into this row, the largest spread (max - min) / median of the sides' throughputs over them
    # (solo runs included), and whether that spread is too large for the row to train a model.
    repeats: int = 1
    spread_ratio: float | None = None
    flagged: bool = False

    @property
    def norm_a(self) -> float:
        return self.coloc_throughput_a / self.solo_throughput_a if self.solo_throughput_a > 0 else 0.0

    @property
    def norm_b(self) -> float:
        return self.coloc_throughput_b / self.solo_throughput_b if self.solo_throughput_b > 0 else 0.0


@dataclass(frozen=True, slots=True)
class ExecutionRecord:
    """A finished GPU job: the label source of the JCT model."""

    job_id: str
    submit_time: datetime
    end_time: datetime
    start_time: datetime | None = None
    workload: str | None = None
    user: str = ""
    namespace: str = ""
    queue: str = ""
    node: str | None = None
    gpu_model: str | None = None
    gpu_count: int = 1
    mean_utilization_ratio: float | None = None
    source: str = "import"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TrialSideRef:
    """One side (0 = a, 1 = b) of one trial of a TrialRun: the key of what the controller keeps while it runs."""

    namespace: str
    trial_run: str
    trial: str
    side: int


@dataclass(frozen=True, slots=True)
class TelemetryRecord:
    """One collector sample of a running trial side; `stamp` (the collector's updated-at) identifies it."""

    stamp: str
    t_seconds: float
    sm_utilization_ratio: float
    memory_used_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class TrialSideTelemetry:
    """Everything stored for one running trial side: its samples in the order seen and the GPUs it ran on."""

    samples: tuple[TelemetryRecord, ...] = ()
    gpus: frozenset[str] = frozenset()
