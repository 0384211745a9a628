"""Co-location interference: each workload's normalised throughput when two share one GPU.

One LightGBM regressor ``f(self, other, gpu) → norm_self`` is trained on every measured pair in both orders, and a
pair is predicted as ``(f(A, B), f(B, A))``. Swapping the inputs therefore swaps the outputs exactly, so the scorer
gets the same answer whichever workload it calls "resident". Predictions are clipped to [`NORM_MIN`, `NORM_MAX`]:
sharing never makes a job faster than alone, and a ratio of 0 would mean an infinite slowdown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.datasets import side_columns_from_frame
from advisor.features import (
    INTERFERENCE_FEATURES,
    FloatArray,
    SideColumns,
    SoloProfile,
    interference_features,
    side_columns,
)
from advisor.gpus import normalize_gpu_model
from advisor.models import _lgbm
from advisor.models._lgbm import BoostedEstimator
from advisor.models.artifact import Artifact

NORM_MIN = 0.01
NORM_MAX = 1.0


def norm_targets(frame: pd.DataFrame) -> tuple[FloatArray, FloatArray]:
    """Measured (norm_a, norm_b) = co-located / solo throughput of a colocations frame."""
    norm_a = frame["coloc_throughput_a"].to_numpy(np.float64) / frame["solo_throughput_a"].to_numpy(np.float64)
    norm_b = frame["coloc_throughput_b"].to_numpy(np.float64) / frame["solo_throughput_b"].to_numpy(np.float64)
    return norm_a, norm_b


def usable_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows with positive solo and co-located throughputs on both sides (others carry no label)."""
    ok = np.ones(len(frame), dtype=bool)
    for column in ("solo_throughput_a", "solo_throughput_b", "coloc_throughput_a", "coloc_throughput_b"):
        ok &= frame[column].to_numpy(np.float64) > 0
    return frame[ok].reset_index(drop=True)


def gpu_names(frame: pd.DataFrame) -> list[str]:
    return [normalize_gpu_model(g) for g in frame["gpu_model"]]


@dataclass(kw_only=True, eq=False)
class InterferenceModel(BoostedEstimator):
    """LightGBM over `advisor.features.interference_features`; sklearn conventions (fit returns self)."""

    kind = "interference"

    num_boost_round: int = 80
    learning_rate: float = 0.15
    min_data_in_leaf: int = 3

    def fit(self, frame: pd.DataFrame) -> InterferenceModel:
        """Train on a colocations frame (see `advisor.datasets.COLOCATIONS`); rows without labels are dropped."""
        frame = usable_rows(frame)
        a = side_columns_from_frame(frame, "a")
        b = side_columns_from_frame(frame, "b")
        gpus = gpu_names(frame)
        norm_a, norm_b = norm_targets(frame)
        features = np.vstack([interference_features(a, b, gpus), interference_features(b, a, gpus)])
        target = np.clip(np.concatenate([norm_a, norm_b]), NORM_MIN, NORM_MAX)
        self.booster_ = self.train_booster(
            features,
            target,
            feature_names=INTERFERENCE_FEATURES,
            objective="regression",
        )
        self.n_pairs_ = len(frame)
        return self

    def predict_columns(self, a: SideColumns, b: SideColumns, gpu_models: Sequence[str]) -> FloatArray:
        """(n, 2) array of (norm_a, norm_b) for n pairs given column-wise (the fast path)."""
        n = len(a)
        if n == 0:
            return np.empty((0, 2), dtype=np.float64)
        features = np.vstack([interference_features(a, b, gpu_models), interference_features(b, a, gpu_models)])
        raw = np.clip(_lgbm.predict(self.booster_, features), NORM_MIN, NORM_MAX)
        return np.column_stack([raw[:n], raw[n:]])

    def predict_pairs(
        self, pairs: Sequence[tuple[SoloProfile, SoloProfile]], gpu_models: Sequence[str] | str
    ) -> FloatArray:
        """(n, 2) array of (norm_a, norm_b) for (resident, candidate) pairs on the given GPU model(s).

        `gpu_models` is one name for all pairs or one per pair, in any spelling (`advisor.gpus`).
        """
        names = (
            [normalize_gpu_model(gpu_models)] * len(pairs)
            if isinstance(gpu_models, str)
            else [normalize_gpu_model(g) for g in gpu_models]
        )
        if len(names) != len(pairs):
            raise ValueError(f"gpu_models: {len(names)} names for {len(pairs)} pairs")
        return self.predict_columns(side_columns([p[0] for p in pairs]), side_columns([p[1] for p in pairs]), names)

    def predict_frame(self, frame: pd.DataFrame) -> FloatArray:
        """(n, 2) predictions for the rows of a colocations frame, in order."""
        return self.predict_columns(
            side_columns_from_frame(frame, "a"), side_columns_from_frame(frame, "b"), gpu_names(frame)
        )

    def to_artifact(self) -> Artifact:
        return Artifact(
            kind=self.kind,
            params=self.get_params(),
            state={
                "n_pairs": self.n_pairs_,
                "norm_range": [NORM_MIN, NORM_MAX],
                "features": list(INTERFERENCE_FEATURES),
            },
            boosters={"interference": _lgbm.to_text(self.booster_)},
        )

    @classmethod
    def from_artifact(cls, artifact: Artifact) -> InterferenceModel:
        model = cls(**artifact.params)
        model.booster_ = _lgbm.from_text(artifact.boosters["interference"])
        model.n_pairs_ = int(artifact.state["n_pairs"])
        return model
