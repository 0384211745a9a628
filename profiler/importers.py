"""CSV interchange of docs/design.md §6: colocations and throughputs files → store records.

The formats' columns (required, optional, ratios) are `profiler.csv_formats`, the same the models read; the file is
read by `profiler.csv_table`, the one reading path of every CSV reader.

Parsing is pure and strict: a missing required column or an unreadable value is one `InputDataError` that
names the file, the column and the row, so `profile import` can tell the user exactly what to fix.
"""

from __future__ import annotations

from enum import StrEnum

from profiler.csv_formats import (
    COLOCATIONS,
    MAX_BYTES,
    MAX_COUNT,
    SHARING_MODES,
    THROUGHPUTS,
    CsvFormat,
    InputDataError,
)
from profiler.csv_table import CsvTable, parse_flag, parse_number
from profiler.records import ColocationRecord, ProfileRecord


class ImportKind(StrEnum):
    COLOCATIONS = "colocations"
    THROUGHPUTS = "throughputs"


class _Row:
    """Typed access to one row of a table (`profiler.csv_table`'s rules); every error names the row and the column."""

    def __init__(self, table: CsvTable, index: int, ratios: frozenset[str]) -> None:
        self.table = table
        self.index = index
        self.number = table.lines[index]
        self.ratios = ratios
        self.cells = dict(zip(table.columns, table.rows[index], strict=True))

    def text(self, column: str) -> str:
        value = self.cells.get(column, "")
        if not value:
            raise self.table.error(self.index, column, "must not be empty")
        return value

    def real(self, column: str, *, maximum: int | None = None, integer: bool = False) -> float:
        try:
            return parse_number(
                self.cells.get(column, ""), minimum=0, maximum=maximum, integer=integer, ratio=column in self.ratios
            )
        except ValueError as e:
            raise self.table.error(self.index, column, str(e)) from None

    def optional_number(self, column: str) -> float | None:
        return self.real(column) if self.cells.get(column, "") else None

    def integer(self, column: str, default: int | None = None, *, maximum: int = MAX_COUNT) -> int:
        if default is not None and not self.cells.get(column, ""):
            return default
        return int(self.real(column, maximum=maximum, integer=True))

    def optional_integer(self, column: str, *, maximum: int = MAX_COUNT) -> int | None:
        return self.integer(column, maximum=maximum) if self.cells.get(column, "") else None

    def choice(self, column: str, allowed: tuple[str, ...]) -> str:
        """One of `allowed`, or "" for an empty or absent cell (unknown)."""
        value = self.cells.get(column, "")
        if value and value not in allowed:
            raise self.table.error(
                self.index, column, f"expected one of {', '.join(allowed)} (or empty), got {value!r}"
            )
        return value

    def flag(self, column: str) -> bool:
        try:
            return (
                parse_flag(self.cells.get(column, "")) is True
            )  # empty: false, as `profile import` has always read it
        except ValueError as e:
            raise self.table.error(self.index, column, str(e)) from None


def _rows(table: CsvTable, fmt: CsvFormat) -> list[_Row]:
    """The rows of a table of format `fmt`, after checking that its header has every column the format requires."""
    missing = [c for c in fmt.required if c not in table.columns]
    if missing:
        raise InputDataError(f"{table.source}: missing required column(s): {', '.join(missing)}")
    return [_Row(table, index, fmt.ratios) for index in range(len(table))]


def parse_colocations(table: CsvTable, *, source: str) -> list[ColocationRecord]:
    out = []
    for row in _rows(table, COLOCATIONS):
        mem_a = row.optional_integer("mem_bytes_a", maximum=MAX_BYTES)
        mem_b = row.optional_integer("mem_bytes_b", maximum=MAX_BYTES)
        out.append(
            ColocationRecord(
                gpu_model=row.text("gpu_model"),
                workload_a=row.text("workload_a"),
                workload_b=row.text("workload_b"),
                solo_throughput_a=row.real("solo_throughput_a"),
                solo_throughput_b=row.real("solo_throughput_b"),
                coloc_throughput_a=row.real("coloc_throughput_a"),
                coloc_throughput_b=row.real("coloc_throughput_b"),
                batch_size_a=row.integer("batch_size_a", default=0),
                batch_size_b=row.integer("batch_size_b", default=0),
                amp_a=row.flag("amp_a"),
                amp_b=row.flag("amp_b"),
                sm_util_a=row.optional_number("sm_util_a"),
                mem_bw_util_a=row.optional_number("mem_bw_util_a"),
                mem_bytes_a=mem_a,
                sm_util_b=row.optional_number("sm_util_b"),
                mem_bw_util_b=row.optional_number("mem_bw_util_b"),
                mem_bytes_b=mem_b,
                source=source,
                sharing=row.choice("sharing", SHARING_MODES),
            )
        )
    return out


def parse_throughputs(table: CsvTable, *, source: str) -> list[ProfileRecord]:
    """Throughput rows; optional columns `amp, step_time_seconds, sm_util_mean, sm_util_p95, mem_bw_util,
    mem_bytes, power_watts` fill the profile's measurements when present. `sm_util`, the mean SM utilisation's name in
    the models' throughputs CSV (docs/formats.md), is read as `sm_util_mean`, so a file made for `models train
    throughput` imports whole; a file with both must agree."""
    out = []
    for row in _rows(table, THROUGHPUTS):
        sm_util_mean = row.optional_number("sm_util_mean")
        sm_util = row.optional_number("sm_util")
        if sm_util_mean is not None and sm_util is not None and sm_util_mean != sm_util:
            raise InputDataError(
                f"{table.source}: row {row.number}: columns 'sm_util' ({sm_util:g}) and 'sm_util_mean'"
                f" ({sm_util_mean:g}) are the same measurement and disagree"
            )
        gpu_count = row.integer("gpu_count")
        if gpu_count == 0:
            raise table.error(row.index, "gpu_count", "must be at least 1")
        out.append(
            ProfileRecord(
                workload=row.text("workload"),
                gpu_model=row.text("gpu_model"),
                throughput_samples_per_s=row.real("throughput"),
                gpu_count=gpu_count,
                node_count=max(1, row.integer("nodes")),
                batch_size=row.integer("batch_size"),
                amp=row.flag("amp"),
                source=source,
                step_time_seconds=row.optional_number("step_time_seconds"),
                sm_util_mean_ratio=sm_util_mean if sm_util_mean is not None else sm_util,
                sm_util_p95_ratio=row.optional_number("sm_util_p95"),
                mem_bw_util_ratio=row.optional_number("mem_bw_util"),
                peak_memory_bytes=row.optional_integer("mem_bytes", maximum=MAX_BYTES),
                power_watts=row.optional_number("power_watts"),
            )
        )
    return out
