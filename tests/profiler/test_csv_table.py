"""One reading path for every CSV reader (`profiler.csv_table`): the same file meets the same rules and the same
message in `profile import`, the models' data sets and the simulator."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from advisor.datasets import read_csv
from advisor.sim.loaders import load_cluster, load_throughputs
from profiler.csv_formats import THROUGHPUTS, InputDataError
from profiler.csv_table import parse_number, read_csv_file
from profiler.importers import parse_throughputs

HEADER = "workload,gpu_model,gpu_count,nodes,batch_size,throughput\n"

READERS: dict[str, Callable[[Path], object]] = {
    "profile import": lambda path: parse_throughputs(read_csv_file(path), source="x"),
    "models": lambda path: read_csv(path, THROUGHPUTS, with_labels=True),
    "simulator": load_throughputs,
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("w,V100,1,1,64,fast\n", "row 2, column 'throughput': expected a number, got 'fast'"),
        ("w,V100,1,1,64,100\n\nw,V100,2,1,64,1_000\n", "row 4, column 'throughput': expected a number, got '1_000'"),
        ("w,V100,1,1,64,inf\n", "row 2, column 'throughput': expected a finite number, got 'inf'"),
        ("w,V100,1,1,64,100,7\n", "row 2: 7 cells, the header names 6 column(s)"),
    ],
)
def test_every_reader_refuses_a_bad_file_with_the_same_message(
    tmp_path: Path, reader: str, rows: str, message: str
) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + rows)
    with pytest.raises(InputDataError, match=re.escape(f"{path}: {message}")):
        READERS[reader](path)


@pytest.mark.parametrize("reader", READERS)
def test_every_reader_names_a_file_that_is_not_utf8(tmp_path: Path, reader: str) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes((HEADER + "w,V100,1,1,64,100\n").encode("utf-16"))
    with pytest.raises(InputDataError, match=re.escape(f"{path}: not UTF-8 text")):
        READERS[reader](path)


def test_the_header_is_stripped_a_bom_skipped_and_a_repeated_column_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_bytes("\ufeffnode , gpu_model,gpus\n n1 , V100 , 4\n".encode())
    table = read_csv_file(path)
    assert (table.columns, table.rows, table.lines) == (("node", "gpu_model", "gpus"), (("n1", "V100", "4"),), (2,))
    assert load_cluster(path).nodes[0].gpus == 4
    path.write_text("node,gpus,node\nn1,4,n2\n")
    with pytest.raises(InputDataError, match="column 'node' appears twice in the header"):
        read_csv_file(path)


def test_a_missing_file_and_an_empty_one_are_named(tmp_path: Path) -> None:
    with pytest.raises(InputDataError, match="no such file"):
        read_csv_file(tmp_path / "absent.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(InputDataError, match="empty file"):
        read_csv_file(tmp_path / "empty.csv")


@pytest.mark.parametrize(
    ("raw", "rule", "problem"),
    [
        ("-1", {"minimum": 0}, "must not be negative, got '-1'"),
        ("0", {"minimum": 1}, "must be at least 1, got '0'"),
        ("2.5", {"integer": True}, "expected a whole number, got '2.5'"),
        ("1e23", {"integer": True}, "must be at most 2147483647, got '1e23'"),
        ("1.5", {"ratio": True}, "a ratio 0..1 is expected, got '1.5'"),
        ("nan", {}, "expected a finite number, got 'nan'"),
    ],
)
def test_the_number_rule(raw: str, rule: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_number(raw, **rule)  # type: ignore[arg-type]
    assert parse_number(" 0.25 ") == 0.25
