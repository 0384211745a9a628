"""CSV interchange of docs/design.md §6: colocations and throughputs files → store records.

The formats' columns (required, optional, ratios) are `profiler.csv_formats`, the same the models read.

Parsing is pure and strict: a missing required column or an unreadable value is one `CsvFormatError` that
names the column (and row), so `profile import` can tell the user exactly what to fix.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import TypeVar

from profiler.csv_formats import (
    COLOCATIONS,
    FALSE_VALUES,
    MAX_BYTES,
    MAX_COUNT,
    SHARING_MODES,
    THROUGHPUTS,
    TRUE_VALUES,
    CsvFormat,
    InputDataError,
)
from profiler.records import ColocationRecord, ProfileRecord

T = TypeVar("T")


class ImportKind(StrEnum):
    COLOCATIONS = "colocations"
    THROUGHPUTS = "throughputs"


CsvFormatError = InputDataError
"""The CSV does not have the docs/design.md §6 format (the readers' one error class, under its older name here)."""


class _Row:
    """Typed access to one CSV row; every conversion error names the row number and the column."""

    def __init__(self, number: int, cells: dict[str, str], ratios: frozenset[str]) -> None:
        self.number = number
        self.ratios = ratios
        self.cells = {k.strip(): (v or "").strip() for k, v in cells.items() if k is not None}

    def _convert(self, column: str, convert: Callable[[str], T], expected: str) -> T:
        raw = self.cells.get(column, "")
        try:
            return convert(raw)
        except ValueError as e:
            raise CsvFormatError(f"row {self.number}, column {column!r}: expected {expected}, got {raw!r}") from e

    def text(self, column: str) -> str:
        value = self.cells.get(column, "")
        if not value:
            raise CsvFormatError(f"row {self.number}, column {column!r}: must not be empty")
        return value

    def real(self, column: str) -> float:
        value = self._convert(column, float, "a number")
        if not math.isfinite(value):  # nan, inf and numbers beyond a double (1e400) alike
            raise CsvFormatError(f"row {self.number}, column {column!r}: expected a finite number, got {value}")
        if value < 0:
            raise CsvFormatError(f"row {self.number}, column {column!r}: must not be negative, got {value}")
        if column in self.ratios and value > 1:
            raise CsvFormatError(f"row {self.number}, column {column!r}: a ratio 0..1 is expected, got {value}")
        return value

    def optional_number(self, column: str) -> float | None:
        return self.real(column) if self.cells.get(column, "") else None

    def integer(self, column: str, default: int | None = None, *, maximum: int = MAX_COUNT) -> int:
        if default is not None and not self.cells.get(column, ""):
            return default
        number = self.real(column)
        if number > maximum:
            raise CsvFormatError(f"row {self.number}, column {column!r}: must be at most {maximum}, got {number:g}")
        if not number.is_integer():
            raise CsvFormatError(f"row {self.number}, column {column!r}: expected an integer, got {number:g}")
        return int(number)

    def optional_integer(self, column: str, *, maximum: int = MAX_COUNT) -> int | None:
        return self.integer(column, maximum=maximum) if self.cells.get(column, "") else None

    def choice(self, column: str, allowed: tuple[str, ...]) -> str:
        """One of `allowed`, or "" for an empty or absent cell (unknown)."""
        value = self.cells.get(column, "")
        if value and value not in allowed:
            raise CsvFormatError(
                f"row {self.number}, column {column!r}: expected one of {', '.join(allowed)} (or empty), got {value!r}"
            )
        return value

    def flag(self, column: str) -> bool:
        raw = self.cells.get(column, "").lower()
        if raw in TRUE_VALUES:
            return True
        if raw in FALSE_VALUES:
            return False
        raise CsvFormatError(f"row {self.number}, column {column!r}: expected true/false, got {raw!r}")


def _rows(lines: Iterable[str], fmt: CsvFormat) -> list[_Row]:
    """The rows of a file of format `fmt`, after checking that its header has every column the format requires."""
    reader = csv.DictReader(lines)
    header = {name.strip() for name in reader.fieldnames or []}
    missing = [c for c in fmt.required if c not in header]
    if missing:
        raise CsvFormatError(f"missing required column(s): {', '.join(missing)}")
    return [_Row(number, cells, fmt.ratios) for number, cells in enumerate(reader, start=2)]


def parse_colocations(lines: Iterable[str], *, source: str) -> list[ColocationRecord]:
    out = []
    for row in _rows(lines, COLOCATIONS):
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


def parse_throughputs(lines: Iterable[str], *, source: str) -> list[ProfileRecord]:
    """Throughput rows; optional columns `amp, step_time_seconds, sm_util_mean, sm_util_p95, mem_bw_util,
    mem_bytes, power_watts` fill the profile's measurements when present. `sm_util`, the mean SM utilisation's name in
    the models' throughputs CSV (docs/formats.md), is read as `sm_util_mean`, so a file made for `models train
    throughput` imports whole; a file with both must agree."""
    out = []
    for row in _rows(lines, THROUGHPUTS):
        sm_util_mean = row.optional_number("sm_util_mean")
        sm_util = row.optional_number("sm_util")
        if sm_util_mean is not None and sm_util is not None and sm_util_mean != sm_util:
            raise CsvFormatError(
                f"row {row.number}: columns 'sm_util' ({sm_util:g}) and 'sm_util_mean' ({sm_util_mean:g}) are the"
                " same measurement and disagree"
            )
        gpu_count = row.integer("gpu_count")
        if gpu_count == 0:
            raise CsvFormatError(f"row {row.number}, column 'gpu_count': must be at least 1")
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
