"""Co-location interference: each workload's normalised throughput when two share one GPU.

The model exists to answer for workloads it has never measured, so it is built from three additive parts, each used
only where it can be trusted:

- the *physical* part, for every pair: the physical prior of the pair's sharing mode (`advisor.sharing`:
  turn-taking under time-slicing, the utilisation sum ``min(1, 1 / (u_a + u_b))`` under MPS and for pairs of unknown
  mode, isolation but for memory bandwidth and power under MIG) plus ``α ×`` a small LightGBM correction over
  physical features only (SM and memory-bandwidth utilisation of both sides and their sums, memory as a fraction
  of the GPU's, each side's steps/s per FP32 TFLOPS). The correction is constrained to be non-increasing in every
  partner and sum feature, so the prediction never rises when the partner gets heavier; with α = 0 the part *is*
  the prior;
- per-workload *offsets*, only for workloads with measured pairs (identity is the workload name): how much more (or
  less) a workload suffers than the physical part says (sensitivity) and how much more it hurts its partners
  (aggressiveness), overall and per GPU model, fitted by backfitting on the physical part's residuals and shrunk
  toward 0 by ``n / (n + λ)`` for n measured rows — a new workload's probe co-runs (a few pairs with fixed reference
  workloads) move it off 0;
- a *neighbour* correction, for pairs (A, B) whose both workloads have measured pairs on the GPU model: the mean
  remaining residual of B's partners next to the workloads that respond like A to the partners both were measured
  with (A's 5 nearest by mean absolute residual difference), times a weight ω.

Every part predicts ``f(self, other, gpu) → norm_self`` and is trained on every measured pair in both orders; a pair
is predicted as ``(f(A, B), f(B, A))``, so swapping the inputs swaps the outputs exactly. α, λ and ω are chosen inside
`fit` by a leave-one-family-out check on the training data alone, scoring only the held-out family's side, once
without and once with 3 probe co-runs per held-out workload (the protocols of `advisor.models.training.evaluate`).
The selection is itself checked the same way (knobs chosen with one training family left aside must not lose to the
heuristic on it); where it fails, a side whose workload has no measured pairs gets the heuristic. Here and below,
"the heuristic" is the physical prior. The learned parts apply only to pairs in a sharing mode the training pairs
were measured in; a pair in another mode gets its mode's prior alone.
Predictions are clipped below at `NORM_MIN` and above at 1 when the training data never shows a job going faster next
to a partner (the 99th percentile of its normalised throughputs at most 1.01), else at its 99.9th percentile.

The identity parts are `advisor.models.interference_identity`, the check `advisor.models.interference_check`,
what is read from a colocations frame `advisor.models.interference_frames`; this module holds the physical part and
the model that composes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, product
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from advisor.datasets import pair_families, side_columns_from_frame
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
from advisor.models.artifact import Artifact, ArtifactError
from advisor.models.interference_check import (
    ALPHA_GRID,
    CHECK_PROBES,
    DEFAULT_KNOBS,
    MIN_CHECK_FAMILIES,
    MIN_CHECK_TRAIN_ROWS,
    NEIGHBOUR_GRID,
    PARTNER_GRID,
    SHRINKAGE_GRID,
    UNMEASURED_WEIGHTS,
    CheckFold,
    CheckTotals,
    GridKey,
    Knobs,
)
from advisor.models.interference_frames import (
    NORM_MAX,
    NORM_MIN,
    gpu_names,
    norm_targets,
    probe_rows,
    reference_workloads,
    sharing_modes,
    usable_rows,
)
from advisor.models.interference_identity import (
    NeighbourTable,
    Offsets,
    SideCodes,
    fit_neighbours,
    fit_offsets,
    neighbour_groups,
    offset_levels,
)
from advisor.sharing import UNKNOWN, sharing_mode, sharing_prior

# The model's parts, its check and the frame readers live in `interference_frames`, `interference_identity` and
# `interference_check`; their public names stay importable from here, where they were defined before the split.
__all__ = [
    "ALPHA_GRID",
    "CHECK_PROBES",
    "MIN_CHECK_FAMILIES",
    "NEIGHBOUR_GRID",
    "NORM_MAX",
    "NORM_MIN",
    "PARTNER_GRID",
    "PHYSICAL_FEATURES",
    "SHRINKAGE_GRID",
    "UNMEASURED_WEIGHTS",
    "InterferenceModel",
    "NeighbourTable",
    "Offsets",
    "SharingClassInterference",
    "fit_neighbours",
    "fit_offsets",
    "gpu_names",
    "norm_targets",
    "physical_features",
    "probe_rows",
    "reference_workloads",
    "sharing_classes",
    "sharing_modes",
    "usable_rows",
]

LIGHT_UTIL_RATIO = 0.3
HEAVY_UTIL_RATIO = 0.7
# Clip above at 1 unless the training data says sharing can speed a job up (see the module doc).
CLIP_QUANTILE = 0.99
CLIP_TOLERANCE = 0.01


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
    classed by the terciles of log solo throughput in the training data instead. A baseline
    (`advisor.models.baseline_predictors`).
    """

    def fit(self, frame: pd.DataFrame) -> SharingClassInterference:
        frame = usable_rows(frame)
        a = side_columns_from_frame(frame, "a")
        b = side_columns_from_frame(frame, "b")
        log_thr = np.log2(np.maximum(np.concatenate([a.solo_throughput, b.solo_throughput]), 1e-12))
        self.throughput_edges_ = np.quantile(log_thr, [1 / 3, 2 / 3])
        norm_a, norm_b = norm_targets(frame)
        own = np.concatenate([sharing_classes(a, self.throughput_edges_), sharing_classes(b, self.throughput_edges_)])
        other = np.concatenate([own[len(a) :], own[: len(a)]])
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
        cls_a = sharing_classes(a, self.throughput_edges_).astype(np.int64)
        cls_b = sharing_classes(b, self.throughput_edges_).astype(np.int64)
        return np.column_stack([self.table_[cls_a, cls_b], self.table_[cls_b, cls_a]])


# ------------------------------------------------------------------------------------------- physical part

_F = {name: i for i, name in enumerate(INTERFERENCE_FEATURES)}
# (name, monotone constraint): -1 = the prediction may only fall as the feature grows (the partner's load and sums).
_PHYSICAL: tuple[tuple[str, int], ...] = (
    ("self_log2_steps_per_s_per_fp32_tflops", 0),
    ("other_log2_steps_per_s_per_fp32_tflops", 0),
    ("self_sm_util", 0),
    ("other_sm_util", -1),
    ("self_mem_bw_util", 0),
    ("other_mem_bw_util", -1),
    ("self_mem_fraction", 0),
    ("other_mem_fraction", -1),
    ("sum_sm_util", -1),
    ("sum_mem_bw_util", -1),
    ("sum_mem_fraction", -1),
)
PHYSICAL_FEATURES = tuple(name for name, _ in _PHYSICAL)
MONOTONE_CONSTRAINTS = [sign for _, sign in _PHYSICAL]
_COPIED = [_F[name] for name in PHYSICAL_FEATURES[2:]]


def physical_features(features: FloatArray) -> FloatArray:
    """The correction booster's inputs, from rows of `advisor.features.interference_features` (training and serving)."""
    fp32 = features[:, _F["gpu_log2_fp32_tflops"]]
    out = np.empty((len(features), len(PHYSICAL_FEATURES)), dtype=np.float64)
    out[:, 0] = features[:, _F["self_log2_steps_per_s"]] - fp32
    out[:, 1] = features[:, _F["other_log2_steps_per_s"]] - fp32
    out[:, 2:] = features[:, _COPIED]
    return out


# ------------------------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class _Stacked:
    """A batch of pairs stacked in both orders: row i < n is (a_i, b_i), row n + i is (b_i, a_i)."""

    features: FloatArray
    heuristic: FloatArray
    this: list[str]
    other: list[str]
    gpus: list[str]

    @classmethod
    def of(
        cls,
        a: SideColumns,
        b: SideColumns,
        gpus: Sequence[str],
        names_a: Sequence[str],
        names_b: Sequence[str],
        *,
        modes: Sequence[str] | None = None,
    ) -> _Stacked:
        modes = list(modes) if modes is not None else [UNKNOWN] * len(a)
        features = np.vstack([interference_features(a, b, gpus), interference_features(b, a, gpus)])
        heuristic = np.concatenate([sharing_prior(a, b, modes), sharing_prior(b, a, modes)])
        return cls(
            physical_features(features),
            heuristic,
            [*names_a, *names_b],
            [*names_b, *names_a],
            [*gpus, *gpus],
        )

    @classmethod
    def of_frame(cls, frame: pd.DataFrame) -> _Stacked:
        return cls.of(
            side_columns_from_frame(frame, "a"),
            side_columns_from_frame(frame, "b"),
            gpu_names(frame),
            frame["workload_a"].astype(str).tolist(),
            frame["workload_b"].astype(str).tolist(),
            modes=sharing_modes(frame),
        )


@dataclass(kw_only=True, eq=False)
class InterferenceModel(BoostedEstimator):
    """Heuristic + monotone physical correction + shrunk identity offsets + neighbours; sklearn conventions."""

    kind = "interference"

    num_boost_round: int = 60
    learning_rate: float = 0.1
    num_leaves: int = 4
    min_data_in_leaf: int = 40

    def _train_correction(self, stacked: _Stacked, target: FloatArray) -> Any:
        return _lgbm.train_booster(
            stacked.features,
            target - stacked.heuristic,
            feature_names=PHYSICAL_FEATURES,
            objective="regression",
            num_boost_round=self.num_boost_round,
            learning_rate=self.learning_rate,
            num_leaves=self.num_leaves,
            min_data_in_leaf=self.min_data_in_leaf,
            num_threads=self.num_threads,
            seed=self.seed,
            extra={"monotone_constraints": MONOTONE_CONSTRAINTS, "lambda_l2": 1.0},
        )

    def fit(self, frame: pd.DataFrame) -> InterferenceModel:
        """Train on a colocations frame (see `advisor.datasets.COLOCATIONS`); rows without labels are dropped."""
        frame = usable_rows(frame)
        if frame.empty:
            raise ValueError("no usable colocation rows (positive solo and co-located throughputs on both sides)")
        stacked = _Stacked.of_frame(frame)
        target = np.concatenate(norm_targets(frame))
        high = float(np.quantile(target, CLIP_QUANTILE))
        self.norm_max_ = 1.0 if high <= 1.0 + CLIP_TOLERANCE else float(np.quantile(target, 0.999))
        knobs, self.unmeasured_weight_, self.check_ = self._choose_knobs(frame)
        self.alpha_, self.shrinkage_, self.partner_offsets_, self.neighbour_weight_ = knobs
        self.measured_ = frozenset(stacked.this)
        self.sharing_modes_ = frozenset(sharing_modes(frame))
        self.booster_ = self._train_correction(stacked, target)
        base = stacked.heuristic + self.alpha_ * _lgbm.predict(self.booster_, stacked.features)
        self.offsets_ = fit_offsets(
            stacked.this, stacked.other, stacked.gpus, target - base, self.shrinkage_, partners=self.partner_offsets_
        )
        left = target - base - self.offsets_.of(stacked.this, stacked.other, stacked.gpus)
        self.neighbours_ = fit_neighbours(stacked.this, stacked.other, stacked.gpus, left)
        self.n_pairs_ = len(frame)
        return self

    # --------------------------------------------------------------------------------------- the check

    def _check_fold(
        self, family: str, train: pd.DataFrame, test: pd.DataFrame, scored: npt.NDArray[np.bool_]
    ) -> CheckFold:
        """Every grid point's parts for the scored rows of `test` (stacked both orders), fitted on `train`."""
        stacked = _Stacked.of_frame(train)
        target = np.concatenate(norm_targets(train))
        booster = self._train_correction(stacked, target)
        correction = _lgbm.predict(booster, stacked.features)
        test_stacked = _Stacked.of_frame(test)
        test_correction = _lgbm.predict(booster, test_stacked.features)
        base: dict[GridKey, FloatArray] = {}
        neighbour: dict[GridKey, FloatArray] = {}
        # The names are the same at every grid point: encoded once per fold.
        names = (stacked.this, stacked.other, stacked.gpus)
        test_names = (test_stacked.this, test_stacked.other, test_stacked.gpus)
        levels, groups = offset_levels(*names), neighbour_groups(*names)
        sides, test_sides = SideCodes.of(*names), SideCodes.of(*test_names)
        for alpha, shrinkage, partners in product(ALPHA_GRID, SHRINKAGE_GRID, PARTNER_GRID):
            fitted_base = stacked.heuristic + alpha * correction
            offsets = fit_offsets(*names, target - fitted_base, shrinkage, partners=partners, levels=levels)
            left = target - fitted_base - offsets.of(*names, sides=sides)
            table = fit_neighbours(*names, left, groups=groups)
            predicted = test_stacked.heuristic + alpha * test_correction
            predicted = predicted + offsets.of(*test_names, sides=test_sides)
            base[(alpha, shrinkage, partners)] = predicted[scored]
            neighbour[(alpha, shrinkage, partners)] = table.lookup(*test_names, sides=test_sides)[scored]
        measured = set(stacked.this)
        unmeasured = np.array([w not in measured for w in test_stacked.this], dtype=bool)[scored]
        return CheckFold(
            family,
            np.concatenate(norm_targets(test))[scored],
            test_stacked.heuristic[scored],
            unmeasured,
            base,
            neighbour,
        )

    def _choose_knobs(self, frame: pd.DataFrame) -> tuple[Knobs, float, dict[str, Any]]:
        """(α, λ, partner offsets, ω) with the lowest mean of the two leave-one-family-out MAEs (no probes;
        `CHECK_PROBES` probes) among the grid points that do not lose to the heuristic on any held-out family without
        probes, and the weight of the model for unmeasured sides.

        The guard on the training families need not hold on a new one: a point can beat the heuristic on every
        training family and lose on the next. So the selection itself is checked the same way: for each training
        family, the knobs chosen without looking at it must not lose to the heuristic on it. If that fails, the
        inner check cannot be trusted for unmeasured workloads, and they get the heuristic (weight 0); measured
        workloads keep the knobs, chosen again for that weight.
        """
        fam_a, fam_b = pair_families(frame)
        families = sorted(set(fam_a) | set(fam_b))
        if len(families) < MIN_CHECK_FAMILIES:
            return DEFAULT_KNOBS, 1.0, {"held_out_families": 0}
        folds: dict[int, list[CheckFold]] = {0: [], CHECK_PROBES: []}
        for family in families:
            held_out = (fam_a == family) | (fam_b == family)
            for probes, held in folds.items():
                moved = np.zeros(len(frame), dtype=bool)
                if probes:
                    refs = reference_workloads(frame[~held_out], probes, excluded_families={family})
                    moved = probe_rows(frame, held_out, refs)
                train = frame[~held_out | moved].reset_index(drop=True)
                test_mask = held_out & ~moved
                if len(train) < MIN_CHECK_TRAIN_ROWS or not test_mask.any():
                    continue
                scored = np.concatenate([fam_a[test_mask] == family, fam_b[test_mask] == family])
                held.append(self._check_fold(family, train, frame[test_mask].reset_index(drop=True), scored))
        if not folds[0] or not folds[CHECK_PROBES]:
            return DEFAULT_KNOBS, 1.0, {"held_out_families": 0}
        summary: dict[str, Any] = {"held_out_families": len(families)}
        for unmeasured_weight in UNMEASURED_WEIGHTS:
            totals = CheckTotals.of(folds, unmeasured_weight, self.norm_max_)
            holds = totals.selection_holds()
            summary[f"selection_holds_at_weight_{unmeasured_weight:g}"] = holds
            if holds or unmeasured_weight == UNMEASURED_WEIGHTS[-1]:
                break
        # The heuristic's figures on the same held-out sides, to read the model's beside.
        for probes, heuristic, count in zip(sorted(folds), totals.heuristic, totals.counts, strict=True):
            summary[f"heuristic_mae_{probes or 'no'}_probes"] = float(heuristic.sum() / max(count.sum(), 1.0))
        best = totals.best()
        if best is None:
            summary["every_point_lost"] = True
            return (0.0, SHRINKAGE_GRID[-1], False, 0.0), 0.0, summary
        summary |= {"mae_no_probes": best[2][0], f"mae_{CHECK_PROBES}_probes": best[2][1]}
        return best[1], unmeasured_weight, summary

    # --------------------------------------------------------------------------------------- prediction

    def predict_columns(
        self,
        a: SideColumns,
        b: SideColumns,
        gpu_models: Sequence[str],
        workloads_a: Sequence[str] | None = None,
        workloads_b: Sequence[str] | None = None,
        *,
        sharing: Sequence[str] | None = None,
    ) -> FloatArray:
        """(n, 2) array of (norm_a, norm_b) for n pairs given column-wise. The workload names, when given, bring in
        the offsets and neighbours of measured workloads; without them every pair is predicted as unmeasured.
        `sharing` is each pair's sharing mode (unknown when None): a pair in a mode none of the training pairs was
        measured in gets the mode's physical prior alone, since what was learned corrects another mode's prior."""
        n = len(a)
        if n == 0:
            return np.empty((0, 2), dtype=np.float64)
        gpus = [normalize_gpu_model(g) for g in gpu_models]
        if len(gpus) != n:
            raise ValueError(f"gpu_models: {len(gpus)} names for {n} pairs")
        names_a = list(workloads_a) if workloads_a is not None else [""] * n
        names_b = list(workloads_b) if workloads_b is not None else [""] * n
        modes = [sharing_mode(m) for m in sharing] if sharing is not None else [UNKNOWN] * n
        if len(modes) != n:
            raise ValueError(f"sharing: {len(modes)} modes for {n} pairs")
        stacked = _Stacked.of(a, b, gpus, names_a, names_b, modes=modes)
        out = stacked.heuristic + self.alpha_ * _lgbm.predict(self.booster_, stacked.features)
        if workloads_a is not None or workloads_b is not None:
            out += self.offsets_.of(stacked.this, stacked.other, stacked.gpus)
            if self.neighbour_weight_ > 0:
                out += self.neighbour_weight_ * self.neighbours_.lookup(stacked.this, stacked.other, stacked.gpus)
        if self.unmeasured_weight_ != 1.0:
            measured = self.measured_
            known = np.fromiter((w in measured for w in stacked.this), dtype=bool, count=2 * n)
            moved = stacked.heuristic + self.unmeasured_weight_ * (out - stacked.heuristic)
            out = np.where(known, out, moved)
        learned = np.fromiter((m in self.sharing_modes_ for m in modes), dtype=bool, count=n)
        out = np.where(np.concatenate([learned, learned]), out, stacked.heuristic)
        out = np.clip(out, NORM_MIN, self.norm_max_)
        return np.column_stack([out[:n], out[n:]])

    def predict_pairs(
        self, pairs: Sequence[tuple[SoloProfile, SoloProfile]], gpu_models: Sequence[str] | str, sharing: str = UNKNOWN
    ) -> FloatArray:
        """(n, 2) array of (norm_a, norm_b) for (resident, candidate) pairs on the given GPU model(s).

        `gpu_models` is one name for all pairs or one per pair, in any spelling (`advisor.gpus`); `sharing` how the
        GPU is shared (`advisor.sharing`; "" unknown).
        """
        gpus = [gpu_models] * len(pairs) if isinstance(gpu_models, str) else list(gpu_models)
        if len(gpus) != len(pairs):
            raise ValueError(f"gpu_models: {len(gpus)} names for {len(pairs)} pairs")
        sides = list(chain.from_iterable(pairs))
        if len(sides) != 2 * len(pairs):
            raise ValueError("pairs: expected (resident, candidate) pairs of two SoloProfiles each")
        a = side_columns(sides[0::2])
        b = side_columns(sides[1::2])
        return self.predict_columns(
            a,
            b,
            gpus,
            [s.workload for s in sides[0::2]],
            [s.workload for s in sides[1::2]],
            sharing=[sharing] * len(pairs),
        )

    def predict_frame(self, frame: pd.DataFrame) -> FloatArray:
        """(n, 2) predictions for the rows of a colocations frame, in order."""
        return self.predict_columns(
            side_columns_from_frame(frame, "a"),
            side_columns_from_frame(frame, "b"),
            gpu_names(frame),
            frame["workload_a"].astype(str).tolist(),
            frame["workload_b"].astype(str).tolist(),
            sharing=sharing_modes(frame),
        )

    # --------------------------------------------------------------------------------------- artifacts

    def to_artifact(self) -> Artifact:
        state: dict[str, Any] = {
            "n_pairs": self.n_pairs_,
            "features": list(PHYSICAL_FEATURES),
            "monotone_constraints": MONOTONE_CONSTRAINTS,
            "alpha": self.alpha_,
            "shrinkage": self.shrinkage_,
            "partner_offsets": self.partner_offsets_,
            "neighbour_weight": self.neighbour_weight_,
            "unmeasured_weight": self.unmeasured_weight_,
            "measured_workloads": sorted(self.measured_),
            "sharing_modes": sorted(self.sharing_modes_),
            "norm_range": [NORM_MIN, self.norm_max_],
            "check": self.check_,
            "sensitivity": self.offsets_.sensitivity,
            "aggressiveness": self.offsets_.aggressiveness,
            "neighbours": self.neighbours_.to_state(),
        }
        return Artifact(
            kind=self.kind,
            params=self.get_params(),
            state=state,
            boosters={"interference": _lgbm.to_text(self.booster_)},
        )

    @classmethod
    def from_artifact(cls, artifact: Artifact) -> InterferenceModel:
        state = artifact.state
        if "alpha" not in state:
            raise ArtifactError(
                "interference artifact saved by an earlier version (no physical part): retrain it with `models train`"
            )
        model = cls(**artifact.params)
        model.booster_ = _lgbm.from_text(artifact.boosters["interference"])
        model.n_pairs_ = int(state["n_pairs"])
        model.alpha_ = float(state["alpha"])
        model.shrinkage_ = float(state["shrinkage"])
        model.partner_offsets_ = bool(state["partner_offsets"])
        model.neighbour_weight_ = float(state["neighbour_weight"])
        # Artifacts saved before the selection check move every side all the way to the model.
        model.unmeasured_weight_ = float(state.get("unmeasured_weight", 1.0))
        model.measured_ = frozenset(str(w) for w in state.get("measured_workloads", []))
        # Artifacts saved before the sharing mode was read were trained on pairs of unknown mode.
        model.sharing_modes_ = frozenset(str(m) for m in state.get("sharing_modes", [UNKNOWN]))
        model.norm_max_ = float(state["norm_range"][1])
        model.check_ = dict(state["check"])
        model.offsets_ = Offsets(
            {str(k): float(v) for k, v in state["sensitivity"].items()},
            {str(k): float(v) for k, v in state["aggressiveness"].items()},
        )
        model.neighbours_ = NeighbourTable.from_state(state["neighbours"])
        return model
