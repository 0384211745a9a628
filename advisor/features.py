"""The feature functions shared by training and serving: one place turns raw columns into model inputs.

Training (`advisor.models.*.fit`) and serving (the scorer, the simulator, `models predict`) both call exactly these
functions, so a model can never see features at serving time that were computed differently when it was trained.
Inputs are columnar (`numpy` arrays, one entry per row) so the scorer's hot path stays free of pandas.

Missing values are NaN: utilisation columns that a data set does not have (Gavel has none), a batch size of 0
(unknown), a GPU model that is not in `advisor.gpus.GPU_SPECS`. LightGBM routes NaN down a learned default branch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from advisor.gpus import gpu_spec

FloatArray = npt.NDArray[np.float64]

_BATCH_SUFFIX = re.compile(r"\s*\(batch size (\d+)\)\s*$")
_NOT_ALNUM = re.compile(r"[^a-z0-9]+")


def workload_signature(name: str) -> str:
    """A workload's name as a Kubernetes label value can spell it: lower case, the model's name without punctuation,
    ``-bs<N>`` for a batch size. Gavel's ``ResNet-50 (batch size 64)`` is ``resnet50-bs64``, the signature a pod's
    `gpuadvisor.io/workload` label carries (label values allow no spaces or parentheses).

    >>> workload_signature("ResNet-50 (batch size 64)")
    'resnet50-bs64'
    """
    text = name.strip().lower()
    batch = _BATCH_SUFFIX.search(text)
    stem = _NOT_ALNUM.sub("", _BATCH_SUFFIX.sub("", text)) if batch else _NOT_ALNUM.sub("-", text).strip("-")
    return f"{stem}-bs{batch.group(1)}" if batch else stem


GPU_FEATURES = ("gpu_log2_fp16_tflops", "gpu_log2_fp32_tflops", "gpu_log2_bandwidth_gb_s", "gpu_memory_gib", "gpu_cc")


@lru_cache(maxsize=1024)
def _spec_row(name: str) -> tuple[float, float, float, float, float]:
    s = gpu_spec(name)
    return (
        float(np.log2(s.fp16_tflops)),
        float(np.log2(s.fp32_tflops)),
        float(np.log2(s.memory_bandwidth_bytes_per_s / 1e9)),
        s.memory_bytes / (1 << 30),
        s.compute_capability,
    )


def gpu_feature_table(names: Sequence[str]) -> FloatArray:
    """One row of `GPU_FEATURES` per name of `names` (NaN for an unknown model): give it a batch's distinct names
    and index it with each row's code, `gpu_features` without a lookup per row."""
    return np.array([_spec_row(name) for name in names], dtype=np.float64).reshape(len(names), len(GPU_FEATURES))


def gpu_features(gpu_models: Sequence[str]) -> FloatArray:
    """One row of `GPU_FEATURES` per GPU model name (NaN for an unknown model)."""
    index = {name: i for i, name in enumerate(dict.fromkeys(gpu_models))}
    codes = np.fromiter(map(index.__getitem__, gpu_models), np.int64, len(gpu_models))
    return gpu_feature_table(list(index))[codes]


def _log2_positive(values: FloatArray) -> FloatArray:
    """log2 of values > 0; NaN for 0, negative or missing (0 means "unknown" in the CSV formats)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(values > 0, np.log2(np.where(values > 0, values, 1.0)), np.nan)


# ---------------------------------------------------------------------------------------------- interference


@dataclass(frozen=True, slots=True)
class SoloProfile:
    """What is known about one workload running alone on a GPU: the input of the interference model.

    `solo_throughput` is samples/s (or steps/s when the batch size is unknown), NaN when not measured; the optional
    fields are None when unknown.
    """

    workload: str
    solo_throughput: float
    batch_size: int = 0
    sm_util_ratio: float | None = None
    mem_bw_util_ratio: float | None = None
    mem_bytes: float | None = None
    amp: bool | None = None


@dataclass(frozen=True, slots=True)
class SideColumns:
    """One side (a or b) of a batch of co-locations, column by column; NaN marks a missing value."""

    solo_throughput: FloatArray
    batch_size: FloatArray
    sm_util: FloatArray
    mem_bw_util: FloatArray
    mem_bytes: FloatArray
    amp: FloatArray

    def __len__(self) -> int:
        return len(self.solo_throughput)


# Readers of the fields of a `SoloProfile` that `SideColumns` holds, in its order.
_SOLO_FIELDS = tuple(
    map(attrgetter, ("solo_throughput", "batch_size", "sm_util_ratio", "mem_bw_util_ratio", "mem_bytes", "amp"))
)


def side_columns(profiles: Sequence[SoloProfile]) -> SideColumns:
    """Columns of `profiles`, in order (this is on the scorer's hot path).

    Field by field: a field that no profile knows (all None, often the utilisation) is filled with NaN at once,
    others are read with `np.fromiter`, which reads None as NaN, so the unknown values need no test in Python.
    """
    n = len(profiles)
    values = np.empty((len(_SOLO_FIELDS), n), dtype=np.float64)
    for row, field in zip(values, _SOLO_FIELDS, strict=True):
        column = list(map(field, profiles))
        if n and column[0] is None and column.count(None) == n:
            row.fill(np.nan)
        else:
            row[:] = np.fromiter(column, np.float64, n)
    return SideColumns(*values)


INTERFERENCE_SIDE_FEATURES = (
    "log2_samples_per_s",
    "log2_batch_size",
    "log2_steps_per_s",
    "sm_util",
    "mem_bw_util",
    "mem_fraction",
    "amp",
)
INTERFERENCE_FEATURES = (
    *(f"self_{n}" for n in INTERFERENCE_SIDE_FEATURES),
    *(f"other_{n}" for n in INTERFERENCE_SIDE_FEATURES),
    "sum_sm_util",
    "sum_mem_bw_util",
    "sum_mem_fraction",
    "log2_throughput_ratio",
    "log2_batch_ratio",
    *GPU_FEATURES,
)


_SIDE_WIDTH = len(INTERFERENCE_SIDE_FEATURES)
IndexArray = npt.NDArray[np.intp] | npt.NDArray[np.int64]


def interference_sides(side: SideColumns, gpu: FloatArray) -> FloatArray:
    """What `interference_features` takes from each row of `side` on the GPU model whose `gpu_features` are the
    same row of `gpu`: its `self_*` columns (`other_*` where it is the other side) then its `gpu_*` ones, as a
    (columns × rows) table for `interference_features_of`.

    They depend on that side and GPU model alone, so a batch that repeats sides computes them once per distinct side.
    """
    log_thr = _log2_positive(side.solo_throughput)
    log_batch = _log2_positive(side.batch_size)
    table = np.empty((_SIDE_WIDTH + len(GPU_FEATURES), len(side)), dtype=np.float64)
    table[0], table[1] = log_thr, log_batch
    table[2] = np.where(np.isnan(log_batch), log_thr, log_thr - log_batch)
    table[3], table[4] = side.sm_util, side.mem_bw_util
    table[5] = side.mem_bytes / (gpu[:, 3] * (1 << 30))
    table[6] = side.amp
    table[_SIDE_WIDTH:] = gpu.T
    return table


def interference_features_of(sides: FloatArray, this: IndexArray, other: IndexArray) -> FloatArray:
    """`interference_features` of the rows (side `this[i]`, side `other[i]`) of a table of distinct sides
    (`interference_sides`; a row's two sides are on the same GPU model).

    Built column by column (each column of the result is contiguous, as the tree evaluator reads them).
    """
    w = _SIDE_WIDTH
    out = np.empty((len(INTERFERENCE_FEATURES), len(this)), dtype=np.float64)
    np.take(sides[:w], this, axis=1, out=out[:w])
    np.take(sides[:w], other, axis=1, out=out[w : 2 * w])
    # sum_sm_util, sum_mem_bw_util, sum_mem_fraction; log2_throughput_ratio, log2_batch_ratio
    np.add(out[3:6], out[w + 3 : w + 6], out=out[2 * w : 2 * w + 3])
    np.subtract(out[0:2], out[w : w + 2], out=out[2 * w + 3 : 2 * w + 5])
    np.take(sides[w:], this, axis=1, out=out[2 * w + 5 :])
    features: FloatArray = out.T
    return features


def interference_features(this: SideColumns, other: SideColumns, gpu_models: Sequence[str]) -> FloatArray:
    """Features for predicting `this` side's normalised throughput while it shares a GPU with `other`.

    The same function is used for both sides (swap the arguments for the other one), which is what makes the
    model's (A, B) and (B, A) predictions consistent.
    """
    gpu = gpu_features(gpu_models)
    n = len(this)
    sides = np.hstack([interference_sides(this, gpu), interference_sides(other, gpu)])
    return interference_features_of(sides, np.arange(n), np.arange(n, 2 * n))


# ---------------------------------------------------------------------------------------------- throughput

THROUGHPUT_FEATURES = (
    "log2_gpu_count",
    "nodes",
    "log2_batch_size",
    "log2_batch_per_gpu",
    *GPU_FEATURES,
    "anchor_log2_throughput_per_gpu",
    "anchor_log2_fp16_ratio",
    "anchor_log2_fp32_ratio",
    "anchor_log2_bandwidth_ratio",
    "anchor_memory_ratio",
    "anchor_log2_count_ratio",
    "anchor_nodes_diff",
    "anchor_log2_batch_ratio",
)


@dataclass(frozen=True, slots=True)
class ThroughputQuery:
    """Columns of a batch of "how fast does this workload run there" questions (batch size 0 = unknown)."""

    workloads: Sequence[str]
    gpu_models: Sequence[str]
    gpu_count: FloatArray
    nodes: FloatArray
    batch_size: FloatArray

    def __len__(self) -> int:
        return len(self.workloads)


@dataclass(frozen=True, slots=True)
class Anchors:
    """For each query row, the measured configuration the estimate starts from (NaN where none exists)."""

    throughput: FloatArray
    gpu_models: Sequence[str]
    gpu_count: FloatArray
    nodes: FloatArray
    batch_size: FloatArray


def throughput_features(query: ThroughputQuery, anchors: Anchors) -> FloatArray:
    """Features of the throughput model: the target configuration and how it differs from its anchor."""
    gpu = gpu_features(query.gpu_models)
    anchor_gpu = gpu_features(anchors.gpu_models)
    log_count = _log2_positive(query.gpu_count)
    log_batch = _log2_positive(query.batch_size)
    anchor_log_count = _log2_positive(anchors.gpu_count)
    return np.column_stack(
        [
            log_count,
            query.nodes,
            log_batch,
            log_batch - log_count,
            gpu,
            _log2_positive(anchors.throughput) - anchor_log_count,
            gpu[:, 0] - anchor_gpu[:, 0],
            gpu[:, 1] - anchor_gpu[:, 1],
            gpu[:, 2] - anchor_gpu[:, 2],
            gpu[:, 3] / anchor_gpu[:, 3],
            log_count - anchor_log_count,
            query.nodes - anchors.nodes,
            log_batch - _log2_positive(anchors.batch_size),
        ]
    )


# ---------------------------------------------------------------------------------------------- JCT


@dataclass(frozen=True, slots=True)
class JobQuery:
    """Columns of a batch of jobs whose run time is to be predicted (what is known when a job is submitted)."""

    workloads: Sequence[str]
    users: Sequence[str]
    queues: Sequence[str]
    gpu_models: Sequence[str]
    gpu_count: FloatArray
    submit_time_seconds: FloatArray  # unix seconds

    def __len__(self) -> int:
        return len(self.workloads)


@dataclass(frozen=True, slots=True)
class HistoryColumns:
    """Per job, the history statistics of its workload, user, queue and (queue, GPU count) keys.

    `*_log_median` is the median of the natural log of past run times (NaN: no history); `*_count` how many jobs it
    summarises; `*_log_iqr` their spread. Computed by `advisor.models.jct.History` from past jobs only.
    """

    workload_log_median: FloatArray
    workload_count: FloatArray
    user_log_median: FloatArray
    user_count: FloatArray
    user_log_iqr: FloatArray
    queue_log_median: FloatArray
    queue_count: FloatArray
    queue_gpus_log_median: FloatArray
    queue_gpus_count: FloatArray
    queue_gpus_log_iqr: FloatArray


JCT_FEATURES = (
    "log2_gpu_count",
    *GPU_FEATURES,
    "hour_of_day",
    "day_of_week",
    "workload_log_median",
    "log1p_workload_count",
    "user_log_median",
    "log1p_user_count",
    "user_log_iqr",
    "queue_log_median",
    "log1p_queue_count",
    "queue_gpus_log_median",
    "log1p_queue_gpus_count",
    "queue_gpus_log_iqr",
)


def _hour_and_weekday(submit_time_seconds: FloatArray) -> tuple[FloatArray, FloatArray]:
    hours = np.floor(submit_time_seconds / 3600.0)
    hour_of_day = np.mod(hours, 24.0)
    # 1970-01-01 was a Thursday (weekday 3 with Monday = 0).
    day_of_week = np.mod(np.floor(hours / 24.0) + 3.0, 7.0)
    return hour_of_day, day_of_week


def jct_features(query: JobQuery, history: HistoryColumns) -> FloatArray:
    """Features of the JCT model: the job's request, when it was submitted, and its keys' history."""
    hour_of_day, day_of_week = _hour_and_weekday(query.submit_time_seconds)
    return np.column_stack(
        [
            _log2_positive(query.gpu_count),
            gpu_features(query.gpu_models),
            hour_of_day,
            day_of_week,
            history.workload_log_median,
            np.log1p(history.workload_count),
            history.user_log_median,
            np.log1p(history.user_count),
            history.user_log_iqr,
            history.queue_log_median,
            np.log1p(history.queue_count),
            history.queue_gpus_log_median,
            np.log1p(history.queue_gpus_count),
            history.queue_gpus_log_iqr,
        ]
    )
