"""Throughput: samples/s of a workload on a GPU model × GPU count × nodes × batch size, across GPU types.

A tree model cannot extrapolate to a GPU faster than any it was trained on, so every estimate starts from a
measurement — an *anchor*: the same workload's closest measured configuration, preferring the same GPU count and
nodes on the most similar GPU type (`find_anchors`). The nearest-GPU baseline scales that one anchor by the FP32
ratio of the two GPUs and the GPU-count ratio.

- Query about a GPU type the workload was measured on (another configuration of it): the nearest-GPU estimate times
  a LightGBM log2 correction learned from the specification ratios and configuration differences (trained on each
  measured row anchored on another configuration and on another GPU type).
- Query about a GPU type the workload was never measured on: `spec_scaled_estimate`. One anchor per measured GPU
  type, each scaled to the target by the workload's own learned sensitivity to each data-sheet number (FP16, FP32,
  memory bandwidth) and corrected for what its GPU type does beyond its data sheet for that workload
  (`SpecScaling`); the median over the anchors per spec, the geometric mean over the specs. How strongly each
  workload's sensitivity is shrunk toward the one pooled over all workloads is chosen leave-one-GPU-type-out on
  the training data (`_choose_spec_scaling`). The learned correction is not applied there: checked the same way on
  Sia (docs/models.md), it did not carry over to a GPU type it was not trained on. Per workload, the same check
  also chooses how far to move from the nearest-GPU estimate toward that one (`blend_estimates`: all the way, half,
  or not at all), so a workload whose data-sheet scaling was wrong on the training GPU types keeps the baseline.

Whichever of the two, a query on a GPU type the workload was measured on, in a configuration another GPU type measured
for it on the same number of nodes, takes that type's measured ratio instead (`ReferenceTable.transfers`): e.g. a
1-GPU trial run on every type plus a GPU-count sweep on one.

A query matching a measured configuration exactly returns the measurement. A workload with no measurement at all
gets the `fallback` booster, trained on absolute throughputs from the GPU specifications and configuration only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from itertools import compress, repeat
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from advisor.datasets import throughput_query_from_frame
from advisor.features import (
    THROUGHPUT_FEATURES,
    Anchors,
    FloatArray,
    ThroughputQuery,
    gpu_features,
    throughput_features,
)
from advisor.gpus import normalize_gpu_model
from advisor.models import _lgbm
from advisor.models._lgbm import BoostedEstimator
from advisor.models.anchors import (
    GpuAnchors,
    ReferenceTable,
    anchors_by_gpu,
    find_anchors,
    gather_anchors,
    gpu_anchor_set,
    nearest_gpu_estimate,
    search_anchors,
)
from advisor.models.artifact import Artifact

# The correction booster sees how the target differs from its anchor, not which GPU the target is: absolute GPU
# specifications let the trees memorise per-GPU offsets, which do not carry over to a GPU type they never saw.
_CORRECTION_COLUMNS = np.array([not n.startswith("gpu_") for n in THROUGHPUT_FEATURES])


SPEC_NAMES = ("log2_fp16_tflops", "log2_fp32_tflops", "log2_bandwidth_gb_s")
# Candidate weights (in GPU-type pairs) of the pooled slope in each workload's slope; `_choose_spec_scaling` picks one.
SHRINKAGES = (1.0, 4.0, 16.0, 64.0, 256.0, 1024.0)
DEFAULT_SHRINKAGE = 4.0
# Candidate per-workload weights of the spec-scaled estimate against the nearest-GPU one (`blend_estimates`).
WEIGHTS = (0.0, 0.5, 1.0)


def _log2_specs(names: Sequence[str]) -> FloatArray:
    """(rows, `SPEC_NAMES`) per GPU model name; NaN for an unknown model."""
    return gpu_features(names)[:, : len(SPEC_NAMES)]


def _known_specs(names: Sequence[str]) -> npt.NDArray[np.bool_]:
    return np.asarray(~np.isnan(_log2_specs(names)).any(axis=1), dtype=bool)


@dataclass(frozen=True)
class SpecScaling:
    """How a workload's speed follows the GPUs' data-sheet numbers, learned from its measurements on other GPU types.

    For each spec k of `SPEC_NAMES`, the log2 speed ratio of a workload on GPU types g and h at the same configuration
    is modelled as ``slopes[w, k] · (spec_k(g) − spec_k(h)) + residuals[w, g, k] − residuals[w, h, k]``. The
    slope is a least-squares fit through the origin over every pair of measured GPU types (one point per pair: the
    median log2 ratio over the configurations both measured), shrunk toward the slope pooled over all workloads
    with the weight `shrinkage` (in pairs). The residual is what a GPU type does beyond its data sheet for that
    workload — Sia's V100 platform runs NCF ~10× slower than any spec suggests — centred on the median GPU type, so
    an anchor measured there is corrected before it is scaled. The last row of `slopes` and `residuals` serves
    workloads never measured on two GPU types (pooled slope, no residual); the last residual column GPU types
    never measured.

    `weights[w]` is how far the cross-GPU estimate moves from the nearest-GPU baseline toward this scaling's
    estimate for workload w, in log2 (`blend_estimates`; 1 = this estimate alone, 0 = the baseline), chosen per
    workload by `_choose_spec_scaling`; the last entry serves workloads without a choice of their own.
    """

    workloads: list[str]
    gpu_models: list[str]
    slopes: FloatArray
    residuals: FloatArray
    shrinkage: float
    weights: FloatArray

    @cached_property
    def _workload_index(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.workloads)}

    @cached_property
    def _gpu_index(self) -> dict[str, int]:
        return {g: i for i, g in enumerate(self.gpu_models)}

    def workload_rows(self, workloads: Sequence[str]) -> npt.NDArray[np.int64]:
        index = self._workload_index
        return np.fromiter(map(index.get, workloads, repeat(len(self.workloads))), np.int64, len(workloads))

    def gpu_columns(self, gpu_models: Sequence[str]) -> npt.NDArray[np.int64]:
        index = self._gpu_index
        return np.fromiter(map(index.get, gpu_models, repeat(len(self.gpu_models))), np.int64, len(gpu_models))

    def to_json(self) -> dict[str, Any]:
        return {
            "workloads": self.workloads,
            "gpu_models": self.gpu_models,
            "slopes": self.slopes.tolist(),
            "residuals": self.residuals.tolist(),
            "shrinkage": self.shrinkage,
            "weights": self.weights.tolist(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SpecScaling:
        workloads = [str(w) for w in data["workloads"]]
        gpu_models = [str(g) for g in data["gpu_models"]]
        slopes = np.asarray(data["slopes"], dtype=np.float64).reshape(len(workloads) + 1, len(SPEC_NAMES))
        residuals = np.asarray(data["residuals"], dtype=np.float64).reshape(
            len(workloads) + 1, len(gpu_models) + 1, len(SPEC_NAMES)
        )
        # An artifact from before the per-workload weights used this scaling's estimate alone.
        weights = np.asarray(data.get("weights", np.ones(len(workloads) + 1)), dtype=np.float64)
        return cls(workloads, gpu_models, slopes, residuals, float(data["shrinkage"]), weights)


def fit_spec_scaling(table: ReferenceTable, shrinkage: float) -> SpecScaling:
    """`SpecScaling` of the table's measurements (GPU types with unknown specifications are left out).

    Without any pair of GPU types to learn from, the pooled slope is 1: the data-sheet ratio as it is.
    """
    measured = table.subset(_known_specs(table.gpu_models))
    gpu_models = sorted(set(measured.gpu_models))
    workloads = sorted(set(measured.workloads))
    if not workloads:
        no_residuals = np.zeros((1, len(gpu_models) + 1, len(SPEC_NAMES)))
        return SpecScaling([], gpu_models, np.ones((1, len(SPEC_NAMES))), no_residuals, shrinkage, np.ones(1))
    specs = _log2_specs(gpu_models)
    log_y = pd.Series(
        np.log2(measured.throughput),
        index=pd.MultiIndex.from_arrays(
            [measured.workloads, measured.gpu_count, measured.nodes, measured.batch_size, measured.gpu_models]
        ),
    ).unstack(-1)
    # One point per (workload, GPU pair): the median log2 speed ratio over the configurations both measured.
    pair_w: list[int] = []
    pair_g: list[int] = []
    pair_h: list[int] = []
    pair_ratio: list[float] = []
    w_index = {w: i for i, w in enumerate(workloads)}
    for g in range(len(gpu_models)):
        for h in range(g + 1, len(gpu_models)):
            ratios = (log_y[gpu_models[g]] - log_y[gpu_models[h]]).dropna().groupby(level=0).median()
            pair_w.extend(w_index[w] for w in ratios.index)
            pair_g.extend([g] * len(ratios))
            pair_h.extend([h] * len(ratios))
            pair_ratio.extend(ratios.to_numpy(np.float64))
    w_of, g_of, h_of = (np.asarray(a, dtype=np.int64) for a in (pair_w, pair_g, pair_h))
    ratio = np.asarray(pair_ratio, dtype=np.float64)
    spec_diff = specs[g_of] - specs[h_of]  # (pairs, specs)
    num = np.zeros((len(workloads), len(SPEC_NAMES)))
    den = np.zeros_like(num)
    np.add.at(num, w_of, spec_diff * ratio[:, None])
    np.add.at(den, w_of, spec_diff**2)
    total = den.sum(axis=0)
    pooled = np.where(total > 0, num.sum(axis=0) / np.where(total > 0, total, 1.0), 1.0)
    slopes = np.vstack([(num + shrinkage * pooled) / (den + shrinkage), pooled])
    residuals = np.zeros((len(workloads) + 1, len(gpu_models) + 1, len(SPEC_NAMES)))
    for w in range(len(workloads)):
        mine = w_of == w
        if not mine.any():
            continue
        design = np.zeros((int(mine.sum()), len(gpu_models)))
        design[np.arange(len(design)), g_of[mine]] = 1.0
        design[np.arange(len(design)), h_of[mine]] = -1.0
        beyond_specs = ratio[mine, None] - slopes[w] * spec_diff[mine]
        effect = np.linalg.lstsq(design, beyond_specs, rcond=None)[0]  # (GPU types, specs), minimum norm
        seen = np.unique(np.concatenate([g_of[mine], h_of[mine]]))
        residuals[w, seen] = effect[seen] - np.median(effect[seen], axis=0)
    return SpecScaling(workloads, gpu_models, slopes, residuals, shrinkage, np.ones(len(workloads) + 1))


def spec_scaled_estimate(query: ThroughputQuery, anchors: GpuAnchors, scaling: SpecScaling) -> FloatArray:
    """The cross-GPU estimate: every GPU type's anchor scaled to the query's GPU, then combined.

    Each anchor is scaled by the GPU-count ratio and, per spec, by the workload's learned slope times the log2 spec
    ratio, after moving the anchor's GPU-type residual to the query's; the median over the anchors is taken per
    spec, and the geometric mean over the specs. A spec unknown on either side scales by 1. NaN for rows without
    any anchor.
    """
    rows = scaling.workload_rows(query.workloads)
    # GPU-side terms per distinct GPU name, then gathered per row (the same numbers, fewer lookups).
    distinct = {g: i for i, g in enumerate(dict.fromkeys(query.gpu_models))}
    gpu = np.fromiter(map(distinct.__getitem__, query.gpu_models), np.int64, len(query))
    names = tuple(distinct)
    spec_diff = _log2_spec_diff(names, tuple(anchors.gpu_models))[:, gpu]
    target_residual = scaling.residuals[rows, scaling.gpu_columns(names)[gpu]]
    anchor_residual = scaling.residuals[rows[None, :], scaling.gpu_columns(anchors.gpu_models)[:, None]]
    counted = anchors.gpu_count > 0
    count_ratio = np.where(counted, query.gpu_count / np.where(counted, anchors.gpu_count, 1.0), 1.0)
    log_anchor = np.log2(anchors.throughput * count_ratio)
    estimates = log_anchor[..., None] + scaling.slopes[rows] * spec_diff + target_residual - anchor_residual
    result: FloatArray = np.exp2(_nan_median(estimates).mean(axis=1))
    return result


@lru_cache(maxsize=256)
def _log2_spec_diff(gpu_models: tuple[str, ...], anchor_gpu_models: tuple[str, ...]) -> FloatArray:
    """log2 spec ratios (anchor GPU models × GPU models × `SPEC_NAMES`; 0 where unknown on either side), read-only.

    Cached: a served model's batches compare the same few GPU models with its table's GPU models every time."""
    diff = np.nan_to_num(_log2_specs(gpu_models)[None] - _log2_specs(anchor_gpu_models)[:, None], nan=0.0)
    diff.flags.writeable = False
    return diff


def _nan_median(values: FloatArray) -> FloatArray:
    """Median over axis 0 ignoring NaN (NaN where all are, or the axis is empty), C-contiguous; `np.nanmedian` is
    slow on a short axis."""
    if len(values) == 0:
        return np.full(values.shape[1:], np.nan)
    lanes = np.ascontiguousarray(np.moveaxis(values, 0, -1)).reshape(-1, len(values))
    lanes.sort(axis=1)  # NaN last
    count = len(values) - np.isnan(lanes).sum(axis=1)
    index = np.arange(len(lanes))
    low = lanes[index, np.maximum(count - 1, 0) // 2]
    high = lanes[index, count // 2]
    result: FloatArray = np.where(count > 0, 0.5 * (low + high), np.nan).reshape(values.shape[1:])
    return result


def blend_estimates(spec_scaled: FloatArray, nearest: FloatArray, weights: FloatArray) -> FloatArray:
    """The nearest-GPU estimate moved toward the spec-scaled one by `weights` in log2 (0: the nearest-GPU estimate,
    1: the spec-scaled one); where one of the two is missing, the other."""
    log_spec, log_nearest = np.log2(spec_scaled), np.log2(nearest)
    blended = log_nearest + weights * (log_spec - log_nearest)
    either = np.where(np.isnan(log_spec), log_nearest, np.where(np.isnan(log_nearest), log_spec, blended))
    result: FloatArray = np.exp2(either)
    return result


def _choose_spec_scaling(table: ReferenceTable) -> tuple[SpecScaling, dict[str, Any]]:
    """`SpecScaling` of the table with the `SHRINKAGES` value and the per-workload `WEIGHTS` whose estimates are
    best on unseen GPU types, and the check's figures (`_check_summary`).

    Leave-one-GPU-type-out over the table's own measurements. The shrinkage is scored by the mean absolute log2
    error of `spec_scaled_estimate` over all held-out rows, pooled. Then, with that shrinkage, each workload's
    weight of the spec-scaled estimate against the nearest-GPU one (`blend_estimates`) by the mean over the
    held-out GPU types of the workload's mean absolute log2 error there (each type counts once: the question is an
    unseen GPU type); a tie goes to the smaller weight. Workloads never held out (measured on one GPU type) get the
    weight best by the same mean taken over all workloads' rows. With fewer than three GPU types of known
    specification there is nothing to check it on: `DEFAULT_SHRINKAGE`, and weight 0 for every workload (no
    evidence that the spec scaling beats plain FP32 scaling, so the baseline's estimate).
    """
    known = _known_specs(table.gpu_models)
    gpus = sorted({g for g, k in zip(table.gpu_models, known, strict=True) if k})
    if len(gpus) < 3:
        scaling = fit_spec_scaling(table, DEFAULT_SHRINKAGE)
        return replace(scaling, weights=np.zeros_like(scaling.weights)), {"held_out_gpu_types": 0}
    models = np.asarray(table.gpu_models, dtype=object)
    error_sum = np.zeros(len(SHRINKAGES))
    error_count = np.zeros(len(SHRINKAGES))
    folds = []
    for gpu in gpus:
        held = models == gpu
        train = table.subset(~held)
        query = table.subset(held).as_query()
        anchors = anchors_by_gpu(query, train)
        truth = np.log2(table.throughput[held])
        estimates = []
        for i, shrinkage in enumerate(SHRINKAGES):
            estimate = spec_scaled_estimate(query, anchors, fit_spec_scaling(train, shrinkage))
            ok = ~np.isnan(estimate)
            error_sum[i] += float(np.abs(np.log2(estimate[ok]) - truth[ok]).sum())
            error_count[i] += float(ok.sum())
            estimates.append(estimate)
        nearest = nearest_gpu_estimate(query, find_anchors(query, train)[0])
        folds.append((query.workloads, truth, nearest, estimates))
    best = int(np.argmin(error_sum))
    scaling = fit_spec_scaling(table, SHRINKAGES[best])
    # (fold, workload slot, weight) mean absolute log2 errors; the last slot is all rows of the fold.
    slots = len(scaling.workloads) + 1
    errors = np.full((len(folds), slots, len(WEIGHTS)), np.nan)
    for f, (workloads, truth, nearest, estimates) in enumerate(folds):
        row_slot = scaling.workload_rows(workloads)
        for j, weight in enumerate(WEIGHTS):
            error = np.abs(np.log2(blend_estimates(estimates[best], nearest, np.full(len(truth), weight))) - truth)
            ok = ~np.isnan(error)
            total = np.bincount(row_slot[ok], error[ok], minlength=slots)
            count = np.bincount(row_slot[ok], minlength=slots)
            total[-1], count[-1] = error[ok].sum(), ok.sum()
            errors[f, count > 0, j] = total[count > 0] / count[count > 0]
    scored = ~np.isnan(errors).all(axis=(0, 2))
    mean_error = np.nanmean(errors[:, scored], axis=0)  # (scored slots, weights)
    weights = np.full(slots, np.nan)
    weights[scored] = np.asarray(WEIGHTS)[np.argmin(mean_error, axis=1)]
    scaling = replace(scaling, weights=np.where(np.isnan(weights), weights[-1], weights))
    pooled = np.where(error_count > 0, error_sum / np.maximum(error_count, 1.0), np.nan)
    return scaling, _check_summary(gpus, folds, best=best, scaling=scaling, errors=errors, pooled_errors=pooled)


def _typical_errors(estimate: FloatArray, truth_log2: FloatArray) -> dict[str, float | None]:
    """Median absolute percentage error (a ratio) and mean absolute log2 error over the rows with an estimate (None
    without any)."""
    ok = ~np.isnan(estimate)
    if not ok.any():
        return {"median_ape": None, "mean_abs_log2_error": None}
    log_error = np.log2(estimate[ok]) - truth_log2[ok]
    return {
        "median_ape": float(np.median(np.abs(np.exp2(log_error) - 1.0))),
        "mean_abs_log2_error": float(np.mean(np.abs(log_error))),
    }


def _beats(ours: dict[str, float | None], theirs: dict[str, float | None]) -> bool:
    """Lower on both typical-error measures (as the cross-GPU goal asks)."""
    return all(
        (a := ours[m]) is not None and (b := theirs[m]) is not None and a < b
        for m in ("median_ape", "mean_abs_log2_error")
    )


def _check_summary(
    gpus: list[str],
    folds: list[tuple[Sequence[str], FloatArray, FloatArray, list[FloatArray]]],
    *,
    best: int,
    scaling: SpecScaling,
    errors: FloatArray,
    pooled_errors: FloatArray,
) -> dict[str, Any]:
    """The validation figures of `_choose_spec_scaling` (kept in the artifact and in `models evaluate` folds).

    Per held-out training GPU type: the spec-scaled estimate at the chosen shrinkage (weight 1) and the nearest-GPU
    one (weight 0), and the blend with the chosen per-workload weights — chosen on these same folds, so in-sample
    for the weights. Per workload and held-out type, the mean absolute log2 error of each weight of `WEIGHTS`, from
    which its weight was chosen."""
    per_type: dict[str, Any] = {}
    for gpu, (workloads, truth, nearest, estimates) in zip(gpus, folds, strict=True):
        weight = scaling.weights[scaling.workload_rows(workloads)]
        per_type[gpu] = {
            "rows": len(truth),
            "spec_scaled": _typical_errors(estimates[best], truth),
            "nearest_gpu": _typical_errors(nearest, truth),
            "blended_in_sample": _typical_errors(blend_estimates(estimates[best], nearest, weight), truth),
        }
    per_workload = {
        workload: {
            gpu: [None if np.isnan(e) else float(e) for e in errors[f, w]]
            for f, gpu in enumerate(gpus)
            if not np.isnan(errors[f, w]).all()
        }
        for w, workload in enumerate(scaling.workloads)
    }
    return {
        "held_out_gpu_types": len(gpus),
        "shrinkage": scaling.shrinkage,
        "mean_abs_log2_error_by_shrinkage": {
            str(shrinkage): float(e) if np.isfinite(e) else None
            for shrinkage, e in zip(SHRINKAGES, pooled_errors, strict=True)
        },
        "weights_grid": list(WEIGHTS),
        "per_gpu_type": per_type,
        "per_workload_mean_abs_log2_error": per_workload,
        "spec_scaled_beats_nearest_gpu_on_every_type": all(
            _beats(t["spec_scaled"], t["nearest_gpu"]) for t in per_type.values()
        ),
        "blend_beats_nearest_gpu_on_every_type": all(
            _beats(t["blended_in_sample"], t["nearest_gpu"]) for t in per_type.values()
        ),
    }


class NearestGpuThroughput:
    """The baseline as an estimator: remembers the training measurements, predicts `nearest_gpu_estimate`.

    A workload never measured gets the training median (the baseline has nothing better).
    """

    def fit(self, frame: pd.DataFrame) -> NearestGpuThroughput:
        self.table_ = ReferenceTable.from_frame(frame)
        self.median_ = float(np.median(self.table_.throughput))
        return self

    def predict_frame(self, frame: pd.DataFrame) -> FloatArray:
        query = throughput_query_from_frame(frame)
        anchors, _ = find_anchors(query, self.table_)
        estimate = nearest_gpu_estimate(query, anchors)
        return np.where(np.isnan(estimate), self.median_, estimate)


def _subset(query: ThroughputQuery, keep: npt.NDArray[np.bool_]) -> ThroughputQuery:
    if keep.all():
        return query
    return ThroughputQuery(
        workloads=list(compress(query.workloads, keep)),
        gpu_models=list(compress(query.gpu_models, keep)),
        gpu_count=query.gpu_count[keep],
        nodes=query.nodes[keep],
        batch_size=query.batch_size[keep],
    )


def _distinct_rows(query: ThroughputQuery) -> tuple[ThroughputQuery, npt.NDArray[np.int64] | None]:
    """The query's distinct rows (first occurrences, in order) and, for each row, the index of its distinct row
    (None when all rows are distinct).

    Numbers are compared bit for bit, so that a row and the distinct row standing for it are computed alike.
    """
    n = len(query)
    numbers = np.empty((n, 3), dtype=np.float64)
    numbers[:, 0], numbers[:, 1], numbers[:, 2] = query.gpu_count, query.nodes, query.batch_size
    keys = zip(query.workloads, query.gpu_models, numbers.view("V24").ravel().tolist(), strict=True)
    first: dict[tuple[Any, ...], int] = {}
    first_row = np.fromiter(map(first.setdefault, keys, range(n)), np.int64, n)
    if len(first) == n:
        return query, None
    is_first = first_row == np.arange(n)
    distinct_index = np.cumsum(is_first) - 1
    return _subset(query, is_first), distinct_index[first_row]


def _normalized(gpu_models: Sequence[str]) -> list[str]:
    """`normalize_gpu_model` of each name, each distinct name once."""
    names = {g: normalize_gpu_model(g) for g in set(gpu_models)}
    return list(map(names.__getitem__, gpu_models))


class MeanThroughput:
    """The mean baseline: the training mean throughput of the workload (all workloads' mean if unseen)."""

    def fit(self, frame: pd.DataFrame) -> MeanThroughput:
        self.by_workload_ = frame.groupby("workload")["throughput"].mean().to_dict()
        self.mean_ = float(frame["throughput"].mean())
        return self

    def predict_frame(self, frame: pd.DataFrame) -> FloatArray:
        return np.array([self.by_workload_.get(w, self.mean_) for w in frame["workload"]], dtype=np.float64)


@dataclass(kw_only=True, eq=False)
class ThroughputModel(BoostedEstimator):
    """Anchor + LightGBM correction (see module doc); sklearn conventions (fit returns self)."""

    kind = "throughput"

    num_boost_round: int = 150
    min_data_in_leaf: int = 10

    def _train(self, features: FloatArray, target: FloatArray, names: list[str]) -> Any:
        return self.train_booster(
            features,
            target,
            feature_names=names,
            objective="regression_l1",
        )

    def _fit_correction(self, frame: pd.DataFrame, table: ReferenceTable) -> Any:
        query = throughput_query_from_frame(frame)
        log_y = np.log2(frame["throughput"].to_numpy(np.float64))
        blocks, targets = [], []
        for exclude in ("gpu", "config"):
            anchors, _ = find_anchors(query, table, exclude=exclude)
            base = nearest_gpu_estimate(query, anchors)
            ok = base > 0
            blocks.append(throughput_features(query, anchors)[ok][:, _CORRECTION_COLUMNS])
            targets.append(log_y[ok] - np.log2(base[ok]))
        if sum(len(t) for t in targets) == 0:
            raise ValueError("no workload is measured in two configurations: nothing to learn a correction from")
        return self._train(
            np.vstack(blocks), np.concatenate(targets), np.asarray(THROUGHPUT_FEATURES)[_CORRECTION_COLUMNS].tolist()
        )

    def fit(self, frame: pd.DataFrame) -> ThroughputModel:
        """Train on a throughputs frame (`advisor.datasets.THROUGHPUTS`); rows with throughput ≤ 0 are dropped."""
        frame = frame[frame["throughput"] > 0].reset_index(drop=True)
        self.table_ = ReferenceTable.from_frame(frame)
        self.scaling_, self.check_ = _choose_spec_scaling(self.table_)
        self.booster_ = self._fit_correction(frame, self.table_)
        query = throughput_query_from_frame(frame)
        log_y = np.log2(frame["throughput"].to_numpy(np.float64))
        no_anchor = Anchors(np.full(len(query), np.nan), [""] * len(query), *(np.full((3, len(query)), np.nan)))
        self.fallback_ = self._train(throughput_features(query, no_anchor), log_y, list(THROUGHPUT_FEATURES))
        self.n_rows_ = len(frame)
        return self

    def predict_query(self, query: ThroughputQuery) -> FloatArray:
        """samples/s for each query row (the fast path; GPU names must be normalised, batch 0 = unknown).

        Each distinct row is estimated once: the scorer asks about the same workload on many nodes of a GPU type.
        """
        if len(query) == 0:
            return np.empty(0, dtype=np.float64)
        distinct, inverse = _distinct_rows(query)
        result = self._predict_distinct(distinct)
        return result if inverse is None else result[inverse]

    def _predict_distinct(self, query: ThroughputQuery) -> FloatArray:
        """`predict_query` on rows that are all distinct. One anchor search serves all three kinds of estimate: the
        per-GPU-type anchors of the cross-GPU estimate come from the same distances (`search_anchors`)."""
        table = self.table_
        found = search_anchors(query, table, exclude="none", by_gpu="other")
        has_anchor = found.picked >= 0
        result = np.empty(len(query), dtype=np.float64)
        exact = found.same_gpu & (found.cost == 0.0)
        result[exact] = table.throughput[found.picked[exact]]
        own = found.same_gpu & ~exact
        if own.any():
            rows, picked = _subset(query, own), found.picked[own]
            own_anchors = Anchors(
                table.throughput[picked],
                rows.gpu_models,
                table.gpu_count[picked],
                table.nodes[picked],
                table.batch_size[picked],
            )
            features = throughput_features(rows, own_anchors)[:, _CORRECTION_COLUMNS]
            # `nearest_gpu_estimate` with the anchor on the query's own GPU model: its FP32 ratio is exactly 1
            # (2 to the power x − x, or of 0 where x is unknown), so it is left out.
            counted = own_anchors.gpu_count > 0
            base = own_anchors.throughput * np.where(
                counted, rows.gpu_count / np.where(counted, own_anchors.gpu_count, 1.0), 1.0
            )
            result[own] = base * np.exp2(_lgbm.predict(self.booster_, features))
        cross = has_anchor & ~found.same_gpu
        if cross.any():
            rows = _subset(query, cross)
            anchors = gpu_anchor_set(table, found.gpu_picked[:, cross], found.gpu_cost[:, cross])
            result[cross] = blend_estimates(
                spec_scaled_estimate(rows, anchors, self.scaling_),
                nearest_gpu_estimate(rows, gather_anchors(table, found.picked[cross])),
                self.scaling_.weights[self.scaling_.workload_rows(rows.workloads)],
            )
        if not has_anchor.all():
            none = ~has_anchor
            features = throughput_features(_subset(query, none), gather_anchors(table, found.picked[none]))
            result[none] = np.exp2(_lgbm.predict(self.fallback_, features))
        transfers = table.transfers
        if transfers:
            for i in np.flatnonzero(~exact).tolist():
                key = (
                    query.workloads[i],
                    query.gpu_models[i],
                    float(query.gpu_count[i]),
                    float(query.nodes[i]),
                    float(query.batch_size[i]),
                )
                transferred = transfers.get(key)
                if transferred is not None:
                    result[i] = transferred
        return result

    def predict(
        self,
        workloads: Sequence[str],
        gpu_models: Sequence[str],
        gpu_count: Sequence[float],
        batch_size: Sequence[float],
        nodes: Sequence[float] | None = None,
    ) -> FloatArray:
        """samples/s for each (workload, GPU model in any spelling, GPU count, batch size[, nodes]) row."""
        n = len(workloads)
        query = ThroughputQuery(
            workloads=list(workloads),
            gpu_models=_normalized(gpu_models),
            gpu_count=np.asarray(gpu_count, dtype=np.float64),
            nodes=np.ones(n) if nodes is None else np.asarray(nodes, dtype=np.float64),
            batch_size=np.asarray(batch_size, dtype=np.float64),
        )
        return self.predict_query(query)

    def predict_frame(self, frame: pd.DataFrame) -> FloatArray:
        return self.predict_query(throughput_query_from_frame(frame))

    def to_artifact(self) -> Artifact:
        return Artifact(
            kind=self.kind,
            params=self.get_params(),
            state={
                "n_rows": self.n_rows_,
                "spec_scaling": self.scaling_.to_json(),
                "check": self.check_,
                "reference": self.table_.to_json(),
                "features": list(THROUGHPUT_FEATURES),
            },
            boosters={"correction": _lgbm.to_text(self.booster_), "fallback": _lgbm.to_text(self.fallback_)},
        )

    @classmethod
    def from_artifact(cls, artifact: Artifact) -> ThroughputModel:
        model = cls(**artifact.params)
        model.booster_ = _lgbm.from_text(artifact.boosters["correction"])
        model.fallback_ = _lgbm.from_text(artifact.boosters["fallback"])
        model.table_ = ReferenceTable.from_json(artifact.state["reference"])
        model.n_rows_ = int(artifact.state["n_rows"])
        model.scaling_ = SpecScaling.from_json(artifact.state["spec_scaling"])
        # Artifacts saved before the check's figures were kept have none.
        model.check_ = dict(artifact.state.get("check", {}))
        _ = model.table_.transfers  # built at load (a third of a second for Sia's table), not by the first request
        return model
