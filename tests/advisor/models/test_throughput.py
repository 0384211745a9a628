"""The throughput model: measured configurations come back as measured; unseen GPUs and workloads get estimates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.datasets import GavelData
from advisor.models.artifact import load_artifact, save_artifact
from advisor.models.throughput import NearestGpuThroughput, ThroughputModel

FAST = {"num_boost_round": 80, "num_threads": 1}


@pytest.fixture(scope="module")
def model(gavel: GavelData) -> ThroughputModel:
    return ThroughputModel(**FAST).fit(gavel.throughputs)


def test_a_measured_configuration_returns_the_measurement(model: ThroughputModel, gavel: GavelData) -> None:
    rows = gavel.throughputs.head(20)
    np.testing.assert_allclose(model.predict_frame(rows), rows["throughput"].to_numpy())


def test_gpu_names_in_any_spelling_and_unseen_gpu_types(model: ThroughputModel) -> None:
    out = model.predict(
        ["ResNet-50 (batch size 64)"] * 3,
        ["Tesla V100-SXM2-16GB", "NVIDIA H100 80GB HBM3", "mystery gpu"],
        [1, 1, 1],
        [64, 64, 64],
    )
    assert out.shape == (3,)
    assert (out > 0).all()
    assert np.isfinite(out).all()


def test_an_unknown_workload_gets_the_fallback_estimate(model: ThroughputModel) -> None:
    out = model.predict(["never-profiled"], ["v100"], [1], [32])
    assert out[0] > 0


def test_empty_query_returns_empty(model: ThroughputModel) -> None:
    assert model.predict([], [], [], []).shape == (0,)


def test_a_saved_model_predicts_the_same(model: ThroughputModel, gavel: GavelData, tmp_path: Path) -> None:
    save_artifact(model.to_artifact(), tmp_path / "m")
    loaded = ThroughputModel.from_artifact(load_artifact(tmp_path / "m", kind="throughput"))
    assert loaded.correction_weight_ == model.correction_weight_
    query = gavel.throughputs.assign(batch_size=gavel.throughputs["batch_size"] * 2)
    np.testing.assert_allclose(loaded.predict_frame(query), model.predict_frame(query))


def test_nearest_gpu_baseline_scales_by_fp32(gavel: GavelData) -> None:
    train = gavel.throughputs[gavel.throughputs["gpu_model"] == "k80"]
    query = pd.DataFrame(
        {
            "workload": ["ResNet-50 (batch size 64)"],
            "gpu_model": ["v100"],
            "gpu_count": [1.0],
            "nodes": [1.0],
            "batch_size": [64.0],
        }
    )
    anchor = train[(train["workload"] == "ResNet-50 (batch size 64)") & (train["gpu_count"] == 1)]["throughput"].iloc[0]
    estimate = NearestGpuThroughput().fit(train).predict_frame(query)[0]
    assert estimate == pytest.approx(anchor * 15.7 / 4.1)
