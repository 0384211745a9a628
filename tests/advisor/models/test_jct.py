"""The JCT model: ordered quantiles, history-aware, beats the per-user/workload median on later jobs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.models.artifact import load_artifact, save_artifact
from advisor.models.jct import JctModel
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
    q = model.predict(workloads=["new"], users=["nobody"], gpu_models=[""], gpu_count=[3], submit_time_s=[2e9])
    assert np.isfinite(q.p50).all()


def test_a_saved_model_predicts_the_same(model: JctModel, gavel_executions: pd.DataFrame, tmp_path: Path) -> None:
    save_artifact(model.to_artifact(), tmp_path / "m")
    loaded = JctModel.from_artifact(load_artifact(tmp_path / "m", kind="jct"))
    rows = gavel_executions.head(50)
    np.testing.assert_allclose(loaded.predict_frame(rows).p50, model.predict_frame(rows).p50)


def test_model_beats_the_median_baseline_on_later_jobs(gavel_executions: pd.DataFrame) -> None:
    result = evaluate("jct", gavel_executions, "submit_time", num_threads=1, params=FAST).to_json()
    assert result["model"]["mae_log"] < result["baselines"]["user_workload_median"]["mae_log"]
