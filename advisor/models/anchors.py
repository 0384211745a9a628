"""Anchors of the throughput model: the measured configurations every throughput estimate starts from.

`ReferenceTable` holds a training set's measurements indexed for search; `find_anchors` picks, for each query row,
the same workload's closest measured configuration (same GPU count and nodes first, then the most similar GPU type,
then the closest batch size), `anchors_by_gpu` one such anchor per measured GPU type; `nearest_gpu_estimate` is the
nearest-GPU baseline built on them. Split out of `advisor.models.throughput`, which builds its estimates on these.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import compress, repeat
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from advisor.features import (
    Anchors,
    FloatArray,
    ThroughputQuery,
)
from advisor.gpus import gpu_spec, normalize_gpu_model

# find_anchors compares at most this many (query row, candidate) pairs at once, and pads workloads with up to
# _PAD_ROWS measurements into one candidate matrix.
_MAX_PAIRS = 1 << 18
_PAD_ROWS = 256


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
        return _Columns(
            _log2_or_zero(self.gpu_count),
            _log2_or_zero(self.batch_size),
            np.fromiter(map(self.gpu_codes.__getitem__, self.gpu_models), np.int64, len(self.gpu_models)),
        )

    @cached_property
    def gpu_log2_fp32(self) -> FloatArray:
        """log2 FP32 TFLOPS per GPU code (`gpu_names`)."""
        return _log2_fp32(self.gpu_names)

    @cached_property
    def gpu_names(self) -> list[str]:
        """The table's GPU model names in the order of their codes."""
        return sorted(self.gpu_codes, key=self.gpu_codes.__getitem__)

    @cached_property
    def padded_columns(self) -> tuple[_Columns, FloatArray]:
        """`columns` and `nodes` of the candidates' padded matrix (`_Candidates.padded`), gathered once."""
        padded, t = self.candidates.padded, self.columns
        columns = _Columns(t.log_count[padded], t.log_batch[padded], t.gpu_code[padded])
        return columns, self.nodes[padded]

    @cached_property
    def gpu_model_array(self) -> npt.NDArray[np.object_]:
        return np.asarray(self.gpu_models, dtype=object)

    @cached_property
    def transfers(self) -> dict[tuple[str, str, float, float, float], float]:
        """Estimates for configurations a workload was not measured in on a GPU type it *was* measured on:
        keyed (workload, GPU model, GPU count, nodes, batch size).

        The speed on this GPU type at a measured configuration c0 times the ratio c / c0 that another GPU type
        measured for the same workload — c0 on the same number of nodes, the configuration nearest c (log2 GPU count
        plus log2 batch size) that both types measured; the geometric median over the other types. So a trial run on
        one GPU of each type plus a GPU-count sweep on one of them gives every type's counts (Gavel, 2-8 GPUs on one
        node: 20 % / 34 % MAPE on P100 / V100, against 54 % / 59 % for the spec-scaled estimate; docs/models.md).
        Only within one node count: how a job scales over nodes differs between GPU types."""
        measured: dict[str, dict[str, dict[tuple[float, float, float], float]]] = {}
        for w, g, k, n, b, y in zip(
            self.workloads, self.gpu_models, self.gpu_count, self.nodes, self.batch_size, self.throughput, strict=True
        ):
            measured.setdefault(w, {}).setdefault(g, {})[(float(k), float(n), float(b))] = float(y)
        out: dict[tuple[str, str, float, float, float], float] = {}
        for workload, by_gpu in measured.items():
            if len(by_gpu) < 2:
                continue
            for gpu, own in by_gpu.items():
                by_nodes: dict[float, list[tuple[float, float, float]]] = defaultdict(list)
                for config in own:
                    by_nodes[config[1]].append(config)
                logs: dict[tuple[float, float, float], list[float]] = defaultdict(list)
                for other_gpu, other in by_gpu.items():
                    if other_gpu == gpu:
                        continue
                    # Per node count, the configurations both types measured: the candidate c0 of every c there.
                    bridges = {n: [c0 for c0 in configs if c0 in other] for n, configs in by_nodes.items()}
                    for config, y in other.items():
                        candidates = bridges.get(config[1])
                        if not candidates or config in own:
                            continue
                        c0 = min(candidates, key=lambda c: _config_distance(c, config))
                        logs[config].append(float(np.log2(own[c0] * y / other[c0])))
                for (k, n, b), values in logs.items():
                    out[(workload, gpu, k, n, b)] = float(np.exp2(np.median(values)))
        return out

    @cached_property
    def candidates(self) -> _Candidates:
        return _candidates(self.rows_by_workload())

    def rows_by_workload(self) -> dict[str, npt.NDArray[np.int64]]:
        index: dict[str, list[int]] = defaultdict(list)
        for i, w in enumerate(self.workloads):
            index[w].append(i)
        return {w: np.asarray(rows, dtype=np.int64) for w, rows in index.items()}

    def subset(self, keep: npt.NDArray[np.bool_]) -> ReferenceTable:
        """The rows where `keep` is true."""
        return ReferenceTable(
            workloads=list(compress(self.workloads, keep)),
            gpu_models=list(compress(self.gpu_models, keep)),
            gpu_count=self.gpu_count[keep],
            nodes=self.nodes[keep],
            batch_size=self.batch_size[keep],
            throughput=self.throughput[keep],
        )

    def as_query(self) -> ThroughputQuery:
        """The table's configurations as a query (for checks that predict measured rows)."""
        return ThroughputQuery(self.workloads, self.gpu_models, self.gpu_count, self.nodes, self.batch_size)


def _config_distance(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    """|Δ log2 GPU count| + |Δ log2 batch size| between two (count, nodes, batch) configurations (0 = unknown)."""
    return abs(math.log2(max(a[0], 1.0)) - math.log2(max(b[0], 1.0))) + abs(
        math.log2(max(a[2], 1.0)) - math.log2(max(b[2], 1.0))
    )


def _log2_fp32(names: Sequence[str]) -> FloatArray:
    """log2 FP32 TFLOPS per name (NaN for an unknown GPU model); each distinct name is looked up once."""
    distinct = {n: gpu_spec(n).fp32_tflops for n in set(names)}
    result: FloatArray = np.log2(np.fromiter(map(distinct.__getitem__, names), np.float64, len(names)))
    return result


def _log2_or_zero(values: FloatArray) -> FloatArray:
    return np.where(values > 0, np.log2(np.where(values > 0, values, 1.0)), 0.0)


@dataclass(frozen=True)
class _Columns:
    """What `find_anchors` compares, precomputed per side: log2 GPU count and batch, and GPU codes (-1: a GPU model
    the table has never measured)."""

    log_count: FloatArray
    log_batch: FloatArray
    gpu_code: npt.NDArray[np.int64]


@dataclass(frozen=True)
class _QueryColumns(_Columns):
    """The query side also has its nodes, an index into its distinct GPU models (`gpu`) and, per distinct GPU model
    and table GPU code, the distance term 3·|Δlog2 FP32 TFLOPS| (`gpu_cost`; 0 on the same GPU model, 12 where
    either FP32 is unknown)."""

    nodes: FloatArray
    gpu: npt.NDArray[np.int64]
    gpu_cost: FloatArray


def _query_columns(query: ThroughputQuery, table: ReferenceTable) -> _QueryColumns:
    """The query side of `find_anchors`' distances; GPU specs are looked up once per distinct GPU model."""
    distinct = {g: i for i, g in enumerate(dict.fromkeys(query.gpu_models))}
    gpu = np.fromiter(map(distinct.__getitem__, query.gpu_models), np.int64, len(query))
    names = list(distinct)
    codes = np.fromiter(map(table.gpu_codes.get, names, repeat(-1)), np.int64, len(names))
    gpu_dist = np.abs(_log2_fp32(names)[:, None] - table.gpu_log2_fp32[None, :])
    gpu_dist[np.isnan(gpu_dist)] = 4.0
    gpu_dist[codes[:, None] == np.arange(len(table.gpu_codes))] = 0.0
    return _QueryColumns(
        _log2_or_zero(query.gpu_count),
        _log2_or_zero(query.batch_size),
        codes[gpu],
        query.nodes,
        gpu,
        3.0 * gpu_dist,
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
    training rows imitate a query about an unseen GPU or configuration. Rows without any candidate get NaN anchors
    (distance inf). Ties go to the candidate first in the table's order.
    """
    found = search_anchors(query, table, exclude=exclude, by_gpu="none")
    return gather_anchors(table, found.picked), found.cost


@dataclass(frozen=True)
class GpuAnchors:
    """For each GPU model of a table, each query row's closest measurement on it (`anchors_by_gpu`).

    Arrays are GPU models × query rows; NaN throughput (inf cost) where the workload has no measurement there.
    """

    gpu_models: list[str]
    throughput: FloatArray
    gpu_count: FloatArray
    cost: FloatArray


def anchors_by_gpu(query: ThroughputQuery, table: ReferenceTable) -> GpuAnchors:
    """`find_anchors` once per GPU model of the table (in one pass over the candidates)."""
    found = search_anchors(query, table, exclude="none", by_gpu="all")
    return gpu_anchor_set(table, found.gpu_picked, found.gpu_cost)


def gpu_anchor_set(table: ReferenceTable, picked: npt.NDArray[np.int64], cost: FloatArray) -> GpuAnchors:
    found = picked >= 0
    rows = np.where(found, picked, 0)
    return GpuAnchors(
        table.gpu_names,
        np.where(found, table.throughput[rows], np.nan),
        np.where(found, table.gpu_count[rows], np.nan),
        cost,
    )


@dataclass(frozen=True)
class _Found:
    """What `search_anchors` found per query row: the closest table row (-1: none), its distance (inf: none), whether
    it is on the query's own GPU type, and (GPU codes × rows, only for the rows asked for) the closest per GPU type."""

    picked: npt.NDArray[np.int64]
    cost: FloatArray
    same_gpu: npt.NDArray[np.bool_]
    gpu_picked: npt.NDArray[np.int64]
    gpu_cost: FloatArray


def search_anchors(query: ThroughputQuery, table: ReferenceTable, *, exclude: str, by_gpu: str) -> _Found:
    """The closest table row per query row; also the closest per GPU type of the table for every row with an
    anchor (`by_gpu="all"`), for those whose closest is on another GPU type (``"other"``, what the cross-GPU
    estimate needs, from the same distances) or for none (``"none"``)."""
    n = len(query)
    slots = len(table.gpu_codes) if by_gpu != "none" else 0
    found = _Found(
        np.full(n, -1, dtype=np.int64),
        np.full(n, np.inf),
        np.zeros(n, dtype=bool),
        np.full((slots, n), -1, dtype=np.int64),
        np.full((slots, n), np.inf),
    )
    q_all = _query_columns(query, table)
    candidates = table.candidates
    slot = np.fromiter(map(candidates.padded_row.get, query.workloads, repeat(-1)), np.int64, n)
    small = np.flatnonzero(slot >= 0)
    common: dict[str, Any] = {
        "query": q_all,
        "exclude": exclude,
        "by_gpu": by_gpu,
        "found": found,
    }
    padded, padded_nodes = table.padded_columns
    step = max(1, _MAX_PAIRS // candidates.padded.shape[1])
    for start in range(0, len(small), step):
        q = small[start : start + step]
        at = slot[q]
        _closest(
            q,
            candidates.padded[at],
            _Columns(padded.log_count[at], padded.log_batch[at], padded.gpu_code[at]),
            padded_nodes[at],
            ~candidates.padded_valid[at],
            **common,
        )
    if candidates.large:
        groups: dict[str, list[int]] = defaultdict(list)
        for i, w in enumerate(query.workloads):
            if w in candidates.large:
                groups[w].append(i)
        t = table.columns
        for workload, members in groups.items():
            rows = candidates.large[workload][None, :]
            columns = _Columns(t.log_count[rows], t.log_batch[rows], t.gpu_code[rows])
            step = max(1, _MAX_PAIRS // rows.shape[1])
            for start in range(0, len(members), step):
                q = np.asarray(members[start : start + step], dtype=np.int64)
                _closest(q, rows, columns, table.nodes[rows], None, **common)
    return found


def gather_anchors(table: ReferenceTable, picked: npt.NDArray[np.int64]) -> Anchors:
    """The table rows `picked` (-1: none, NaN anchor) as anchors."""
    n = len(picked)
    found = picked >= 0
    rows = picked[found]

    def gathered(values: FloatArray) -> FloatArray:
        out = np.full(n, np.nan)
        out[found] = values[rows]
        return out

    gpu_names = np.full(n, "", dtype=object)
    gpu_names[found] = table.gpu_model_array[rows]
    return Anchors(
        gathered(table.throughput),
        gpu_names.tolist(),
        gathered(table.gpu_count),
        gathered(table.nodes),
        gathered(table.batch_size),
    )


def _closest(
    q: npt.NDArray[np.int64],
    rows: npt.NDArray[np.int64],
    candidate: _Columns,
    candidate_nodes: FloatArray,
    invalid: npt.NDArray[np.bool_] | None,
    *,
    query: _QueryColumns,
    exclude: str,
    by_gpu: str,
    found: _Found,
) -> None:
    """Pick, for query rows `q`, the cheapest of their candidate table `rows` (one row of candidates per query row,
    or one shared row; `candidate` holds their columns, `invalid` marks padding), and per GPU code as `search_anchors`'s
    `by_gpu` asks; writes `found` where a candidate exists."""
    cost = 10.0 * np.abs(query.log_count[q, None] - candidate.log_count)
    cost += 10.0 * np.abs(query.nodes[q, None] - candidate_nodes)
    cost += query.gpu_cost[query.gpu[q, None], candidate.gpu_code]
    cost += np.abs(query.log_batch[q, None] - candidate.log_batch)
    if invalid is not None:
        cost[invalid] = np.inf
    if exclude in ("gpu", "config"):
        same_gpu = query.gpu_code[q, None] == candidate.gpu_code
        cost[same_gpu if exclude == "gpu" else same_gpu & (cost == 0.0)] = np.inf
    index = np.arange(len(q))
    shared = 0 if len(rows) == 1 else index
    best = np.argmin(cost, axis=1)
    best_cost = cost[index, best]
    ok = np.isfinite(best_cost)
    found.picked[q[ok]] = rows[shared, best][ok]
    found.cost[q[ok]] = best_cost[ok]
    own = query.gpu_code[q] == candidate.gpu_code[shared, best]
    found.same_gpu[q[ok]] = own[ok]
    if by_gpu == "none":
        return
    wanted = ok if by_gpu == "all" else ok & ~own
    codes = candidate.gpu_code
    if not wanted.any():
        return
    if not wanted.all():
        q, cost, index = q[wanted], cost[wanted], np.arange(int(wanted.sum()))
        if len(rows) > 1:
            rows, codes, shared = rows[wanted], codes[wanted], index
    gpu_codes = np.arange(found.gpu_picked.shape[0])[:, None, None]
    slot_cost = np.where(codes == gpu_codes, cost, np.inf)  # GPU codes × rows × candidates
    best = np.argmin(slot_cost, axis=2)
    best_cost = slot_cost[gpu_codes[..., 0], index, best]
    ok = np.isfinite(best_cost)
    found.gpu_picked[:, q] = np.where(ok, rows[shared, best], -1)
    found.gpu_cost[:, q] = best_cost


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


# The cross-GPU estimate scales by these data-sheet numbers (the first three `advisor.features.GPU_FEATURES`). None
# of them predicts measured speed-ups across GPU types on its own, and picking one on a few GPU types is noise
# (choosing the set leave-one-GPU-type-out was worse on Sia, docs/models.md), so the estimate is the geometric mean
# of one estimate per spec.
