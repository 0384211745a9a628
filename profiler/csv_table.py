"""The one way a CSV file is read: every reader of a table format goes through here (`profile import`, the models'
data sets and public sets, the simulator's cluster, trace and throughput files).

Reading and checking were written three times (the csv module in `profile import`, pandas with strings in the models,
pandas with guessed types in the simulator), so the same file met three sets of rules: a cell the simulator read as
a number the models refused, an encoding error was a traceback in one and a message in another, a row was counted
from 1 in one reader and from 2 in the others. Here the rules are one:

* a file is UTF-8 (a byte-order mark is skipped); anything else is an `InputDataError` naming the byte;
* the header's names are stripped and must be distinct; a row with more cells than the header is refused, a shorter
  one has empty cells; blank lines are skipped; every cell is stripped;
* rows are numbered as the file's lines are (the header is row 1), so a message points where an editor shows it;
* numbers are strict: a finite decimal, optionally in a range, whole where asked; every refusal names the source,
  the row and the column (`InputDataError`).

The formats themselves (which columns, which types) are `profiler.csv_formats` and the readers that know them.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from profiler.csv_formats import FALSE_VALUES, MAX_COUNT, TRUE_VALUES, InputDataError


def _figure(value: float) -> str:
    """A bound as a reader writes it: whole numbers in full (2147483647, not 2.14748e+09)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _problem(source: str, row: int, column: str, problem: str) -> InputDataError:
    return InputDataError(f"{source}: row {row}, column {column!r}: {problem}")


def parse_number(
    raw: object,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    integer: bool = False,
    ratio: bool = False,
) -> float:
    """One cell as a float, by the readers' one rule; ValueError with what was wrong (the caller names row and
    column). `raw` is a cell's text or a value already typed (a frame built from the store). A whole number is at most
    `MAX_COUNT` unless `maximum` says otherwise."""
    if isinstance(raw, bool):
        raise ValueError(f"expected a number, got {raw!r}")
    if isinstance(raw, (int, float)):
        value = float(raw)
    else:
        text = str(raw).strip()
        try:
            if "_" in text:  # Python's float takes 1_000; no other reader of a CSV does
                raise ValueError(text)
            value = float(text)
        except ValueError:
            raise ValueError(f"expected a number, got {raw!r}") from None
    if not math.isfinite(value):  # nan, inf and numbers beyond a double (1e400) alike
        raise ValueError(f"expected a finite number, got {raw!r}")
    if minimum is not None and value < minimum:
        floor = "must not be negative" if minimum == 0 else f"must be at least {_figure(minimum)}"
        raise ValueError(f"{floor}, got {raw!r}")
    if ratio and value > 1:
        raise ValueError(f"a ratio 0..1 is expected, got {raw!r}")
    if maximum is None and integer:
        maximum = MAX_COUNT
    if maximum is not None and value > maximum:
        raise ValueError(f"must be at most {_figure(maximum)}, got {raw!r}")
    if integer and not value.is_integer():
        raise ValueError(f"expected a whole number, got {raw!r}")
    return value


def is_empty(raw: object) -> bool:
    """An empty cell: empty text, or a missing value of a frame (None, NaN)."""
    if raw is None:
        return True
    if isinstance(raw, float):
        return math.isnan(raw)
    return isinstance(raw, str) and not raw.strip()


def parse_numbers(
    values: Iterable[object],
    *,
    source: str,
    column: str,
    first_row: int = 2,
    rows: Sequence[int] | None = None,
    optional: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
    integer: bool = False,
    ratio: bool = False,
) -> list[float]:
    """A column's cells as floats (NaN for an empty cell where `optional`); the first bad cell raises
    `InputDataError` naming `source`, its row (`rows[i]`, else `first_row + i`) and `column`."""
    out: list[float] = []
    for i, raw in enumerate(values):
        row = rows[i] if rows is not None else first_row + i
        if is_empty(raw):
            if not optional:
                raise _problem(source, row, column, "expected a number, got an empty cell")
            out.append(math.nan)
            continue
        try:
            out.append(parse_number(raw, minimum=minimum, maximum=maximum, integer=integer, ratio=ratio))
        except ValueError as e:
            raise _problem(source, row, column, str(e)) from None
    return out


def parse_flag(raw: str) -> bool | None:
    """A true/false cell (`TRUE_VALUES`, `FALSE_VALUES`; empty: None, unknown); ValueError for anything else."""
    text = raw.strip().lower()
    if not text:
        return None
    if text in TRUE_VALUES:
        return True
    if text in FALSE_VALUES:
        return False
    raise ValueError(f"expected true/false, got {raw!r}")


@dataclass(frozen=True, slots=True)
class CsvTable:
    """A CSV file's header and cells (stripped text, "" where empty or absent), with the file's line of each row."""

    source: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    lines: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.rows)

    def has(self, *columns: str) -> bool:
        return all(c in self.columns for c in columns)

    def column(self, name: str) -> list[str]:
        """The column's cells ("" for each when the file has no such column)."""
        if name not in self.columns:
            return [""] * len(self.rows)
        at = self.columns.index(name)
        return [cells[at] for cells in self.rows]

    def error(self, index: int, column: str, problem: str) -> InputDataError:
        """The error for the cell of data row `index` (0-based) in `column`."""
        return _problem(self.source, self.lines[index], column, problem)

    def row_error(self, index: int, problem: str) -> InputDataError:
        return InputDataError(f"{self.source}: row {self.lines[index]}: {problem}")

    def texts(self, column: str) -> list[str]:
        """The column's cells, none of them empty."""
        cells = self.column(column)
        for i, text in enumerate(cells):
            if not text:
                raise self.error(i, column, "must not be empty")
        return cells

    def numbers(
        self,
        column: str,
        *,
        optional: bool = False,
        minimum: float | None = None,
        maximum: float | None = None,
        integer: bool = False,
        ratio: bool = False,
    ) -> list[float]:
        """The column's cells as floats (`parse_numbers`)."""
        return parse_numbers(
            self.column(column),
            source=self.source,
            column=column,
            rows=self.lines,
            optional=optional,
            minimum=minimum,
            maximum=maximum,
            integer=integer,
            ratio=ratio,
        )

    def flags(self, column: str) -> list[bool | None]:
        out: list[bool | None] = []
        for i, raw in enumerate(self.column(column)):
            try:
                out.append(parse_flag(raw))
            except ValueError as e:
                raise self.error(i, column, str(e)) from None
        return out


def read_csv_lines(lines: Iterable[str], *, source: str) -> CsvTable:
    """The table of CSV text given as lines (a file opened with `newline=""`, or `str.splitlines()`)."""
    reader = csv.reader(lines, skipinitialspace=True)
    try:
        header = next(reader, None)
        if header is None:
            raise InputDataError(f"{source}: empty file (no header)")
        columns = tuple(name.strip().lstrip("\ufeff") for name in header)
        seen: set[str] = set()
        for name in columns:
            if name in seen:
                raise InputDataError(f"{source}: column {name!r} appears twice in the header")
            seen.add(name)
        width = len(columns)
        rows: list[tuple[str, ...]] = []
        numbers: list[int] = []
        for cells in reader:
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue  # a blank line
            if len(cells) > width:
                raise InputDataError(
                    f"{source}: row {reader.line_num}: {len(cells)} cells, the header names {width} column(s)"
                )
            rows.append(tuple(c.strip() for c in cells) + ("",) * (width - len(cells)))
            numbers.append(reader.line_num)
    except csv.Error as e:
        raise InputDataError(f"{source}: row {reader.line_num}: not readable as CSV ({e})") from e
    except UnicodeDecodeError as e:
        bad = e.object[e.start : e.start + 1]
        raise InputDataError(
            f"{source}: not UTF-8 text (a byte {bad!r} cannot be decoded); save the file as UTF-8"
        ) from e
    return CsvTable(source, columns, tuple(rows), tuple(numbers))


def read_csv_file(path: Path) -> CsvTable:
    """The table of the CSV file at `path` (named by its path in every error)."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            return read_csv_lines(handle, source=str(path))
    except FileNotFoundError as e:
        raise InputDataError(f"{path}: no such file") from e
    except IsADirectoryError as e:
        raise InputDataError(f"{path}: a directory, not a CSV file") from e
    except OSError as e:
        raise InputDataError(f"{path}: cannot be read ({e.strerror})") from e
