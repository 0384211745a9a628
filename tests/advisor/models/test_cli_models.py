"""`gpuadvisor models ...` as a user runs it: exit codes, one-line errors, JSON in input order.

The commands run in-process through Typer's runner (the subprocess path is covered by tests/cli): each `gpuadvisor`
process pays for importing LightGBM and the API stack, which would make this file slow for no extra coverage.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from advisor.cli.main import app
from advisor.datasets import COLOCATIONS, GavelData


def gpuadvisor(*args: str, cwd: Path) -> Result:
    """Run `gpuadvisor models ARGS` with relative paths resolved against `cwd` and a store of its own there."""
    with pytest.MonkeyPatch.context() as env:
        env.chdir(cwd)
        env.setenv("GPUADVISOR_DB_URL", f"sqlite:///{cwd}/store.db")
        return CliRunner().invoke(app, ["models", *args])


@pytest.fixture(scope="module")
def workdir(gavel: GavelData, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("models-cli")
    # Three job families on one GPU type: enough for every command, small enough to train in a second.
    k80 = gavel.colocations[gavel.colocations["gpu_model"] == "k80"]
    families = {"ResNet-18", "LM", "A3C"}
    pairs = k80[k80["family_a"].isin(families) & k80["family_b"].isin(families)]
    columns = [c for c in COLOCATIONS.known if c in pairs.columns]
    pairs[columns].to_csv(directory / "pairs.csv", index=False)
    pairs[columns].head(5).to_csv(directory / "five.csv", index=False)
    pairs[columns].head(5).iloc[::-1].to_csv(directory / "five_reversed.csv", index=False)
    return directory


def test_train_predict_list_and_rollback(workdir: Path) -> None:
    trained = gpuadvisor(
        "train",
        "interference",
        "--from-csv",
        "pairs.csv",
        "--out",
        "m1",
        "--db",
        f"sqlite:///{workdir}/store.db",
        cwd=workdir,
    )
    assert trained.exit_code == 0, trained.stderr
    assert "promoted as interference v1" in trained.stdout
    predicted = gpuadvisor("predict", "interference", "--model", "m1", "--from-csv", "five.csv", "--json", cwd=workdir)
    assert predicted.exit_code == 0, predicted.stderr
    rows = json.loads(predicted.stdout)
    assert len(rows) == 5
    assert set(rows[0]) == {"norm_a", "norm_b"}
    reversed_rows = json.loads(
        gpuadvisor(
            "predict", "interference", "--model", "m1", "--from-csv", "five_reversed.csv", "--json", cwd=workdir
        ).stdout
    )
    assert reversed_rows == rows[::-1]
    listed = json.loads(gpuadvisor("list", "--json", cwd=workdir).stdout)
    assert [(m["kind"], m["version"], m["promoted"]) for m in listed] == [("interference", 1, True)]
    again = gpuadvisor("rollback", "interference", cwd=workdir)
    assert again.exit_code == 2
    assert "nothing to roll back" in again.stderr


def test_missing_columns_exit_2_with_one_line(workdir: Path) -> None:
    (workdir / "bad.csv").write_text("gpu_model,workload_a,solo_throughput_a\nk80,a,1\n")
    result = gpuadvisor("train", "interference", "--from-csv", "bad.csv", "--out", "x", cwd=workdir)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    for column in ("workload_b", "solo_throughput_b", "coloc_throughput_a", "coloc_throughput_b"):
        assert column in lines[0]


def test_too_few_rows_exit_2_saying_how_many(workdir: Path) -> None:
    result = gpuadvisor("train", "interference", "--from-csv", "five.csv", "--out", "x", cwd=workdir)
    assert result.exit_code == 2
    assert "at least 20" in result.stderr
    assert "Traceback" not in result.stderr


def test_predict_with_a_directory_that_is_no_model_exits_2(workdir: Path) -> None:
    result = gpuadvisor("predict", "jct", "--model", str(workdir), "--from-csv", "five.csv", "--json", cwd=workdir)
    assert result.exit_code == 2
    assert "not a model directory" in result.stderr


def test_evaluate_reports_model_and_baselines(workdir: Path) -> None:
    result = gpuadvisor(
        "evaluate", "interference", "--from-csv", "pairs.csv", "--holdout-by", "family", "--json", cwd=workdir
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.output)
    assert set(report["baselines"]) == {"mean", "half", "util_sum", "sharing_prior", "sharing_class"}
    assert len(report["folds"]) == 3
    assert report["scored"] == "held-out side"


def test_probes_need_a_split_by_a_side_of_the_pair(workdir: Path) -> None:
    result = gpuadvisor(
        "evaluate", "interference", "--from-csv", "pairs.csv", "--holdout-by", "pair", "--probes", "3", cwd=workdir
    )
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "--probes needs" in result.stderr
