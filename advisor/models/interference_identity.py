"""The identity parts of the interference model (`advisor.models.interference`): per-workload offsets
(sensitivity and aggressiveness, backfitted and shrunk) and the neighbour correction of pairs whose both workloads
were measured on a GPU model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from advisor.features import FloatArray

NEIGHBOURS = 5
BACKFIT_ROUNDS = 4


def _gpu_key(workload: str, gpu: str) -> str:
    return f"{workload}@{gpu}"


@dataclass(frozen=True)
class Offsets:
    """Shrunk sensitivity (as `self`) and aggressiveness (as `other`) of measured workloads, overall (keyed by
    workload name) and per GPU model (keyed ``workload@gpu``)."""

    sensitivity: dict[str, float]
    aggressiveness: dict[str, float]

    def of(
        self, this: Sequence[str], other: Sequence[str], gpus: Sequence[str], *, sides: SideCodes | None = None
    ) -> FloatArray:
        """Each row's offset: this side's sensitivity plus the other side's aggressiveness (0 for unknown names);
        `sides`, when given, is `SideCodes.of(this, other, gpus)` computed once for many calls."""
        sides = sides if sides is not None else SideCodes.of(this, other, gpus)
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
class SideCodes:
    """Rows (this, other, GPU model) as indices of their distinct (workload, GPU model) sides: a batch repeats a few
    workloads many times, so each distinct side is looked up once."""

    distinct: list[tuple[str, str]]
    this: npt.NDArray[np.intp]
    other: npt.NDArray[np.intp]

    @classmethod
    def of(cls, this: Sequence[str], other: Sequence[str], gpus: Sequence[str]) -> SideCodes:
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
        self, this: Sequence[str], other: Sequence[str], gpus: Sequence[str], *, sides: SideCodes | None = None
    ) -> FloatArray:
        """Each row's correction (0 where the table has none); names are looked up once per distinct side (`sides`,
        when given, is `SideCodes.of(this, other, gpus)` computed once for many calls)."""
        sides = sides if sides is not None else SideCodes.of(this, other, gpus)
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
