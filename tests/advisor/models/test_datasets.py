"""The CSV formats reject bad files with a message naming the problem; the importers read the public sets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.datasets import (
    COLOCATIONS,
    EXECUTIONS,
    THROUGHPUTS,
    GavelData,
    gavel_job,
    load_philly,
    load_sia,
    read_csv,
    run_seconds,
)
from profiler.csv_formats import InputDataError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "data.csv"
    path.write_text(text)
    return path


def test_missing_columns_are_all_listed(tmp_path: Path) -> None:
    path = write(tmp_path, "workload,gpu_model\nresnet,v100\n")
    with pytest.raises(InputDataError) as e:
        read_csv(path, THROUGHPUTS, with_labels=True)
    for column in ("gpu_count", "nodes", "batch_size", "throughput"):
        assert column in str(e.value)


def test_a_misspelled_column_is_named_with_a_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "workload,gpu_model,gpu_count,nodes,batch_size,throughput,sm_utl\nr,v100,1,1,32,10,0.5\n")
    with pytest.raises(InputDataError, match=r"'sm_utl' \(did you mean 'sm_util'\?\)"):
        read_csv(path, THROUGHPUTS, with_labels=True)


def test_labels_are_only_required_for_training(tmp_path: Path) -> None:
    path = write(tmp_path, "workload,gpu_model,gpu_count,nodes,batch_size\nr,v100,1,1,32\n")
    frame = read_csv(path, THROUGHPUTS, with_labels=False)
    assert frame["gpu_count"].tolist() == [1.0]
    assert np.isnan(frame["sm_util"].iloc[0])
    with pytest.raises(InputDataError, match="throughput"):
        read_csv(path, THROUGHPUTS, with_labels=True)


def test_a_non_number_names_column_and_row(tmp_path: Path) -> None:
    path = write(
        tmp_path, "workload,gpu_model,gpu_count,nodes,batch_size,throughput\nr,v100,1,1,32,10\nr,t4,two,1,32,5\n"
    )
    with pytest.raises(InputDataError, match="row 3, column 'gpu_count'"):
        read_csv(path, THROUGHPUTS, with_labels=True)


def test_utilisations_must_be_ratios(tmp_path: Path) -> None:
    header = ",".join(COLOCATIONS.features + COLOCATIONS.labels) + ",sm_util_a"
    path = write(tmp_path, header + "\nv100,a,b,10,10,5,5,85\n")
    with pytest.raises(InputDataError, match=r"row 2, column 'sm_util_a': a ratio 0\.\.1 is expected, got '85'"):
        read_csv(path, COLOCATIONS, with_labels=True)


def test_execution_times_accept_iso_and_unix_seconds(tmp_path: Path) -> None:
    header = ",".join(EXECUTIONS.features + EXECUTIONS.labels)
    path = write(
        tmp_path,
        header
        + "\nj1,w,u,v100,1,2026-01-01T00:00:00Z,2026-01-01T00:01:00Z,2026-01-01T01:01:00Z"
        + "\nj2,w,u,v100,1,2026-01-01T00:00:00Z,,2026-01-01T00:30:00Z\n",
    )
    frame = read_csv(path, EXECUTIONS, with_labels=True)
    assert run_seconds(frame).tolist() == [3600.0, 1800.0]


def test_gavel_job_names() -> None:
    assert gavel_job("ResNet-18 (batch size 16)") == ("ResNet-18", 16)
    assert gavel_job("A3C") == ("A3C", 0)


def test_gavel_import_matches_the_published_pair_table(gavel: GavelData) -> None:
    pairs = gavel.colocations
    # 26 single-GPU job types on 3 GPU types, every ordered pair, minus the pairs that could not share a GPU.
    assert len(pairs) + gavel.infeasible_pairs == 3 * 26 * 26
    assert set(pairs["gpu_model"]) == {"k80", "p100", "v100"}
    row = pairs[
        (pairs["gpu_model"] == "k80")
        & (pairs["workload_a"] == "ResNet-18 (batch size 16)")
        & (pairs["workload_b"] == "ResNet-18 (batch size 32)")
    ].iloc[0]
    # gavel_sf1_pairs.csv: iso_a 4.7953 steps/s, coloc_a 2.5400, norm_a 0.52968.
    assert row["solo_throughput_a"] == pytest.approx(4.795294551566172 * 16)
    assert row["coloc_throughput_a"] / row["solo_throughput_a"] == pytest.approx(0.5296816577437409)
    assert row["family_a"] == "ResNet-18"


def test_gavel_trace_executions_have_positive_run_times(gavel_executions: pd.DataFrame) -> None:
    seconds = run_seconds(gavel_executions)
    assert len(seconds) > 5000
    assert (seconds > 0).all()


def test_sia_and_philly_import(shared_data: Path) -> None:
    sia = load_sia(shared_data / "sia" / "sia_placements_all.csv")
    assert len(sia) == 16363
    assert set(sia["gpu_model"]) == {"t4", "v100", "a100-40gb", "rtx-6000", "rtx-2080ti"}
    philly = load_philly(shared_data / "philly" / "philly.csv")
    assert len(philly) == 82247
    assert (run_seconds(philly) >= 0).all()
