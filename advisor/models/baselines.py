"""The baselines every model is reported beside: if a model cannot beat these, it is not worth serving.

Interference: the mean normalised throughput; the utilisation-sum heuristic (two jobs whose SM utilisations add up to
at most 1 do not slow each other down, otherwise each gets 1/sum); and light/medium/heavy sharing classes (mean
normalised throughput per pair of classes, learned from the training pairs).
Throughput: nearest-GPU scaling (the same workload's measurement on the most similar GPU type, scaled by the FP32
throughput ratio of the two GPUs and by the GPU-count ratio). It lives in `advisor.models.throughput` because the
model starts from the same anchor.
JCT: the median run time of the job's workload, else its user, else all jobs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from advisor.datasets import side_columns_from_frame
from advisor.features import FloatArray, SideColumns
from advisor.models.interference import NORM_MAX, NORM_MIN, norm_targets, usable_rows

LIGHT_UTIL_RATIO = 0.3
HEAVY_UTIL_RATIO = 0.7


class MeanInterference:
    """Predict the training mean of the normalised throughputs for both sides."""

    def fit(self, frame: pd.DataFrame) -> MeanInterference:
        norm_a, norm_b = norm_targets(usable_rows(frame))
        self.mean_ = float(np.mean(np.concatenate([norm_a, norm_b])))
        return self

    def predict_columns(self, a: SideColumns, b: SideColumns, gpu_models: Sequence[str]) -> FloatArray:
        return np.full((len(a), 2), self.mean_)


class UtilSumInterference:
    """norm = min(1, 1 / (util_self + util_other)); a missing SM utilisation counts as `default_util_ratio`.

    With the default of 1.0 (assume the GPU is saturated) a pair without utilisation data gets an even time-slice,
    0.5 each. Nothing is learned.
    """

    def __init__(self, *, default_util_ratio: float = 1.0) -> None:
        self.default_util_ratio = default_util_ratio

    def fit(self, frame: pd.DataFrame) -> UtilSumInterference:
        return self

    def predict_columns(self, a: SideColumns, b: SideColumns, gpu_models: Sequence[str]) -> FloatArray:
        total = np.nan_to_num(a.sm_util, nan=self.default_util_ratio) + np.nan_to_num(
            b.sm_util, nan=self.default_util_ratio
        )
        norm = np.clip(1.0 / np.maximum(total, 1e-9), NORM_MIN, NORM_MAX)
        return np.column_stack([norm, norm])


def _classes(side: SideColumns, throughput_edges: FloatArray) -> FloatArray:
    """0 light, 1 medium, 2 heavy: by SM utilisation, else by solo-throughput tercile (data sets without util)."""
    by_util = np.where(side.sm_util < LIGHT_UTIL_RATIO, 0.0, np.where(side.sm_util < HEAVY_UTIL_RATIO, 1.0, 2.0))
    by_throughput = np.searchsorted(throughput_edges, np.log2(np.maximum(side.solo_throughput, 1e-12))).astype(
        np.float64
    )
    return np.where(np.isnan(side.sm_util), by_throughput, by_util)


class SharingClassInterference:
    """Mean normalised throughput per (own class, partner's class), learned from the training pairs.

    Classes come from SM utilisation (light < 0.3 ≤ medium < 0.7 ≤ heavy). Rows without utilisation (Gavel) are
    classed by the terciles of log solo throughput in the training data instead.
    """

    def fit(self, frame: pd.DataFrame) -> SharingClassInterference:
        frame = usable_rows(frame)
        a = side_columns_from_frame(frame, "a")
        b = side_columns_from_frame(frame, "b")
        log_thr = np.log2(np.maximum(np.concatenate([a.solo_throughput, b.solo_throughput]), 1e-12))
        self.throughput_edges_ = np.quantile(log_thr, [1 / 3, 2 / 3])
        norm_a, norm_b = norm_targets(frame)
        cls_a = _classes(a, self.throughput_edges_)
        cls_b = _classes(b, self.throughput_edges_)
        own = np.concatenate([cls_a, cls_b])
        other = np.concatenate([cls_b, cls_a])
        norm = np.concatenate([norm_a, norm_b])
        self.mean_ = float(np.mean(norm))
        self.table_ = np.full((3, 3), self.mean_)
        for i in range(3):
            for j in range(3):
                mask = (own == i) & (other == j)
                if mask.any():
                    self.table_[i, j] = float(np.mean(norm[mask]))
        return self

    def predict_columns(self, a: SideColumns, b: SideColumns, gpu_models: Sequence[str]) -> FloatArray:
        cls_a = _classes(a, self.throughput_edges_).astype(int)
        cls_b = _classes(b, self.throughput_edges_).astype(int)
        return np.column_stack([self.table_[cls_a, cls_b], self.table_[cls_b, cls_a]])
