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
from advisor.sharing import UNKNOWN, sharing_mode, sharing_prior

NORM_MIN = 0.01
NORM_MAX = 1.0

LIGHT_UTIL_RATIO = 0.3
HEAVY_UTIL_RATIO = 0.7
DEFAULT_UTIL_RATIO = 1.0

# The grid of the leave-one-family-out check in `InterferenceModel.fit` (see the module doc).
ALPHA_GRID = (0.0, 0.5, 1.0)
# 0.3: a new workload's three probe pairs per GPU model keep 3 / 3.3 of its offsets when its measurements are
# consistent enough for the check to trust them.
SHRINKAGE_GRID = (0.3, 1.0, 3.0, 10.0)
PARTNER_GRID = (True, False)
# (α, λ, partner offsets, ω) and the grid point of the check's fits, (α, λ, partner offsets).
_Knobs = tuple[float, float, bool, float]
_Key = tuple[float, float, bool]
DEFAULT_KNOBS: _Knobs = (1.0, 3.0, True, 0.5)
NEIGHBOUR_GRID = (0.0, 0.5, 1.0)
# How far a side without measured pairs moves from the heuristic toward the model: all the way, unless choosing the
# knobs with one training family left aside loses to the heuristic on that family (see `_choose_knobs`).
UNMEASURED_WEIGHTS = (1.0, 0.0)
MIN_CHECK_FAMILIES = 3
MIN_CHECK_TRAIN_ROWS = 20
CHECK_PROBES = 3
NEIGHBOURS = 5
BACKFIT_ROUNDS = 4
# Clip above at 1 unless the training data says sharing can speed a job up (see the module doc).
CLIP_QUANTILE = 0.99
CLIP_TOLERANCE = 0.01


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


def sharing_modes(frame: pd.DataFrame) -> list[str]:
    """Each pair's sharing mode (`advisor.sharing`; "" = unknown, also where the column is absent)."""
    if "sharing" not in frame.columns:
        return [UNKNOWN] * len(frame)
    return [sharing_mode(m) for m in frame["sharing"]]


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
    (`advisor.models.baselines`).
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


# ------------------------------------------------------------------------------------------- identity parts


def _gpu_key(workload: str, gpu: str) -> str:
    return f"{workload}@{gpu}"


@dataclass(frozen=True)
class Offsets:
    """Shrunk sensitivity (as `self`) and aggressiveness (as `other`) of measured workloads, overall (keyed by
    workload name) and per GPU model (keyed ``workload@gpu``)."""

    sensitivity: dict[str, float]
    aggressiveness: dict[str, float]

    def of(
        self, this: Sequence[str], other: Sequence[str], gpus: Sequence[str], *, sides: _SideCodes | None = None
    ) -> FloatArray:
        """Each row's offset: this side's sensitivity plus the other side's aggressiveness (0 for unknown names);
        `sides`, when given, is `_SideCodes.of(this, other, gpus)` computed once for many calls."""
        sides = sides if sides is not None else _SideCodes.of(this, other, gpus)
        sens, aggr = self.side_values(sides.distinct)
        result: FloatArray = sens[sides.this] + aggr[sides.other]
        return result

    def side_values(self, sides: Sequence[tuple[str, str]]) -> tuple[FloatArray, FloatArray]:
        """(sensitivity, aggressiveness) of each distinct (workload, GPU model), overall plus per GPU model."""
        sens, aggr = self.sensitivity.get, self.aggressiveness.get
        keys = [(w, _gpu_key(w, g)) for w, g in sides]
        return (
            np.fromiter((sens(w, 0.0) + sens(k, 0.0) for w, k in keys), np.float64, len(keys)),
            np.fromiter((aggr(w, 0.0) + aggr(k, 0.0) for w, k in keys), np.float64, len(keys)),
        )


@dataclass(frozen=True)
class _SideCodes:
    """Rows (this, other, GPU model) as indices of their distinct (workload, GPU model) sides: a batch repeats a few
    workloads many times, so each distinct side is looked up once."""

    distinct: list[tuple[str, str]]
    this: npt.NDArray[np.intp]
    other: npt.NDArray[np.intp]

    @classmethod
    def of(cls, this: Sequence[str], other: Sequence[str], gpus: Sequence[str]) -> _SideCodes:
        index: dict[tuple[str, str], int] = {}
        setdefault = index.setdefault
        code_this = [setdefault(k, len(index)) for k in zip(this, gpus, strict=True)]
        code_other = [setdefault(k, len(index)) for k in zip(other, gpus, strict=True)]
        return cls(list(index), np.asarray(code_this, dtype=np.intp), np.asarray(code_other, dtype=np.intp))


def _shrunk_means(codes: npt.NDArray[np.intp], values: FloatArray, count: int, shrinkage: float) -> FloatArray:
    sums = np.bincount(codes, weights=values, minlength=count)
    return sums / (np.bincount(codes, minlength=count) + shrinkage)


_OffsetLevel = tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], list[str]]


def offset_levels(this: Sequence[str], other: Sequence[str], gpus: Sequence[str]) -> list[_OffsetLevel]:
    """The two levels `fit_offsets` backfits, per workload and per workload and GPU model: each as the rows' codes of
    this and of the other side among the level's sorted distinct names, and those names."""
    this_names, other_names = np.asarray(this, dtype=object), np.asarray(other, dtype=object)
    at_gpu = "@" + np.asarray(gpus, dtype=object)  # `_gpu_key`, built column-wise
    n = len(this_names)
    levels: list[_OffsetLevel] = []
    for keys_this, keys_other in ((this_names, other_names), (this_names + at_gpu, other_names + at_gpu)):
        codes, names = _codes(np.concatenate([keys_this, keys_other]))
        levels.append((codes[:n], codes[n:], names))
    return levels


def fit_offsets(
    this: Sequence[str],
    other: Sequence[str],
    gpus: Sequence[str],
    residual: FloatArray,
    shrinkage: float,
    *,
    partners: bool = True,
    levels: list[_OffsetLevel] | None = None,
) -> Offsets:
    """Backfit sensitivity and aggressiveness on `residual`, first per workload, then per workload and GPU model
    (without `partners`, sensitivities alone: a measured partner then counts as any other). `levels`, when given, is
    `offset_levels(this, other, gpus)` computed once for many calls."""
    sensitivity: dict[str, float] = {}
    aggressiveness: dict[str, float] = {}
    left = residual.copy()
    for code_this, code_other, names in levels if levels is not None else offset_levels(this, other, gpus):
        sens = np.zeros(len(names))
        aggr = np.zeros(len(names))
        for _ in range(BACKFIT_ROUNDS):
            sens = _shrunk_means(code_this, left - aggr[code_other], len(names), shrinkage)
            if partners:
                aggr = _shrunk_means(code_other, left - sens[code_this], len(names), shrinkage)
        left = left - sens[code_this] - aggr[code_other]
        sensitivity |= {name: float(v) for name, v in zip(names, sens, strict=True) if v != 0.0}
        aggressiveness |= {name: float(v) for name, v in zip(names, aggr, strict=True) if v != 0.0}
    return Offsets(sensitivity, aggressiveness)


@dataclass(frozen=True)
class NeighbourTable:
    """Per GPU model, the neighbour correction of each (self, other) of workloads measured there: row index of self
    (`rows`), column index of other (`columns`), and the values (NaN where there is none)."""

    rows: dict[str, dict[str, int]]
    columns: dict[str, dict[str, int]]
    values: dict[str, FloatArray]

    def lookup(
        self, this: Sequence[str], other: Sequence[str], gpus: Sequence[str], *, sides: _SideCodes | None = None
    ) -> FloatArray:
        """Each row's correction (0 where the table has none); names are looked up once per distinct side (`sides`,
        when given, is `_SideCodes.of(this, other, gpus)` computed once for many calls)."""
        sides = sides if sides is not None else _SideCodes.of(this, other, gpus)
        row = np.array([self.rows.get(g, {}).get(w, -1) for w, g in sides.distinct], dtype=np.intp)
        column = np.array([self.columns.get(g, {}).get(w, -1) for w, g in sides.distinct], dtype=np.intp)
        tables = list(self.values.values())
        code = {gpu: k for k, gpu in enumerate(self.values)}
        gpu_code = np.array([code.get(g, -1) for _, g in sides.distinct], dtype=np.intp)
        out = np.zeros(len(sides.this))
        this_row, other_column, this_gpu = row[sides.this], column[sides.other], gpu_code[sides.this]
        usable = (this_row >= 0) & (other_column >= 0)
        for k, table in enumerate(tables):
            mask = usable & (this_gpu == k)
            if mask.any():
                out[mask] = np.nan_to_num(table[this_row[mask], other_column[mask]])
        return out

    def to_state(self) -> dict[str, Any]:
        return {
            gpu: {
                "rows": list(self.rows[gpu]),
                "columns": list(self.columns[gpu]),
                "values": [[None if np.isnan(v) else float(v) for v in row] for row in values],
            }
            for gpu, values in self.values.items()
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> NeighbourTable:
        return cls(
            {gpu: {name: i for i, name in enumerate(t["rows"])} for gpu, t in state.items()},
            {gpu: {name: j for j, name in enumerate(t["columns"])} for gpu, t in state.items()},
            {
                gpu: np.array(
                    [[np.nan if v is None else v for v in row] for row in t["values"]], dtype=np.float64
                ).reshape(len(t["rows"]), len(t["columns"]))
                for gpu, t in state.items()
            },
        )


def _codes(names: Sequence[str] | npt.NDArray[np.object_]) -> tuple[npt.NDArray[np.intp], list[str]]:
    """Each name's index among the sorted distinct names, and those names (hashed in C: the knob search asks this
    hundreds of times per fit)."""
    codes, distinct = pd.factorize(np.asarray(names, dtype=object), sort=True)
    return codes.astype(np.intp, copy=False), [str(n) for n in distinct]


_NeighbourGroup = tuple[str, npt.NDArray[np.intp], npt.NDArray[np.intp], list[str], npt.NDArray[np.intp], list[str]]


def neighbour_groups(
    this: Sequence[str], other: Sequence[str], gpus: Sequence[str], measured_rows: npt.NDArray[np.bool_] | None = None
) -> list[_NeighbourGroup]:
    """The rows `fit_neighbours` tables per GPU model (of the `measured_rows`, every row when None): for each GPU
    model in name order, its rows' positions among the measured rows, their codes of this and of the other side among
    the sorted distinct names, and those names."""
    if measured_rows is None:
        measured_rows = np.ones(len(this), dtype=bool)
    gpu_codes, gpu_names_sorted = _codes([g for g, m in zip(gpus, measured_rows, strict=True) if m])
    this_kept = [t for t, m in zip(this, measured_rows, strict=True) if m]
    other_kept = [o for o, m in zip(other, measured_rows, strict=True) if m]
    groups: list[_NeighbourGroup] = []
    for k, gpu in enumerate(gpu_names_sorted):
        at = np.flatnonzero(gpu_codes == k)
        row_codes, row_names = _codes([this_kept[i] for i in at])
        column_codes, column_names = _codes([other_kept[i] for i in at])
        groups.append((gpu, at, row_codes, row_names, column_codes, column_names))
    return groups


def fit_neighbours(
    this: Sequence[str],
    other: Sequence[str],
    gpus: Sequence[str],
    residual: FloatArray,
    *,
    groups: list[_NeighbourGroup] | None = None,
) -> NeighbourTable:
    """The neighbour correction of every (self, other) of workloads measured on a GPU model (see the module doc);
    `residual` is what the physical part and the offsets leave. `groups`, when given, is `neighbour_groups(this,
    other, gpus)` computed once for many calls; it holds every row, so it is used only when no residual is NaN."""
    rows_of: dict[str, dict[str, int]] = {}
    columns_of: dict[str, dict[str, int]] = {}
    values_of: dict[str, FloatArray] = {}
    residual = np.asarray(residual, dtype=np.float64)
    measured_rows = ~np.isnan(residual)
    if groups is None or not measured_rows.all():
        groups = neighbour_groups(this, other, gpus, measured_rows)
    residual = residual[measured_rows]
    for gpu, at, row_codes, row_names, column_codes, column_names in groups:
        if len(row_names) < 2:
            continue
        cells = row_codes * len(column_names) + column_codes
        size = len(row_names) * len(column_names)
        counts = np.bincount(cells, minlength=size)
        sums = np.bincount(cells, weights=residual[at], minlength=size)
        # this × partner, the mean residual of each measured cell, NaN where not measured.
        values = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan).reshape(len(row_names), len(column_names))
        known = ~np.isnan(values)
        filled = np.nan_to_num(values)
        # Mean absolute residual difference of each two workloads over the partners both were measured with.
        both = known[:, None, :] & known[None, :, :]
        diff = np.abs(filled[:, None, :] - filled[None, :, :]) * both
        shared = both.sum(axis=2)
        distance = np.where(shared > 0, diff.sum(axis=2) / np.maximum(shared, 1), np.inf)
        np.fill_diagonal(distance, np.inf)
        out = np.full(values.shape, np.nan)
        for i in range(len(values)):
            order = np.argsort(distance[i], kind="stable")
            order = order[np.isfinite(distance[i, order])]
            # Per partner, the first `NEIGHBOURS` of the nearest workloads that were measured with it.
            measured = known[order]
            chosen = measured & (np.cumsum(measured, axis=0) <= NEIGHBOURS)
            count = chosen.sum(axis=0)
            total = (filled[order] * chosen).sum(axis=0)
            out[i] = np.where(count > 0, total / np.maximum(count, 1), np.nan)
        rows_of[gpu] = {w: j for j, w in enumerate(row_names)}
        columns_of[gpu] = {w: j for j, w in enumerate(column_names)}
        values_of[gpu] = out
    return NeighbourTable(rows_of, columns_of, values_of)


# ------------------------------------------------------------------------------------------- probes


def reference_workloads(frame: pd.DataFrame, count: int, *, excluded_families: set[str]) -> list[str]:
    """`count` fixed reference workloads of a colocations frame, none of `excluded_families`: the workloads measured
    with the most distinct partners, at most one per family (ties by name), as a profiler's reference set would be."""
    fam_a, fam_b = pair_families(frame)
    family = dict(zip(frame["workload_a"].astype(str), fam_a, strict=True)) | dict(
        zip(frame["workload_b"].astype(str), fam_b, strict=True)
    )
    both = pd.DataFrame(
        {
            "workload": np.concatenate([frame["workload_a"].astype(str), frame["workload_b"].astype(str)]),
            "partner": np.concatenate([frame["workload_b"].astype(str), frame["workload_a"].astype(str)]),
        }
    )
    partners = both.groupby("workload")["partner"].nunique()
    ranked = sorted(partners.index, key=lambda w: (-int(partners[w]), w))
    chosen: list[str] = []
    families: set[str] = set()
    for workload in ranked:
        fam = family[workload]
        if fam in excluded_families or fam in families:
            continue
        chosen.append(workload)
        families.add(fam)
        if len(chosen) == count:
            break
    return chosen


def probe_rows(
    frame: pd.DataFrame, held_out: npt.NDArray[np.bool_], references: Sequence[str]
) -> npt.NDArray[np.bool_]:
    """Rows of `held_out` that pair a held-out workload with a reference workload: the probe co-runs."""
    refs = set(references)
    ref_a = frame["workload_a"].astype(str).isin(refs).to_numpy()
    ref_b = frame["workload_b"].astype(str).isin(refs).to_numpy()
    result: npt.NDArray[np.bool_] = held_out & (ref_a | ref_b)
    return result


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


@dataclass(frozen=True)
class _CheckFold:
    """One held-out fold of the check: every part's prediction per grid point (α, λ), the truth, and which scored
    sides belong to a workload without measured pairs in the fold's training part."""

    family: str
    truth: FloatArray
    heuristic: FloatArray
    unmeasured: npt.NDArray[np.bool_]
    base: dict[_Key, FloatArray]
    neighbour: dict[_Key, FloatArray]


@dataclass(frozen=True)
class _CheckTotals:
    """The check's error sums per (probes, fold) and grid point, for choosing knobs with any family left aside."""

    families: list[list[str]]  # per probe setting, each fold's family
    counts: list[npt.NDArray[np.float64]]  # per probe setting, each fold's scored sides
    heuristic: list[npt.NDArray[np.float64]]  # per probe setting, each fold's heuristic error sum
    sums: dict[_Knobs, list[npt.NDArray[np.float64]]]  # per grid point and probe setting, each fold's error sum

    @classmethod
    def of(cls, folds: dict[int, list[_CheckFold]], unmeasured_weight: float, norm_max: float) -> _CheckTotals:
        settings = [folds[p] for p in sorted(folds)]
        sums: dict[_Knobs, list[npt.NDArray[np.float64]]] = {}
        for knobs in product(ALPHA_GRID, SHRINKAGE_GRID, PARTNER_GRID, NEIGHBOUR_GRID):
            sums[knobs] = [
                np.array([np.sum(_clipped(f, knobs, unmeasured_weight, norm_max)) for f in held]) for held in settings
            ]
        return cls(
            [[f.family for f in held] for held in settings],
            [np.array([len(f.truth) for f in held], dtype=np.float64) for held in settings],
            [np.array([np.sum(np.abs(f.heuristic - f.truth)) for f in held]) for held in settings],
            sums,
        )

    def best(self, left_aside: str | None = None) -> tuple[float, _Knobs, list[float]] | None:
        """The grid point with the lowest mean over probe settings of the pooled MAE, among those that do not lose to
        the heuristic on any held-out family without probes (the first setting); `left_aside` is not looked at."""
        keep = [np.array([f != left_aside for f in fams]) for fams in self.families]
        best: tuple[float, _Knobs, list[float]] | None = None
        for knobs, sums in self.sums.items():
            # A grid point that loses to the heuristic on a held-out family is out (α = 0, λ = ∞ is the heuristic).
            if np.any((sums[0] > self.heuristic[0] + 1e-12) & keep[0]):
                continue
            maes = [
                float(np.sum(s[k]) / max(np.sum(c[k]), 1.0)) for s, c, k in zip(sums, self.counts, keep, strict=True)
            ]
            score = float(np.mean(maes))
            if best is None or score < best[0]:
                best = (score, knobs, maes)
        return best

    def selection_holds(self) -> bool:
        """Whether choosing the knobs without a family never loses to the heuristic on that family (no probes)."""
        for i, family in enumerate(self.families[0]):
            chosen = self.best(left_aside=family)
            if chosen is None or self.sums[chosen[1]][0][i] > self.heuristic[0][i] + 1e-12:
                return False
        return True


def _clipped(fold: _CheckFold, knobs: _Knobs, unmeasured_weight: float, norm_max: float) -> FloatArray:
    alpha, shrinkage, partners, weight = knobs
    key = (alpha, shrinkage, partners)
    raw = fold.base[key] + weight * fold.neighbour[key]
    if unmeasured_weight != 1.0:
        raw = np.where(fold.unmeasured, fold.heuristic + unmeasured_weight * (raw - fold.heuristic), raw)
    result: FloatArray = np.abs(np.clip(raw, NORM_MIN, norm_max) - fold.truth)
    return result


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
    ) -> _CheckFold:
        """Every grid point's parts for the scored rows of `test` (stacked both orders), fitted on `train`."""
        stacked = _Stacked.of_frame(train)
        target = np.concatenate(norm_targets(train))
        booster = self._train_correction(stacked, target)
        correction = _lgbm.predict(booster, stacked.features)
        test_stacked = _Stacked.of_frame(test)
        test_correction = _lgbm.predict(booster, test_stacked.features)
        base: dict[_Key, FloatArray] = {}
        neighbour: dict[_Key, FloatArray] = {}
        # The names are the same at every grid point: encoded once per fold.
        names = (stacked.this, stacked.other, stacked.gpus)
        test_names = (test_stacked.this, test_stacked.other, test_stacked.gpus)
        levels, groups = offset_levels(*names), neighbour_groups(*names)
        sides, test_sides = _SideCodes.of(*names), _SideCodes.of(*test_names)
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
        return _CheckFold(
            family,
            np.concatenate(norm_targets(test))[scored],
            test_stacked.heuristic[scored],
            unmeasured,
            base,
            neighbour,
        )

    def _choose_knobs(self, frame: pd.DataFrame) -> tuple[_Knobs, float, dict[str, Any]]:
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
        folds: dict[int, list[_CheckFold]] = {0: [], CHECK_PROBES: []}
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
            totals = _CheckTotals.of(folds, unmeasured_weight, self.norm_max_)
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
