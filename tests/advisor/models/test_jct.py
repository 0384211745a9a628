"""The JCT model: ordered quantiles, history-aware, beats the per-user/workload median on later jobs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.datasets import run_seconds
from advisor.features import JobQuery
from advisor.models.artifact import load_artifact, save_artifact
from advisor.models.jct import HISTORY_BLOCKS, JctModel, time_ordered_history
from advisor.models.training import evaluate

FAST = {"num_boost_round": 60, "num_threads": 1}


@pytest.fixture(scope="module")
def model(gavel_executions: pd.DataFrame) -> JctModel:
    return JctModel(**FAST).fit(gavel_executions)


def test_quantiles_are_ordered_and_positive(model: JctModel, gavel_executions: pd.DataFrame) -> None:
    q = model.predict_frame(gavel_executions.head(200))
    assert (q.p10 > 0).all()
    assert (q.p10 <= q.p50).all()
    assert (q.p50 <= q.p90).all()


def test_the_blend_weight_and_validation_are_recorded(model: JctModel) -> None:
    assert 0.0 <= model.alpha_ <= 1.0
    assert model.validation_["mae_log"] <= min(
        model.validation_["history_mae_log"], model.validation_["lightgbm_mae_log"]
    )


def test_unknown_keys_still_get_an_estimate(model: JctModel) -> None:
    q = model.predict(workloads=["new"], users=["nobody"], gpu_models=[""], gpu_count=[3], submit_time_seconds=[2e9])
    assert np.isfinite(q.p50).all()


def test_a_saved_model_predicts_the_same(model: JctModel, gavel_executions: pd.DataFrame, tmp_path: Path) -> None:
    save_artifact(model.to_artifact(), tmp_path / "m")
    loaded = JctModel.from_artifact(load_artifact(tmp_path / "m", kind="jct"))
    rows = gavel_executions.head(50)
    np.testing.assert_allclose(loaded.predict_frame(rows).p50, model.predict_frame(rows).p50)


def test_model_beats_the_median_baseline_on_later_jobs(gavel_executions: pd.DataFrame) -> None:
    result = evaluate("jct", gavel_executions, "submit_time", num_threads=1, params=FAST).to_json()
    assert result["model"]["mae_log"] < result["baselines"]["user_workload_median"]["mae_log"]


def test_training_history_comes_from_earlier_jobs_only() -> None:
    """One workload whose jobs get longer over time: no job's history may know a later (longer) run."""
    n = 200
    query = JobQuery(
        workloads=["w"] * n,
        users=["u"] * n,
        queues=["q"] * n,
        gpu_models=["v100"] * n,
        gpu_count=np.ones(n),
        submit_time_seconds=np.arange(n, dtype=np.float64),
    )
    log_run = np.log(np.arange(1, n + 1, dtype=np.float64))
    history = time_ordered_history(query, log_run)
    seen = np.isfinite(history.workload_log_median)
    assert not seen[: n // HISTORY_BLOCKS].any()
    assert seen[n // HISTORY_BLOCKS :].all()
    assert (history.workload_log_median[seen] < log_run[seen]).all()
    assert (np.diff(history.workload_count) >= 0).all()


def test_a_job_with_no_history_gets_the_median_of_all_jobs(model: JctModel, gavel_executions: pd.DataFrame) -> None:
    """Not the trees' guess for a combination they never saw (the quickstart once said 16 s for resnet50-bs64)."""
    q = model.predict(
        workloads=["resnet50-bs64"],
        users=["someone-new"],
        gpu_models=["v100"],
        gpu_count=[1],
        submit_time_seconds=[2e9],
    )
    median = float(np.median(np.maximum(run_seconds(gavel_executions), 1.0)))
    assert q.p50[0] == pytest.approx(median, rel=0.01)
