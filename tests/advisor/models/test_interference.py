"""The interference model: symmetric, clipped, better than its baselines on pairs it has not seen."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.datasets import side_columns_from_frame
from advisor.features import SoloProfile
from advisor.models.artifact import load_artifact, save_artifact
from advisor.models.interference import NORM_MAX, NORM_MIN, InterferenceModel
from advisor.models.training import evaluate, splits
from advisor.sharing import time_slicing_prior
from tests.advisor.models.conftest import FAST


def test_swapping_the_pair_swaps_the_prediction(v100_interference: InterferenceModel) -> None:
    a = SoloProfile("resnet", solo_throughput=800.0, batch_size=64, sm_util_ratio=0.9)
    b = SoloProfile("lstm", solo_throughput=300.0, batch_size=20)
    ab = v100_interference.predict_pairs([(a, b)], "Tesla V100-SXM2-16GB")
    ba = v100_interference.predict_pairs([(b, a)], "v100")
    assert ab[0, 0] == ba[0, 1]
    assert ab[0, 1] == ba[0, 0]


def test_predictions_stay_in_the_sane_range(v100_interference: InterferenceModel) -> None:
    extreme = [
        (SoloProfile("x", 1e-6, 1), SoloProfile("y", 1e9, 1 << 20)),
        (SoloProfile("x", 1e9, 1), SoloProfile("y", 0.0, 0)),
    ]
    out = v100_interference.predict_pairs(extreme, ["NVIDIA H100 80GB HBM3", "some unknown gpu"])
    assert out.shape == (2, 2)
    assert (out >= NORM_MIN).all()
    assert (out <= NORM_MAX).all()


def test_a_saved_model_predicts_the_same(
    v100_interference: InterferenceModel, v100_pairs: pd.DataFrame, tmp_path: Path
) -> None:
    save_artifact(v100_interference.to_artifact(), tmp_path / "m")
    assert not list((tmp_path / "m").glob("*.pkl"))
    loaded = InterferenceModel.from_artifact(load_artifact(tmp_path / "m", kind="interference"))
    np.testing.assert_array_equal(loaded.predict_frame(v100_pairs), v100_interference.predict_frame(v100_pairs))


def test_pair_split_keeps_both_orders_of_a_pair_together(v100_pairs: pd.DataFrame) -> None:
    for _, train, test in splits(v100_pairs, "pair"):
        train_pairs = {
            frozenset(p)
            for p in zip(v100_pairs["workload_a"].iloc[train], v100_pairs["workload_b"].iloc[train], strict=True)
        }
        test_pairs = {
            frozenset(p)
            for p in zip(v100_pairs["workload_a"].iloc[test], v100_pairs["workload_b"].iloc[test], strict=True)
        }
        assert not train_pairs & test_pairs


def test_model_beats_every_baseline_on_unseen_pairs(v100_pairs: pd.DataFrame) -> None:
    result = evaluate("interference", v100_pairs, "pair", num_threads=1, params=FAST).to_json()
    assert result["model_beats_every_baseline"], result


def test_the_model_applies_what_it_learned_only_in_the_modes_it_was_trained_on(v100_pairs: pd.DataFrame) -> None:
    model = InterferenceModel(num_boost_round=10, num_threads=1).fit(v100_pairs)  # Gavel: mode unknown
    assert model.sharing_modes_ == frozenset({""})
    time_sliced = v100_pairs.assign(sharing="time-slicing")
    predicted = model.predict_frame(time_sliced)
    # The sides without utilisation count as saturated: the time-slicing prior alone, about half each.
    a, b = side_columns_from_frame(time_sliced, "a"), side_columns_from_frame(time_sliced, "b")
    assert np.allclose(predicted, np.column_stack([time_slicing_prior(a, b), time_slicing_prior(b, a)]))
    assert np.all((predicted > 0.3) & (predicted < 0.6))
    assert not np.allclose(model.predict_frame(v100_pairs), predicted)  # unknown mode: the learned model
    retrained = InterferenceModel(num_boost_round=10, num_threads=1).fit(time_sliced)
    assert retrained.sharing_modes_ == frozenset({"time-slicing"})
    assert not np.allclose(retrained.predict_frame(time_sliced), predicted)  # learned where measured
    # A light side with 1.2 ms steps next to a heavy one waits out its slices (advisor.sharing).
    pair = [(SoloProfile("a", 32 / 1.2e-3, 32, sm_util_ratio=0.12), SoloProfile("b", 32 / 0.01, 32, sm_util_ratio=0.9))]
    assert model.predict_pairs(pair, "v100", "time-slicing")[0, 0] == pytest.approx(0.55, abs=0.05)
