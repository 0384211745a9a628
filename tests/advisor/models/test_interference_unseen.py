"""The interference model on workloads it was not trained on: the general part, the familiarity gate, old artifacts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.datasets import GavelData, side_columns_from_frame
from advisor.features import FloatArray, SoloProfile, interference_features, side_columns
from advisor.models import _lgbm
from advisor.models.artifact import load_artifact, save_artifact
from advisor.models.interference import (
    BLEND_GRID,
    FAMILIARITY_SCALE_GRID,
    NORM_MAX,
    NORM_MIN,
    InterferenceModel,
    familiarity_weights,
    gpu_names,
)
from advisor.models.training import evaluate
from tests.advisor.models.conftest import FAST

# Nothing like these was measured by Gavel: throughputs far from every Gavel job type on the V100.
NEW_PAIRS = [
    (
        SoloProfile("new-a", solo_throughput=3.0e4, batch_size=3),
        SoloProfile("new-b", solo_throughput=0.7, batch_size=7),
    ),
    (SoloProfile("new-c", solo_throughput=55.5, batch_size=0), SoloProfile("new-d", solo_throughput=9.9e3)),
]


def test_the_blend_is_chosen_from_the_grid_on_the_training_data(v100_interference: InterferenceModel) -> None:
    assert v100_interference.blend_weight_ in BLEND_GRID
    assert v100_interference.familiarity_scale_ in FAMILIARITY_SCALE_GRID
    assert v100_interference.check_["held_out_folds"] > 0


def test_new_workloads_are_symmetric_and_in_range(v100_interference: InterferenceModel) -> None:
    swapped = [(b, a) for a, b in NEW_PAIRS]
    for gpu in ("v100", "NVIDIA H100 80GB HBM3", "some unknown gpu"):
        ab = v100_interference.predict_pairs(NEW_PAIRS, gpu)
        ba = v100_interference.predict_pairs(swapped, gpu)
        np.testing.assert_array_equal(ab, ba[:, ::-1])
        assert ((ab >= NORM_MIN) & (ab <= NORM_MAX)).all()


def test_measured_workloads_get_the_specific_booster(
    v100_interference: InterferenceModel, v100_pairs: pd.DataFrame
) -> None:
    """A pair of profiled workloads is predicted as accurately as the single-booster model would."""
    pred = v100_interference.predict_frame(v100_pairs)
    alone = np.clip(_lgbm.predict(v100_interference.booster_, _stacked_features(v100_pairs)), NORM_MIN, NORM_MAX)
    np.testing.assert_array_equal(np.concatenate([pred[:, 0], pred[:, 1]]), alone)


def test_any_spelling_of_a_gpu_model_finds_its_profiles(
    v100_interference: InterferenceModel, v100_pairs: pd.DataFrame
) -> None:
    a, b = side_columns_from_frame(v100_pairs, "a"), side_columns_from_frame(v100_pairs, "b")
    spelled = v100_interference.predict_columns(a, b, ["Tesla V100-SXM2-16GB"] * len(v100_pairs))
    np.testing.assert_array_equal(spelled, v100_interference.predict_frame(v100_pairs))


def test_a_saved_model_predicts_new_workloads_the_same(v100_interference: InterferenceModel, tmp_path: Path) -> None:
    save_artifact(v100_interference.to_artifact(), tmp_path / "m")
    loaded = InterferenceModel.from_artifact(load_artifact(tmp_path / "m", kind="interference"))
    for gpu in ("v100", "t4"):
        np.testing.assert_array_equal(
            loaded.predict_pairs(NEW_PAIRS, gpu), v100_interference.predict_pairs(NEW_PAIRS, gpu)
        )


def test_an_artifact_saved_before_the_general_part_still_predicts(
    v100_interference: InterferenceModel, tmp_path: Path
) -> None:
    artifact = v100_interference.to_artifact()
    old = replace(
        artifact,
        state={k: artifact.state[k] for k in ("n_pairs", "norm_range", "features")},
        boosters={"interference": artifact.boosters["interference"]},
    )
    save_artifact(old, tmp_path / "old")
    loaded = InterferenceModel.from_artifact(load_artifact(tmp_path / "old", kind="interference"))
    expected = np.clip(
        _lgbm.predict(v100_interference.booster_, _profile_features(NEW_PAIRS, "v100")), NORM_MIN, NORM_MAX
    )
    got = loaded.predict_pairs(NEW_PAIRS, "v100")
    np.testing.assert_array_equal(np.concatenate([got[:, 0], got[:, 1]]), expected)


def test_without_family_columns_the_check_holds_out_workloads(v100_pairs: pd.DataFrame) -> None:
    frame = v100_pairs.drop(columns=["family_a", "family_b"])
    fitted = InterferenceModel(**FAST).fit(frame)
    assert fitted.check_["held_out_folds"] == 5


def test_too_few_workloads_to_check_uses_the_defaults(v100_pairs: pd.DataFrame) -> None:
    two = v100_pairs["workload_a"].unique()[:2]
    frame = v100_pairs[v100_pairs["workload_a"].isin(two) & v100_pairs["workload_b"].isin(two)]
    fitted = InterferenceModel(**FAST).fit(pd.concat([frame] * 10, ignore_index=True))
    assert fitted.check_ == {"held_out_folds": 0}
    out = fitted.predict_pairs(NEW_PAIRS, "v100")
    assert ((out >= NORM_MIN) & (out <= NORM_MAX)).all()


def test_familiarity_weight_falls_from_one_to_zero() -> None:
    distance = np.array([0.0, 1.0, 2.0, 4.0, np.inf])
    np.testing.assert_array_equal(familiarity_weights(distance, 2.0), [1.0, 0.5, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(familiarity_weights(distance, 0.0), [1.0, 0.0, 0.0, 0.0, 0.0])


def test_model_beats_every_baseline_on_an_unseen_job_family(gavel: GavelData) -> None:
    """Leave one job family out on all of Gavel's 1-GPU pairs (docs/models.md)."""
    result = evaluate("interference", gavel.colocations, "family", num_threads=1, params=FAST).to_json()
    assert result["model_beats_every_baseline"], result


def _stacked_features(frame: pd.DataFrame) -> FloatArray:
    a, b, gpus = side_columns_from_frame(frame, "a"), side_columns_from_frame(frame, "b"), gpu_names(frame)
    return np.vstack([interference_features(a, b, gpus), interference_features(b, a, gpus)])


def _profile_features(pairs: list[tuple[SoloProfile, SoloProfile]], gpu: str) -> FloatArray:
    a, b = side_columns([p[0] for p in pairs]), side_columns([p[1] for p in pairs])
    gpus = [gpu] * len(pairs)
    return np.vstack([interference_features(a, b, gpus), interference_features(b, a, gpus)])
