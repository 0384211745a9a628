"""The baselines every model is reported beside: if a model cannot beat these, it is not worth serving.

Interference: the mean normalised throughput; 0.5 for everything; the physical prior of the pair's sharing mode
(`advisor.sharing`); the utilisation-sum heuristic (two jobs whose SM utilisations add up to
at most 1 do not slow each other down, otherwise each gets 1/sum); and light/medium/heavy sharing classes (mean
normalised throughput per pair of classes, learned from the training pairs; defined in `advisor.models.interference`,
whose model falls back on it for unfamiliar workloads).
Throughput: nearest-GPU scaling (the same workload's measurement on the most similar GPU type, scaled by the FP32
throughput ratio of the two GPUs and by the GPU-count ratio). It lives in `advisor.models.throughput` because the
model starts from the same anchor.
JCT: the median run time of the job's workload, else its user, else all jobs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from advisor.features import FloatArray, SideColumns
from advisor.models.interference import NORM_MAX, NORM_MIN, SharingClassInterference, norm_targets, usable_rows
from advisor.sharing import sharing_prior

__all__ = [
    "ConstantInterference",
    "MeanInterference",
    "SharingClassInterference",
    "SharingPriorInterference",
    "UtilSumInterference",
]


class ConstantInterference:
    """Predict `value` for both sides ("predict 0.5": an even time-slice, the answer to beat on time-sliced pairs)."""

    def __init__(self, *, value: float = 0.5) -> None:
        self.value = value

    def fit(self, frame: pd.DataFrame) -> ConstantInterference:
        return self

    def predict_columns(self, a: SideColumns, b: SideColumns, gpu_models: Sequence[str]) -> FloatArray:
        return np.full((len(a), 2), self.value)


class SharingPriorInterference:
    """The physical prior of each pair's sharing mode alone (`advisor.sharing`), nothing learned."""

    def fit(self, frame: pd.DataFrame) -> SharingPriorInterference:
        return self

    def predict_modes(self, a: SideColumns, b: SideColumns, modes: Sequence[str]) -> FloatArray:
        prior_a, prior_b = sharing_prior(a, b, modes), sharing_prior(b, a, modes)
        return np.column_stack([np.clip(prior_a, NORM_MIN, NORM_MAX), np.clip(prior_b, NORM_MIN, NORM_MAX)])


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
