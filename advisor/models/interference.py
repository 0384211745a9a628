"""Co-location interference: each workload's normalised throughput when two share one GPU.

Every part predicts ``f(self, other, gpu) → norm_self`` and is trained on every measured pair in both orders; a pair
is predicted as ``(f(A, B), f(B, A))``. Swapping the inputs therefore swaps the outputs exactly, so the scorer gets
the same answer whichever workload it calls "resident". Predictions are clipped to [`NORM_MIN`, `NORM_MAX`]:
sharing never makes a job faster than alone, and a ratio of 0 would mean an infinite slowdown.

A regressor over every feature predicts pairs of workloads like those it was trained on very well (random held-out
pairs) but carries over badly to a job family it has never seen: it learns which family a solo throughput and batch
size belong to. So the model has three parts:

- the *specific* booster over all of `advisor.features.INTERFERENCE_FEATURES`;
- a *general* prediction for unfamiliar workloads: a small, strongly regularised booster over a few physical
  features (each side's steps/s per FP32 TFLOPS of the GPU, their ratio, the GPU, utilisation and memory when
  known), blended with the light/medium/heavy sharing-class table;
- a *familiarity* gate between them: the L1 distance of each side's (log2 solo throughput, log2 batch size) to the
  nearest workload profile seen in training on the same GPU model, summed over both sides; the weight of the
  specific booster falls linearly from 1 at distance 0 to 0 at `familiarity_scale_`.

The general part's blend weight and the familiarity scale are chosen inside `fit` by a grouped check on the
training data (leave one job family out, or one workload when the data names no families), so nothing about the
data the model is later evaluated on goes into them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, product
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from advisor.datasets import side_columns_from_frame
from advisor.features import (
    INTERFERENCE_FEATURES,
    FloatArray,
    SideColumns,
    SoloProfile,
    gpu_feature_table,
    interference_features,
    interference_features_of,
    interference_sides,
    side_columns,
)
from advisor.gpus import normalize_gpu_model
from advisor.models import _lgbm
from advisor.models._forest import RowGroup
from advisor.models._lgbm import BoostedEstimator
from advisor.models.artifact import Artifact

if TYPE_CHECKING:
    import lightgbm as lgb

NORM_MIN = 0.01
NORM_MAX = 1.0

LIGHT_UTIL_RATIO = 0.3
HEAVY_UTIL_RATIO = 0.7

# Candidates of the grouped check in `InterferenceModel.fit`: the general booster's share of the general
# prediction (the sharing-class table has the rest), and the familiarity distance at which the specific booster's
# weight reaches 0 (log2 units summed over both sides; 0 trusts it only for exactly known profiles).
BLEND_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)
FAMILIARITY_SCALE_GRID = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0)
CHECK_WORKLOAD_FOLDS = 5
# Used when the training data has fewer than `MIN_CHECK_GROUPS` workloads to hold out.
DEFAULT_BLEND = 0.5
DEFAULT_FAMILIARITY_SCALE = 1.0
MIN_CHECK_GROUPS = 3
MIN_CHECK_TRAIN_ROWS = 20
# log2 batch size standing in for "unknown" in a familiarity profile: far from every real batch size, so a workload
# of unknown batch size is familiar only to another of unknown batch size with a similar throughput.
UNKNOWN_LOG2_BATCH = -16.0


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


# ------------------------------------------------------------------------------------------- sharing classes


def sharing_classes(side: SideColumns, throughput_edges: FloatArray) -> FloatArray:
    """0 light, 1 medium, 2 heavy: by SM utilisation, else by solo-throughput tercile (data sets without util)."""
    by_util = np.where(side.sm_util < LIGHT_UTIL_RATIO, 0.0, np.where(side.sm_util < HEAVY_UTIL_RATIO, 1.0, 2.0))
    by_throughput = np.searchsorted(throughput_edges, np.log2(np.maximum(side.solo_throughput, 1e-12))).astype(
        np.float64
    )
    return np.where(np.isnan(side.sm_util), by_throughput, by_util)


class SharingClassInterference:
    """Mean normalised throughput per (own class, partner's class), learned from the training pairs.

    Classes come from SM utilisation (light < 0.3 ≤ medium < 0.7 ≤ heavy). Rows without utilisation (Gavel) are
    classed by the terciles of log solo throughput in the training data instead. A baseline of its own
    (`advisor.models.baselines`) and the fallback inside `InterferenceModel`.
    """

    def fit(self, frame: pd.DataFrame) -> SharingClassInterference:
        frame = usable_rows(frame)
        a = side_columns_from_frame(frame, "a")
        b = side_columns_from_frame(frame, "b")
        log_thr = np.log2(np.maximum(np.concatenate([a.solo_throughput, b.solo_throughput]), 1e-12))
        self.throughput_edges_ = np.quantile(log_thr, [1 / 3, 2 / 3])
        norm_a, norm_b = norm_targets(frame)
        cls_a = sharing_classes(a, self.throughput_edges_)
        cls_b = sharing_classes(b, self.throughput_edges_)
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

    def classes_of(self, side: SideColumns) -> npt.NDArray[np.int64]:
        """Each row's class (`sharing_classes`) as an index of `table_`."""
        return sharing_classes(side, self.throughput_edges_).astype(np.int64)

    def predict_sides(self, this: SideColumns, other: SideColumns) -> FloatArray:
        """`this` side's normalised throughput next to `other`, row by row."""
        result: FloatArray = self.table_[self.classes_of(this), self.classes_of(other)]
        return result

    def predict_columns(self, a: SideColumns, b: SideColumns, gpu_models: Sequence[str]) -> FloatArray:
        return np.column_stack([self.predict_sides(a, b), self.predict_sides(b, a)])

    def to_state(self) -> dict[str, Any]:
        return {"throughput_edges": self.throughput_edges_.tolist(), "table": self.table_.tolist(), "mean": self.mean_}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> SharingClassInterference:
        out = cls()
        out.throughput_edges_ = np.asarray(state["throughput_edges"], dtype=np.float64)
        out.table_ = np.asarray(state["table"], dtype=np.float64)
        out.mean_ = float(state["mean"])
        return out


# ------------------------------------------------------------------------------------------- the general part

_F = {name: i for i, name in enumerate(INTERFERENCE_FEATURES)}
GENERAL_FEATURES = (
    "self_log2_steps_per_s_per_fp32_tflops",
    "other_log2_steps_per_s_per_fp32_tflops",
    "log2_steps_ratio",
    "gpu_log2_fp32_tflops",
    "self_sm_util",
    "self_mem_bw_util",
    "self_mem_fraction",
    "self_amp",
    "other_sm_util",
    "other_mem_bw_util",
    "other_mem_fraction",
    "other_amp",
    "sum_sm_util",
    "sum_mem_bw_util",
    "sum_mem_fraction",
)
_GENERAL_COPIED = [_F[name] for name in GENERAL_FEATURES[3:]]


def _keyed_columns(names: Sequence[str]) -> tuple[frozenset[int], frozenset[int]]:
    """Which of the columns `names` depend only on this side and the GPU model (`self_*`, and `gpu_*`, on the GPU
    model alone) and which only on the other side and the GPU model (`other_*`), as `interference_features` and
    `general_features` build them: the boosters evaluate these once per distinct side (`advisor.models._forest`)."""

    def starting(*prefixes: str) -> frozenset[int]:
        return frozenset(i for i, name in enumerate(names) if name.startswith(prefixes))

    return starting("self_", "gpu_"), starting("other_")


SPECIFIC_KEYED = _keyed_columns(INTERFERENCE_FEATURES)
GENERAL_KEYED = _keyed_columns(GENERAL_FEATURES)


def general_features(features: FloatArray) -> FloatArray:
    """The general booster's inputs, derived from rows of `interference_features` (training and serving alike)."""
    columns = features.T  # built column by column, as `advisor.features.interference_features_of` builds its own
    fp32 = columns[_F["gpu_log2_fp32_tflops"]]
    steps_self = columns[_F["self_log2_steps_per_s"]]
    steps_other = columns[_F["other_log2_steps_per_s"]]
    out = np.empty((len(GENERAL_FEATURES), len(features)), dtype=np.float64)
    np.subtract(steps_self, fp32, out=out[0])
    np.subtract(steps_other, fp32, out=out[1])
    np.subtract(steps_self, steps_other, out=out[2])
    np.take(columns, _GENERAL_COPIED, axis=0, out=out[3:])
    result: FloatArray = out.T
    return result


def _profile_points(side: SideColumns) -> FloatArray:
    """(log2 solo throughput, log2 batch size) per row: where a workload sits for the familiarity gate."""
    with np.errstate(divide="ignore", invalid="ignore"):
        log_thr = np.log2(side.solo_throughput)
        log_batch = np.where(side.batch_size > 0, np.log2(np.maximum(side.batch_size, 1.0)), UNKNOWN_LOG2_BATCH)
    return np.column_stack([log_thr, log_batch])


@dataclass(frozen=True)
class Profiles:
    """The workload profiles seen in training, per GPU model, padded into tables for a vectorised nearest search.

    Row i of `log_thr`/`log_batch` holds the profiles of GPU model `codes[name] = i`, padded with inf; the last row
    (all inf) stands for a GPU model with no profiles.
    """

    points: dict[str, FloatArray]
    codes: dict[str, int]
    log_thr: FloatArray
    log_batch: FloatArray

    @classmethod
    def of(cls, points: dict[str, FloatArray]) -> Profiles:
        width = max([len(p) for p in points.values()] + [1])
        log_thr = np.full((len(points) + 1, width), np.inf)
        log_batch = np.full((len(points) + 1, width), np.inf)
        for i, known in enumerate(points.values()):
            log_thr[i, : len(known)] = known[:, 0]
            log_batch[i, : len(known)] = known[:, 1]
        return cls(points, {name: i for i, name in enumerate(points)}, log_thr, log_batch)

    @classmethod
    def from_training(cls, a: SideColumns, b: SideColumns, gpus: Sequence[str]) -> Profiles:
        points = np.vstack([_profile_points(a), _profile_points(b)])
        names = np.array([*gpus, *gpus])
        ok = np.isfinite(points).all(axis=1)
        return cls.of({str(g): np.unique(points[ok & (names == g)], axis=0) for g in sorted(set(gpus))})

    def code_of(self, gpu_model: str) -> int:
        """The row of `log_thr`/`log_batch` for a GPU model in any spelling (the last row when it has none)."""
        return self.codes.get(normalize_gpu_model(gpu_model), len(self.codes))

    def pair_distances(self, a: SideColumns, b: SideColumns, gpus: Sequence[str]) -> FloatArray:
        """Per pair, the L1 distances of both sides' profiles to the nearest training profile on the pair's GPU
        model, summed (inf when either side has no profile or no workload was seen on that GPU model)."""
        of_name = {g: self.code_of(g) for g in dict.fromkeys(gpus)}
        code = np.fromiter(map(of_name.__getitem__, gpus), np.int64, len(a))
        return summed_distances(self.nearest(a, code), self.nearest(b, code))

    def nearest(self, side: SideColumns, code: npt.NDArray[np.int64]) -> FloatArray:
        """Per row, the L1 distance of `side`'s profile to the nearest profile in row `code` (`code_of`) of the
        tables (inf when none, NaN when the side has no profile)."""
        points = _profile_points(side)
        gap = np.abs(points[:, 0:1] - self.log_thr[code])
        gap += np.abs(points[:, 1:2] - self.log_batch[code])
        result: FloatArray = gap.min(axis=1)
        return result


def summed_distances(this: FloatArray, other: FloatArray) -> FloatArray:
    """The gate's distance of a pair from its sides' `Profiles.nearest` distances (inf where either is NaN)."""
    total = this + other
    result: FloatArray = np.where(np.isnan(total), np.inf, total)
    return result


def familiarity_weights(distance: FloatArray, scale: float) -> FloatArray:
    """The specific booster's weight: 1 at distance 0, falling linearly to 0 at `scale` (0: exact matches only)."""
    if scale <= 0:
        exact: FloatArray = (distance == 0).astype(np.float64)
        return exact
    weights: FloatArray = np.clip(1.0 - distance / scale, 0.0, 1.0)
    return weights


@dataclass(frozen=True)
class _Fitted:
    """The parts fitted on one training set."""

    specific: lgb.Booster
    general: lgb.Booster
    classes: SharingClassInterference
    profiles: Profiles


@dataclass(frozen=True)
class _Parts:
    """Each part's prediction for stacked rows (both orders of each pair) and the gate's distance per row."""

    specific: FloatArray
    general: FloatArray
    classes: FloatArray
    distance: FloatArray


@dataclass(kw_only=True, eq=False)
class InterferenceModel(BoostedEstimator):
    """Specific + general LightGBM boosters behind a familiarity gate; sklearn conventions (fit returns self).

    The inherited hyperparameters are the specific booster's; `general_*` are the general booster's.
    """

    kind = "interference"

    num_boost_round: int = 80
    learning_rate: float = 0.15
    min_data_in_leaf: int = 3
    general_num_boost_round: int = 50
    general_learning_rate: float = 0.15
    general_num_leaves: int = 8
    general_min_data_in_leaf: int = 30

    def _fit_parts(self, frame: pd.DataFrame) -> _Fitted:
        a = side_columns_from_frame(frame, "a")
        b = side_columns_from_frame(frame, "b")
        gpus = gpu_names(frame)
        norm_a, norm_b = norm_targets(frame)
        features = np.vstack([interference_features(a, b, gpus), interference_features(b, a, gpus)])
        target = np.clip(np.concatenate([norm_a, norm_b]), NORM_MIN, NORM_MAX)
        common: dict[str, Any] = {"objective": "regression", "num_threads": self.num_threads, "seed": self.seed}
        specific = _lgbm.train_booster(
            features,
            target,
            feature_names=INTERFERENCE_FEATURES,
            num_boost_round=self.num_boost_round,
            learning_rate=self.learning_rate,
            num_leaves=self.num_leaves,
            min_data_in_leaf=self.min_data_in_leaf,
            **common,
        )
        general = _lgbm.train_booster(
            general_features(features),
            target,
            feature_names=GENERAL_FEATURES,
            num_boost_round=self.general_num_boost_round,
            learning_rate=self.general_learning_rate,
            num_leaves=self.general_num_leaves,
            min_data_in_leaf=self.general_min_data_in_leaf,
            **common,
        )
        return _Fitted(specific, general, SharingClassInterference().fit(frame), Profiles.from_training(a, b, gpus))

    def fit(self, frame: pd.DataFrame) -> InterferenceModel:
        """Train on a colocations frame (see `advisor.datasets.COLOCATIONS`); rows without labels are dropped."""
        frame = usable_rows(frame)
        self.blend_weight_, self.familiarity_scale_, self.check_ = self._choose_blend(frame)
        fitted = self._fit_parts(frame)
        self.booster_ = fitted.specific
        self.general_booster_: lgb.Booster | None = fitted.general
        self.classes_ = fitted.classes
        self.profiles_ = fitted.profiles
        self.n_pairs_ = len(frame)
        return self

    def _choose_blend(self, frame: pd.DataFrame) -> tuple[float, float, dict[str, Any]]:
        """(blend weight, familiarity scale, summary) minimising the MAE of a grouped check on the training data.

        Each held-out part of `_check_folds` is predicted by the parts fitted on the pairs without it, and the grid
        point with the lowest MAE over all held-out rows wins.
        """
        held_out: list[tuple[_Parts, FloatArray]] = []
        for test in _check_folds(frame, self.seed):
            if test.all() or (~test).sum() < MIN_CHECK_TRAIN_ROWS:
                continue
            train_part = frame[~test].reset_index(drop=True)
            test_part = frame[test].reset_index(drop=True)
            parts = _predict_parts(self._fit_parts(train_part), *_frame_sides(test_part))
            held_out.append((parts, np.concatenate(norm_targets(test_part))))
        if not held_out:
            return DEFAULT_BLEND, DEFAULT_FAMILIARITY_SCALE, {"held_out_folds": 0}
        truth = np.concatenate([t for _, t in held_out])
        parts = _Parts(*(np.concatenate([getattr(p, f) for p, _ in held_out]) for f in _Parts.__dataclass_fields__))
        best: tuple[float, float, float] | None = None
        for blend, scale in product(BLEND_GRID, FAMILIARITY_SCALE_GRID):
            mae = float(np.mean(np.abs(_combine(parts, blend, scale) - truth)))
            if best is None or mae < best[0]:
                best = (mae, blend, scale)
        assert best is not None
        return best[1], best[2], {"held_out_folds": len(held_out), "held_out_rows": len(truth), "mae": best[0]}

    def predict_columns(self, a: SideColumns, b: SideColumns, gpu_models: Sequence[str]) -> FloatArray:
        """(n, 2) array of (norm_a, norm_b) for n pairs given column-wise (the fast path).

        Each distinct (this side, other side, GPU model) row is predicted once and copied to its repeats: the
        scorer's batches ask about one pod next to the same residents on many nodes, and a pair and its swap share
        their two rows. Values are compared bit for bit, so a row is computed exactly as it would be alone.
        """
        return self._predict_coded(a, b, GpuCodes.of(gpu_models))

    def _predict_coded(self, a: SideColumns, b: SideColumns, gpus: GpuCodes) -> FloatArray:
        n = len(a)
        if n == 0:
            return np.empty((0, 2), dtype=np.float64)
        rows = _directed_rows(a, b, gpus)
        values = self._predict_directed(rows)
        out = values[rows.inverse]
        return np.column_stack([out[:n], out[n:]])

    def _predict_directed(self, rows: _DirectedRows) -> FloatArray:
        """Each row's normalised throughput: gate-weighted specific and general predictions, each part evaluated
        only on the rows that give it some weight (a batch of new workloads costs the small general booster and a
        lookup, one of measured workloads the specific booster alone)."""
        # What depends on one side alone (its features, the gate's search, the sharing class) is computed once per
        # distinct side; the other side's is that of the swapped row, every row's swap being a row too.
        sides = _rows_of(rows.this, rows.side_rows)
        side_table = interference_sides(sides, gpu_feature_table(rows.gpu_names)[rows.gpu[rows.side_rows]])
        features = interference_features_of(side_table, rows.side, rows.side[rows.swap])
        out = np.zeros(len(rows))
        if self.general_booster_ is None:
            weight = np.ones(len(rows))
        else:
            codes = np.array([self.profiles_.code_of(g) for g in rows.gpu_names], dtype=np.int64)
            nearest = self.profiles_.nearest(sides, codes[rows.gpu[rows.side_rows]])[rows.side]
            distance = summed_distances(nearest, nearest[rows.swap])
            weight = familiarity_weights(distance, self.familiarity_scale_)
        specific = np.flatnonzero(weight > 0)
        if len(specific):
            everything = len(specific) == len(rows)
            inputs = features if everything else features[specific]
            groups = rows.groups(SPECIFIC_KEYED, None if everything else specific)
            predicted = np.clip(_lgbm.predict(self.booster_, inputs, groups), NORM_MIN, NORM_MAX)
            out[specific] = weight[specific] * predicted
        unfamiliar = np.flatnonzero(weight < 1)
        if len(unfamiliar) and self.general_booster_ is not None:
            everything = len(unfamiliar) == len(rows)
            inputs = features if everything else features[unfamiliar]
            # β·general + (1 − β)·classes; a part with no weight is skipped (adding its 0 changes nothing).
            blend = self.blend_weight_
            fallback = np.zeros(len(unfamiliar))
            if blend > 0:
                groups = rows.groups(GENERAL_KEYED, None if everything else unfamiliar)
                general = _lgbm.predict(self.general_booster_, general_features(inputs), groups)
                fallback = blend * np.clip(general, NORM_MIN, NORM_MAX)
            if blend < 1:
                side_class = self.classes_.classes_of(sides)
                own = side_class[rows.side[unfamiliar]]
                partner = side_class[rows.side[rows.swap[unfamiliar]]]
                classes = (1.0 - blend) * self.classes_.table_[own, partner]
                fallback = classes if blend <= 0 else fallback + classes
            out[unfamiliar] += (1.0 - weight[unfamiliar]) * fallback
        result: FloatArray = np.clip(out, NORM_MIN, NORM_MAX)
        return result

    def predict_pairs(
        self, pairs: Sequence[tuple[SoloProfile, SoloProfile]], gpu_models: Sequence[str] | str
    ) -> FloatArray:
        """(n, 2) array of (norm_a, norm_b) for (resident, candidate) pairs on the given GPU model(s).

        `gpu_models` is one name for all pairs or one per pair, in any spelling (`advisor.gpus`).
        """
        gpus = GpuCodes.normalized(gpu_models, len(pairs))
        if len(gpus.codes) != len(pairs):
            raise ValueError(f"gpu_models: {len(gpus.codes)} names for {len(pairs)} pairs")
        # Both sides in one pass: a[0], b[0], a[1], b[1], ...
        sides = list(chain.from_iterable(pairs))
        if len(sides) != 2 * len(pairs):
            raise ValueError("pairs: expected (resident, candidate) pairs of two SoloProfiles each")
        both = side_columns(sides)
        a, b = (SideColumns(*(getattr(both, c)[i::2] for c in _SIDE_COLUMNS)) for i in (0, 1))
        return self._predict_coded(a, b, gpus)

    def predict_frame(self, frame: pd.DataFrame) -> FloatArray:
        """(n, 2) predictions for the rows of a colocations frame, in order."""
        return self.predict_columns(*_frame_sides(frame))

    def to_artifact(self) -> Artifact:
        state: dict[str, Any] = {
            "n_pairs": self.n_pairs_,
            "norm_range": [NORM_MIN, NORM_MAX],
            "features": list(INTERFERENCE_FEATURES),
        }
        boosters = {"interference": _lgbm.to_text(self.booster_)}
        if self.general_booster_ is not None:
            state |= {
                "general_features": list(GENERAL_FEATURES),
                "blend_weight": self.blend_weight_,
                "familiarity_scale": self.familiarity_scale_,
                "check": self.check_,
                "classes": self.classes_.to_state(),
                "profiles": {gpu: points.tolist() for gpu, points in self.profiles_.points.items()},
            }
            boosters["interference_general"] = _lgbm.to_text(self.general_booster_)
        return Artifact(kind=self.kind, params=self.get_params(), state=state, boosters=boosters)

    @classmethod
    def from_artifact(cls, artifact: Artifact) -> InterferenceModel:
        """Load a saved model; one saved before the general part existed predicts with its one booster as before."""
        model = cls(**artifact.params)
        model.booster_ = _lgbm.from_text(artifact.boosters["interference"])
        model.n_pairs_ = int(artifact.state["n_pairs"])
        general = artifact.boosters.get("interference_general")
        model.general_booster_ = None if general is None else _lgbm.from_text(general)
        if general is not None:
            state = artifact.state
            model.blend_weight_ = float(state["blend_weight"])
            model.familiarity_scale_ = float(state["familiarity_scale"])
            model.check_ = dict(state["check"])
            model.classes_ = SharingClassInterference.from_state(state["classes"])
            model.profiles_ = Profiles.of(
                {gpu: np.asarray(points, dtype=np.float64).reshape(-1, 2) for gpu, points in state["profiles"].items()}
            )
        return model


def _has_values(frame: pd.DataFrame, name: str) -> bool:
    """Whether both `name_a` and `name_b` exist and every row names a value on both sides."""
    columns = (f"{name}_a", f"{name}_b")
    if not all(c in frame.columns for c in columns):
        return False
    return all((frame[c].fillna("").astype(str).str.len() > 0).all() for c in columns)


def _check_folds(frame: pd.DataFrame, seed: int) -> list[npt.NDArray[np.bool_]]:
    """Test-row masks of the grouped check: one per job family (when every row names both families), then
    `CHECK_WORKLOAD_FOLDS` random folds of workloads. A pair is held out when either side is in the held-out group.

    Both kinds of novelty are checked because the model meets both: a new batch size of a known job, and a job unlike
    any it was trained on.
    """
    masks = []
    if _has_values(frame, "family"):
        fam_a = frame["family_a"].astype(str).to_numpy()
        fam_b = frame["family_b"].astype(str).to_numpy()
        families = sorted(set(fam_a) | set(fam_b))
        if len(families) >= MIN_CHECK_GROUPS:
            masks += [(fam_a == f) | (fam_b == f) for f in families]
    work_a = frame["workload_a"].astype(str).to_numpy()
    work_b = frame["workload_b"].astype(str).to_numpy()
    workloads = sorted(set(work_a) | set(work_b))
    if len(workloads) >= MIN_CHECK_GROUPS:
        order = np.random.default_rng(seed).permutation(len(workloads))
        fold_of = {w: int(order[i]) % CHECK_WORKLOAD_FOLDS for i, w in enumerate(workloads)}
        folds_a = np.array([fold_of[w] for w in work_a])
        folds_b = np.array([fold_of[w] for w in work_b])
        masks += [(folds_a == k) | (folds_b == k) for k in range(CHECK_WORKLOAD_FOLDS)]
    return masks


def _frame_sides(frame: pd.DataFrame) -> tuple[SideColumns, SideColumns, list[str]]:
    return side_columns_from_frame(frame, "a"), side_columns_from_frame(frame, "b"), gpu_names(frame)


_SIDE_COLUMNS = ("solo_throughput", "batch_size", "sm_util", "mem_bw_util", "mem_bytes", "amp")
_WIDTH = len(_SIDE_COLUMNS)
# `_numbered` numbers integer keys below this many times their count with a table of flags instead of sorting them.
DENSE_KEYS_PER_ROW = 16


def _rows_of(side: SideColumns, rows: npt.NDArray[np.int64]) -> SideColumns:
    return SideColumns(*(getattr(side, c)[rows] for c in _SIDE_COLUMNS))


@dataclass(frozen=True)
class _DirectedRows:
    """The distinct rows (this side, other side, GPU model) of a batch of n pairs stacked in both orders —
    (a, b) then (b, a) — with, for each of the 2n stacked rows, the index of its distinct row (`inverse`) and, for
    each distinct row, the index of its swap (`swap`: the row with the sides exchanged).

    `gpu` indexes `gpu_names`, the batch's distinct GPU model names. `side` numbers each row's this side with its
    GPU model (equal bits, equal number), and `side_rows[k]` is a row whose this side is number k: the other side
    of row i is number `side[swap[i]]`.
    """

    this: SideColumns
    other: SideColumns
    gpu: npt.NDArray[np.int64]
    gpu_names: list[str]
    inverse: npt.NDArray[np.intp]
    swap: npt.NDArray[np.intp]
    side: npt.NDArray[np.intp]
    side_rows: npt.NDArray[np.intp]

    def __len__(self) -> int:
        return len(self.gpu)

    def groups(
        self, keyed: tuple[frozenset[int], frozenset[int]], subset: npt.NDArray[np.intp] | None
    ) -> tuple[RowGroup, RowGroup]:
        """`RowGroup`s of a booster's input columns keyed by this side and by the other side (`_keyed_columns`), for
        the rows `subset` of these rows (all when None)."""
        this, other = self.side, self.side[self.swap]
        if subset is not None:
            this, other = this[subset], other[subset]
        count = len(self.side_rows)
        return RowGroup(keyed[0], this, _key_rows(this, count)), RowGroup(keyed[1], other, _key_rows(other, count))


def _key_rows(codes: npt.NDArray[np.intp], n_keys: int) -> npt.NDArray[np.intp]:
    """For each key 0..n_keys-1, a row with that key (row 0 for a key no row has)."""
    rows = np.zeros(n_keys, dtype=np.intp)
    rows[codes] = np.arange(len(codes))
    return rows


# Odd 64-bit multipliers of `_row_hashes`, one per column of the side table of `_directed_rows`.
_HASH_MULTIPLIERS = 2 * np.random.default_rng(20261121).integers(1, 1 << 62, _WIDTH + 1, dtype=np.uint64) + 1


def _row_hashes(bits: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """A 64-bit hash of each column of `bits` (columns × rows → rows); rows with equal hashes are compared in full."""
    hashes: npt.NDArray[np.uint64] = _HASH_MULTIPLIERS.dot(bits)
    return hashes


def _numbered(keys: npt.NDArray[Any], below: int | None) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """(number of each key, for each number the index of a key with it): distinct keys get numbers 0..k-1.

    Keys that are integers in [0, `below`) are numbered with a table of `below` flags when it is small next to the
    keys (the scorer's batches: a few sides, many pairs of them), others by sorting.
    """
    if below is not None and len(keys) > 0 and below <= DENSE_KEYS_PER_ROW * len(keys):
        present = np.zeros(below, dtype=bool)
        present[keys] = True
        running = np.cumsum(present) - 1
        number, count = running[keys], int(running[-1]) + 1
    else:
        distinct, number = np.unique(keys, return_inverse=True)
        count = len(distinct)
    # Any key with the number will do (they are equal): repeated indices may assign in any order.
    index = np.empty(count, dtype=np.intp)
    index[number] = np.arange(len(keys))
    return number, index


@dataclass(frozen=True)
class GpuCodes:
    """The GPU model of each row of a batch as an index (`codes`) of the batch's distinct names (`names`), found with
    one pass over the rows' names."""

    codes: npt.NDArray[np.int64]
    names: list[str]

    @classmethod
    def of(cls, gpu_models: Sequence[str]) -> GpuCodes:
        """The names as given (`names` in order of first appearance)."""
        distinct = {g: i for i, g in enumerate(dict.fromkeys(gpu_models))}
        return cls(np.fromiter(map(distinct.__getitem__, gpu_models), np.int64, len(gpu_models)), list(distinct))

    @classmethod
    def normalized(cls, gpu_models: Sequence[str] | str, n: int) -> GpuCodes:
        """The names normalised (`advisor.gpus.normalize_gpu_model`): spellings of one model share a code. One name
        (a `str`) stands for all `n` rows."""
        if isinstance(gpu_models, str):
            return cls(np.zeros(n, dtype=np.int64), [normalize_gpu_model(gpu_models)])
        normal = {g: normalize_gpu_model(g) for g in dict.fromkeys(gpu_models)}
        number = {name: i for i, name in enumerate(dict.fromkeys(normal.values()))}
        code = {g: number[name] for g, name in normal.items()}
        return cls(np.fromiter(map(code.__getitem__, gpu_models), np.int64, len(gpu_models)), list(number))


def _directed_rows(a: SideColumns, b: SideColumns, gpu_models: Sequence[str] | GpuCodes) -> _DirectedRows:
    """`_DirectedRows` of the pairs (a[i], b[i]) on `gpu_models[i]`; rows are equal when all their bits are.

    The 2n sides (a then b, each with its pair's GPU model) are numbered first: grouped by a hash of their bits and
    each group checked bit for bit (should two different sides ever share a hash, no side is merged). Stacked row r
    is (side r, side (r + n) mod 2n), so rows are equal when their two side numbers are.
    """
    n = len(a)
    gpus = gpu_models if isinstance(gpu_models, GpuCodes) else GpuCodes.of(gpu_models)
    if len(gpus.codes) != n:
        raise ValueError(f"gpu_models: {len(gpus.codes)} names for {n} pairs")
    table = np.empty((_WIDTH + 1, 2 * n), dtype=np.float64)  # columns × stacked sides
    for i, column in enumerate(_SIDE_COLUMNS):
        table[i, :n], table[i, n:] = getattr(a, column), getattr(b, column)
    table[-1, :n] = gpus.codes
    table[-1, n:] = table[-1, :n]
    bits = table.view(np.uint64)
    side, first = _numbered(_row_hashes(bits), None)
    if not np.array_equal(bits.take(first[side], axis=1), bits):
        side = first = np.arange(2 * n)
    partner = np.concatenate([side[n:], side[:n]])
    inverse, rows = _numbered(side * len(first) + partner, len(first) ** 2)
    swapped = (rows + n) % (2 * n)
    return _DirectedRows(
        SideColumns(*table[:_WIDTH, rows]),
        SideColumns(*table[:_WIDTH, swapped]),
        table[-1, rows].astype(np.int64),
        gpus.names,
        inverse,
        inverse[swapped],
        side[rows],
        inverse[first],
    )


def _predict_parts(fitted: _Fitted, a: SideColumns, b: SideColumns, gpus: Sequence[str]) -> _Parts:
    features = np.vstack([interference_features(a, b, gpus), interference_features(b, a, gpus)])
    distance = fitted.profiles.pair_distances(a, b, gpus)
    return _Parts(
        specific=np.clip(_lgbm.predict(fitted.specific, features), NORM_MIN, NORM_MAX),
        general=np.clip(_lgbm.predict(fitted.general, general_features(features)), NORM_MIN, NORM_MAX),
        classes=np.concatenate([fitted.classes.predict_sides(a, b), fitted.classes.predict_sides(b, a)]),
        distance=np.tile(distance, 2),
    )


def _combine(parts: _Parts, blend: float, scale: float) -> FloatArray:
    """What `InterferenceModel.predict_columns` computes from the parts (for the grouped check)."""
    weight = familiarity_weights(parts.distance, scale)
    fallback = blend * parts.general + (1.0 - blend) * parts.classes
    return np.clip(weight * parts.specific + (1.0 - weight) * fallback, NORM_MIN, NORM_MAX)
