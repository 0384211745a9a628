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
    assert loaded.scaling_.shrinkage == model.scaling_.shrinkage
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


def _synthetic_throughputs(*, v100_slowdown_of_a: float) -> pd.DataFrame:
    """Three workloads on four GPU types, speed a fixed factor per GPU type; workload "a" optionally slower on V100."""
    speed = {"t4": 1.0, "rtx-2080ti": 1.8, "v100": 2.6, "a100-40gb": 4.5}
    rows = []
    for workload, scale in (("a", 1.0), ("b", 3.0), ("c", 0.5)):
        for gpu, factor in speed.items():
            slowdown = v100_slowdown_of_a if (workload, gpu) == ("a", "v100") else 1.0
            for count in (1.0, 2.0, 4.0):
                for batch in (32.0, 64.0):
                    throughput = scale * factor * count * (batch / 32.0) ** 0.3 / slowdown
                    rows.append((workload, gpu, count, 1.0, batch, throughput))
    return pd.DataFrame(rows, columns=["workload", "gpu_model", "gpu_count", "nodes", "batch_size", "throughput"])


def test_one_gpu_type_anomalous_for_a_workload_does_not_drag_estimates_for_an_unseen_gpu() -> None:
    query = pd.DataFrame(
        {"workload": ["a", "a"], "gpu_model": ["rtx-6000"] * 2, "gpu_count": [1.0, 4.0], "nodes": [1.0, 1.0]}
    ).assign(batch_size=[32.0, 64.0])
    clean = ThroughputModel(**FAST).fit(_synthetic_throughputs(v100_slowdown_of_a=1.0)).predict_frame(query)
    anomalous_data = _synthetic_throughputs(v100_slowdown_of_a=10.0)
    with_anomaly = ThroughputModel(**FAST).fit(anomalous_data).predict_frame(query)
    # Not exactly equal: the anomaly shifts the median GPU type the residuals are centred on.
    np.testing.assert_allclose(with_anomaly, clean, rtol=0.2)
    # The RTX 6000's nearest GPU by FP32 is the V100, so the nearest-GPU baseline inherits the anomaly.
    baseline = NearestGpuThroughput().fit(anomalous_data).predict_frame(query)
    assert (baseline < 0.2 * clean).all()


def test_an_unseen_gpu_between_measured_ones_gets_an_estimate_between_theirs() -> None:
    data = _synthetic_throughputs(v100_slowdown_of_a=1.0)
    query = pd.DataFrame(
        {"workload": ["b"], "gpu_model": ["rtx-6000"], "gpu_count": [2.0], "nodes": [1.0], "batch_size": [64.0]}
    )
    estimate = ThroughputModel(**FAST).fit(data).predict_frame(query)[0]
    same_config = data[(data["workload"] == "b") & (data["gpu_count"] == 2.0) & (data["batch_size"] == 64.0)]
    by_gpu = same_config.set_index("gpu_model")["throughput"]
    # Every data-sheet number of the RTX 6000 lies between the T4's and the A100's.
    assert by_gpu["t4"] < estimate < by_gpu["a100-40gb"]
