"""Throughput: samples/s of a workload on a GPU model × GPU count × nodes × batch size, across GPU types.

A tree model cannot extrapolate to a GPU faster than any it was trained on, so the estimate starts from a
measurement — the *anchor*: the same workload's closest measured configuration, preferring the same GPU count and
nodes on the most similar GPU type (`find_anchors`). The nearest-GPU baseline scales the anchor by the FP32 ratio of
the two GPUs and the GPU-count ratio; the LightGBM model learns the log2 correction to that baseline from the GPUs'
specification ratios and the configuration differences. It is trained on each measured row twice: anchored on another
GPU type (what an unseen GPU looks like) and anchored on another configuration of any GPU type. How much of that
correction to apply is itself checked leave-one-GPU-type-out on the training data (`_correction_weight`): with only
a few GPU types to learn from, a correction that does not carry over to an unseen type is shrunk, down to zero.

A query matching a measured configuration exactly returns the measurement. A workload with no measurement at all
gets the `fallback` booster, trained on absolute throughputs from the GPU specifications and configuration only.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from advisor.datasets import throughput_query_from_frame
from advisor.features import THROUGHPUT_FEATURES, Anchors, FloatArray, ThroughputQuery, throughput_features
from advisor.gpus import gpu_spec, normalize_gpu_model
from advisor.models import _lgbm
from advisor.models._lgbm import BoostedEstimator
from advisor.models.artifact import Artifact

# find_anchors compares at most this many (query row, candidate) pairs at once, and pads workloads with up to
# _PAD_ROWS measurements into one candidate matrix.
_MAX_PAIRS = 1 << 18
_PAD_ROWS = 256
CORRECTION_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
# The correction booster sees how the target differs from its anchor, not which GPU the target is: absolute GPU
# specifications let the trees memorise per-GPU offsets, which do not carry over to a GPU type they never saw.
_CORRECTION_COLUMNS = np.array([not n.startswith("gpu_") for n in THROUGHPUT_FEATURES])


@dataclass(frozen=True)
class ReferenceTable:
    """Measured throughputs the anchors are drawn from (mean over duplicate configurations)."""

    workloads: list[str]
    gpu_models: list[str]
    gpu_count: FloatArray
    nodes: FloatArray
    batch_size: FloatArray
    throughput: FloatArray

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> ReferenceTable:
        table = frame.assign(gpu_model=[normalize_gpu_model(g) for g in frame["gpu_model"]])
        table = table[table["throughput"] > 0]
        grouped = (
            table.assign(batch_size=table["batch_size"].fillna(0.0))
            .groupby(["workload", "gpu_model", "gpu_count", "nodes", "batch_size"], as_index=False, sort=True)[
                "throughput"
            ]
            .mean()
        )
        return cls(
            workloads=grouped["workload"].astype(str).tolist(),
            gpu_models=grouped["gpu_model"].astype(str).tolist(),
            gpu_count=grouped["gpu_count"].to_numpy(np.float64),
            nodes=grouped["nodes"].to_numpy(np.float64),
            batch_size=grouped["batch_size"].to_numpy(np.float64),
            throughput=grouped["throughput"].to_numpy(np.float64),
        )

    def to_json(self) -> dict[str, list[Any]]:
        return {
            "workloads": self.workloads,
            "gpu_models": self.gpu_models,
            "gpu_count": self.gpu_count.tolist(),
            "nodes": self.nodes.tolist(),
            "batch_size": self.batch_size.tolist(),
            "throughput": self.throughput.tolist(),
        }

    @classmethod
    def from_json(cls, data: dict[str, list[Any]]) -> ReferenceTable:
        return cls(
            workloads=[str(w) for w in data["workloads"]],
            gpu_models=[str(g) for g in data["gpu_models"]],
            gpu_count=np.asarray(data["gpu_count"], dtype=np.float64),
            nodes=np.asarray(data["nodes"], dtype=np.float64),
            batch_size=np.asarray(data["batch_size"], dtype=np.float64),
            throughput=np.asarray(data["throughput"], dtype=np.float64),
        )

    @cached_property
    def gpu_codes(self) -> dict[str, int]:
        """A number per GPU model name in the table (for fast comparisons in `find_anchors`)."""
        return {g: i for i, g in enumerate(sorted(set(self.gpu_models)))}

    @cached_property
    def columns(self) -> _Columns:
        return _columns(self.gpu_models, self.gpu_count, self.batch_size, self.gpu_codes)

    @cached_property
    def gpu_model_array(self) -> npt.NDArray[np.object_]:
        return np.asarray(self.gpu_models, dtype=object)

    @cached_property
    def candidates(self) -> _Candidates:
        return _candidates(self.rows_by_workload())

    def rows_by_workload(self) -> dict[str, npt.NDArray[np.int64]]:
        index: dict[str, list[int]] = defaultdict(list)
        for i, w in enumerate(self.workloads):
            index[w].append(i)
        return {w: np.asarray(rows, dtype=np.int64) for w, rows in index.items()}


def _log2_fp32(names: Sequence[str]) -> FloatArray:
    """log2 FP32 TFLOPS per name (NaN for an unknown GPU model); each distinct name is looked up once."""
    distinct = {n: gpu_spec(n).fp32_tflops for n in set(names)}
    result: FloatArray = np.log2(np.fromiter(map(distinct.__getitem__, names), np.float64, len(names)))
    return result


def _log2_or_zero(values: FloatArray) -> FloatArray:
    return np.where(values > 0, np.log2(np.where(values > 0, values, 1.0)), 0.0)


@dataclass(frozen=True)
class _Columns:
    """What `find_anchors` compares, precomputed per side: log2 GPU count, FP32 TFLOPS and batch, and GPU codes."""

    log_count: FloatArray
    log_fp32: FloatArray
    log_batch: FloatArray
    gpu_code: npt.NDArray[np.int64]


def _columns(
    gpu_models: Sequence[str], gpu_count: FloatArray, batch_size: FloatArray, codes: dict[str, int]
) -> _Columns:
    return _Columns(
        log_count=_log2_or_zero(gpu_count),
        log_fp32=_log2_fp32(gpu_models),
        log_batch=_log2_or_zero(batch_size),
        # -1: a GPU model the table has never measured.
        gpu_code=np.fromiter(map(codes.get, gpu_models, repeat(-1)), np.int64, len(gpu_models)),
    )


@dataclass(frozen=True)
class _Candidates:
    """Each workload's table rows for `find_anchors`.

    Workloads with at most `_PAD_ROWS` measurements are padded into one matrix (`padded`, `padded_valid`; a row of
    it per workload in `padded_row`), so a batch of queries about many small workloads is compared in a few numpy
    operations; larger ones keep their own row list (`large`).
    """

    padded_row: dict[str, int]
    padded: npt.NDArray[np.int64]
    padded_valid: npt.NDArray[np.bool_]
    large: dict[str, npt.NDArray[np.int64]]


def _candidates(by_workload: dict[str, npt.NDArray[np.int64]]) -> _Candidates:
    small = {w: rows for w, rows in by_workload.items() if len(rows) <= _PAD_ROWS}
    width = max((len(rows) for rows in small.values()), default=1)
    padded = np.zeros((len(small), width), dtype=np.int64)
    valid = np.zeros((len(small), width), dtype=bool)
    for i, rows in enumerate(small.values()):
        padded[i, : len(rows)] = rows
        valid[i, : len(rows)] = True
    large = {w: rows for w, rows in by_workload.items() if len(rows) > _PAD_ROWS}
    return _Candidates({w: i for i, w in enumerate(small)}, padded, valid, large)


def find_anchors(query: ThroughputQuery, table: ReferenceTable, *, exclude: str = "none") -> tuple[Anchors, FloatArray]:
    """For each query row the closest measured configuration of the same workload, and its distance (0 = exact).

    Distance = 10·|Δlog2 GPUs| + 10·|Δnodes| + 3·|Δlog2 FP32 TFLOPS| + |Δlog2 batch|. `exclude` leaves out
    measurements of the query's own GPU type (``"gpu"``) or its own exact configuration (``"config"``), which is how
    training rows imitate a query about an unseen GPU or configuration. Rows without any candidate get NaN anchors.
    Ties go to the candidate first in the table's order.
    """
    n = len(query)
    picked = np.full(n, -1, dtype=np.int64)
    out_cost = np.full(n, np.inf)
    q_all = _columns(query.gpu_models, query.gpu_count, query.batch_size, table.gpu_codes)
    candidates = table.candidates
    slot = np.fromiter(map(candidates.padded_row.get, query.workloads, repeat(-1)), np.int64, n)
    small = np.flatnonzero(slot >= 0)
    common: dict[str, Any] = {
        "query": q_all,
        "query_nodes": query.nodes,
        "table": table,
        "exclude": exclude,
        "picked": picked,
        "out_cost": out_cost,
    }
    step = max(1, _MAX_PAIRS // candidates.padded.shape[1])
    for start in range(0, len(small), step):
        q = small[start : start + step]
        rows = candidates.padded[slot[q]]
        _closest(q, rows, candidates.padded_valid[slot[q]], **common)
    if candidates.large:
        groups: dict[str, list[int]] = defaultdict(list)
        for i, w in enumerate(query.workloads):
            if w in candidates.large:
                groups[w].append(i)
        for workload, members in groups.items():
            rows = candidates.large[workload][None, :]
            step = max(1, _MAX_PAIRS // rows.shape[1])
            for start in range(0, len(members), step):
                q = np.asarray(members[start : start + step], dtype=np.int64)
                _closest(q, rows, np.ones_like(rows, dtype=bool), **common)
    found = picked >= 0
    rows = picked[found]

    def gathered(values: FloatArray) -> FloatArray:
        out = np.full(n, np.nan)
        out[found] = values[rows]
        return out

    gpu_names = np.full(n, "", dtype=object)
    gpu_names[found] = table.gpu_model_array[rows]
    anchors = Anchors(
        gathered(table.throughput),
        gpu_names.tolist(),
        gathered(table.gpu_count),
        gathered(table.nodes),
        gathered(table.batch_size),
    )
    return anchors, out_cost


def _closest(
    q: npt.NDArray[np.int64],
    rows: npt.NDArray[np.int64],
    valid: npt.NDArray[np.bool_],
    *,
    query: _Columns,
    query_nodes: FloatArray,
    table: ReferenceTable,
    exclude: str,
    picked: npt.NDArray[np.int64],
    out_cost: FloatArray,
) -> None:
    """Pick, for query rows `q`, the cheapest of their candidate table `rows` (one row of candidates per query row,
    or one shared row); writes `picked` and `out_cost` where a candidate exists."""
    t = table.columns
    gpu_dist = np.abs(query.log_fp32[q, None] - t.log_fp32[rows])
    gpu_dist[np.isnan(gpu_dist)] = 4.0
    same_gpu = query.gpu_code[q, None] == t.gpu_code[rows]
    gpu_dist[same_gpu] = 0.0
    cost = 10.0 * np.abs(query.log_count[q, None] - t.log_count[rows])
    cost += 10.0 * np.abs(query_nodes[q, None] - table.nodes[rows])
    cost += 3.0 * gpu_dist
    cost += np.abs(query.log_batch[q, None] - t.log_batch[rows])
    cost[~np.broadcast_to(valid, cost.shape)] = np.inf
    if exclude == "gpu":
        cost[same_gpu] = np.inf
    elif exclude == "config":
        cost[same_gpu & (cost == 0.0)] = np.inf
    best = np.argmin(cost, axis=1)
    index = np.arange(len(q))
    best_cost = cost[index, best]
    found = np.isfinite(best_cost)
    picked[q[found]] = np.broadcast_to(rows, cost.shape)[index, best][found]
    out_cost[q[found]] = best_cost[found]


def nearest_gpu_estimate(query: ThroughputQuery, anchors: Anchors) -> FloatArray:
    """The nearest-GPU scaling baseline: anchor throughput × FP32 ratio × GPU-count ratio (NaN without anchor).

    An unknown GPU model on either side leaves the FP32 ratio at 1.
    """
    fp32_ratio = np.exp2(np.nan_to_num(_log2_fp32(query.gpu_models) - _log2_fp32(anchors.gpu_models), nan=0.0))
    count_ratio = np.where(
        anchors.gpu_count > 0, query.gpu_count / np.where(anchors.gpu_count > 0, anchors.gpu_count, 1.0), 1.0
    )
    result: FloatArray = anchors.throughput * fp32_ratio * count_ratio
    return result


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

    def _fit_correction(self, frame: pd.DataFrame) -> tuple[Any, ReferenceTable]:
        table = ReferenceTable.from_frame(frame)
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
        booster = self._train(
            np.vstack(blocks), np.concatenate(targets), np.asarray(THROUGHPUT_FEATURES)[_CORRECTION_COLUMNS].tolist()
        )
        return booster, table

    def _correction_weight(self, frame: pd.DataFrame) -> float:
        """How much of the learned correction carries over to a GPU type the model has not seen.

        Leave-one-GPU-type-out inside the training data: the correction is refitted without each GPU type and applied
        with weights 0, ¼, …, 1 to that type's rows. The weight whose worst held-out GPU type loses least against the
        unchanged nearest-GPU estimate (mean absolute log2 error) wins, so a correction that hurt any GPU type in the
        check is shrunk, down to 0. With fewer than three GPU types there is nothing to check it on and the full
        correction is used.
        """
        gpus = np.array([normalize_gpu_model(g) for g in frame["gpu_model"]])
        if len(set(gpus)) < 3:
            return 1.0
        worst_gain = np.full(len(CORRECTION_WEIGHTS), -np.inf)
        for gpu in sorted(set(gpus)):
            held = frame[gpus == gpu].reset_index(drop=True)
            booster, table = self._fit_correction(frame[gpus != gpu].reset_index(drop=True))
            query = throughput_query_from_frame(held)
            anchors, _ = find_anchors(query, table)
            base = nearest_gpu_estimate(query, anchors)
            ok = base > 0
            if not ok.any():
                continue
            correction = _lgbm.predict(booster, throughput_features(query, anchors)[ok][:, _CORRECTION_COLUMNS])
            log_error = np.log2(held["throughput"].to_numpy(np.float64)[ok]) - np.log2(base[ok])
            unchanged = float(np.mean(np.abs(log_error)))
            for i, weight in enumerate(CORRECTION_WEIGHTS):
                gain = float(np.mean(np.abs(log_error - weight * correction))) - unchanged
                worst_gain[i] = max(worst_gain[i], gain)
        if not np.isfinite(worst_gain).all():
            return 1.0
        return float(CORRECTION_WEIGHTS[int(np.argmin(worst_gain))])

    def fit(self, frame: pd.DataFrame) -> ThroughputModel:
        """Train on a throughputs frame (`advisor.datasets.THROUGHPUTS`); rows with throughput ≤ 0 are dropped."""
        frame = frame[frame["throughput"] > 0].reset_index(drop=True)
        self.correction_weight_ = self._correction_weight(frame)
        self.booster_, self.table_ = self._fit_correction(frame)
        query = throughput_query_from_frame(frame)
        log_y = np.log2(frame["throughput"].to_numpy(np.float64))
        no_anchor = Anchors(np.full(len(query), np.nan), [""] * len(query), *(np.full((3, len(query)), np.nan)))
        self.fallback_ = self._train(throughput_features(query, no_anchor), log_y, list(THROUGHPUT_FEATURES))
        self.n_rows_ = len(frame)
        return self

    def predict_query(self, query: ThroughputQuery) -> FloatArray:
        """samples/s for each query row (the fast path; GPU names must be normalised, batch 0 = unknown)."""
        if len(query) == 0:
            return np.empty(0, dtype=np.float64)
        anchors, cost = find_anchors(query, self.table_)
        features = throughput_features(query, anchors)
        base = nearest_gpu_estimate(query, anchors)
        has_anchor = base > 0
        result = np.empty(len(query), dtype=np.float64)
        if has_anchor.any():
            correction = _lgbm.predict(self.booster_, features[has_anchor][:, _CORRECTION_COLUMNS])
            # The weight is checked across GPU types only; an anchor on the same GPU type gets the whole correction.
            same_gpu = np.fromiter(map(operator.eq, query.gpu_models, anchors.gpu_models), bool, len(query))
            weight = np.where(same_gpu[has_anchor], 1.0, self.correction_weight_)
            result[has_anchor] = base[has_anchor] * np.exp2(weight * correction)
        if (~has_anchor).any():
            result[~has_anchor] = np.exp2(_lgbm.predict(self.fallback_, features[~has_anchor]))
        exact = cost == 0.0
        result[exact] = anchors.throughput[exact]
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
            gpu_models=[normalize_gpu_model(g) for g in gpu_models],
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
                "correction_weight": self.correction_weight_,
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
        model.correction_weight_ = float(artifact.state["correction_weight"])
        return model
