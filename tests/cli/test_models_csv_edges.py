"""`models train/predict --from-csv` refuse a number that is not finite (`inf`, `1e400`) at the edge, naming the
column and row on one `error:` line: they were read as infinity and trained on or predicted from (issue 38)."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.datasets import read_csv
from profiler.csv_formats import THROUGHPUTS, InputDataError
from tests.cli.test_cli_smoke import gpuadvisor
from tests.cli.test_errors import assert_one_error_line

HEADER = "workload,gpu_model,gpu_count,nodes,batch_size,throughput\n"


@pytest.mark.parametrize(
    ("row", "column", "given"),
    [
        ("w,V100,1,1,64,inf", "throughput", "'inf'"),
        ("w,V100,1,1,64,-inf", "throughput", "'-inf'"),
        ("w,V100,1,1,1e400,100", "batch_size", "'1e400'"),
    ],
)
def test_a_csv_number_that_is_not_finite_is_refused_with_its_place(
    tmp_path: Path, row: str, column: str, given: str
) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text(HEADER + "w,V100,1,1,64,100\n" + row + "\n")
    with pytest.raises(InputDataError) as refused:
        read_csv(csv, THROUGHPUTS, with_labels=False)
    assert str(refused.value) == f"{csv}: row 3, column '{column}': expected a finite number, got {given}"


def test_models_train_refuses_an_infinite_label_on_one_line(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text(HEADER + "w,V100,1,1,64,100\nw,V100,1,1,64,inf\n")
    result = gpuadvisor("models", "train", "throughput", "--from-csv", str(csv), "--out", str(tmp_path / "m"))
    assert_one_error_line(result, 2, str(csv), "row 3, column 'throughput'", "finite")
    assert not (tmp_path / "m").exists()
