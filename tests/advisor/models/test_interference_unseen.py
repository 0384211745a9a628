"""The interference model on workloads it was not trained on: the physical part, identity offsets, probes, artifacts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.datasets import GavelData, pair_families, workload_family
from advisor.features import SoloProfile
from advisor.models.artifact import ArtifactError, load_artifact, save_artifact
from advisor.models.interference import (
    ALPHA_GRID,
    NEIGHBOUR_GRID,
    NORM_MIN,
    SHRINKAGE_GRID,
    UNMEASURED_WEIGHTS,
    InterferenceModel,
    reference_workloads,
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


def test_the_knobs_are_chosen_from_the_grids_by_leaving_families_out(v100_interference: InterferenceModel) -> None:
    assert v100_interference.alpha_ in ALPHA_GRID
    assert v100_interference.shrinkage_ in SHRINKAGE_GRID
    assert v100_interference.neighbour_weight_ in NEIGHBOUR_GRID
    assert v100_interference.unmeasured_weight_ in UNMEASURED_WEIGHTS
    assert v100_interference.check_["held_out_families"] == 7


def test_an_untrustworthy_selection_leaves_new_workloads_to_the_heuristic(
    v100_interference: InterferenceModel, v100_pairs: pd.DataFrame
) -> None:
    """On Gavel's V100 alone, knobs chosen without one of the families lose to the heuristic on it: a new workload
    then gets exactly the heuristic, while measured workloads keep their offsets."""
    assert v100_interference.check_["selection_holds_at_weight_1"] is False
    assert v100_interference.unmeasured_weight_ == 0.0
    # Gavel has no utilisation: the heuristic is an even 0.5 time-slice.
    np.testing.assert_array_equal(v100_interference.predict_pairs(NEW_PAIRS, "v100"), 0.5)
    light = SoloProfile("new-light", 100.0, 32, sm_util_ratio=0.2)
    heavy = SoloProfile("new-heavy", 100.0, 32, sm_util_ratio=0.9)
    np.testing.assert_allclose(v100_interference.predict_pairs([(light, heavy)], "v100"), [[1 / 1.1, 1 / 1.1]])
    # A measured workload next to a new one: the measured side moves off the heuristic, the new side does not.
    known = v100_pairs.iloc[:20].assign(workload_b="never-seen")
    predicted = v100_interference.predict_frame(known)
    np.testing.assert_array_equal(predicted[:, 1], 0.5)
    assert np.abs(predicted[:, 0] - 0.5).max() > 0.05


def test_new_workloads_are_symmetric_and_in_range(v100_interference: InterferenceModel) -> None:
    swapped = [(b, a) for a, b in NEW_PAIRS]
    for gpu in ("v100", "NVIDIA H100 80GB HBM3", "some unknown gpu"):
        ab = v100_interference.predict_pairs(NEW_PAIRS, gpu)
        ba = v100_interference.predict_pairs(swapped, gpu)
        np.testing.assert_array_equal(ab, ba[:, ::-1])
        assert ((ab >= NORM_MIN) & (ab <= v100_interference.norm_max_)).all()


def test_a_heavier_partner_never_raises_the_prediction(v100_interference: InterferenceModel) -> None:
    me = SoloProfile("me", 500.0, 64, sm_util_ratio=0.5, mem_bw_util_ratio=0.4)
    for gpu in ("v100", "NVIDIA H100 80GB HBM3"):
        partners = [
            SoloProfile("partner", 300.0, 32, sm_util_ratio=float(u), mem_bw_util_ratio=float(u))
            for u in np.linspace(0.0, 1.0, 21)
        ]
        mine = v100_interference.predict_pairs([(me, p) for p in partners], gpu)[:, 0]
        assert (np.diff(mine) <= 0).all(), mine


def test_identity_counts_only_for_measured_workloads(
    v100_interference: InterferenceModel, v100_pairs: pd.DataFrame
) -> None:
    """Renaming measured workloads to names never seen gives the profile-only prediction; their own names move it."""
    renamed = v100_pairs.assign(workload_a="never-seen-1", workload_b="never-seen-2")
    by_profile = v100_interference.predict_frame(renamed)
    np.testing.assert_array_equal(by_profile, v100_interference.predict_frame(renamed.drop(columns=[])))
    measured = v100_interference.predict_frame(v100_pairs)
    assert not np.allclose(measured, by_profile)
    truth = v100_pairs["coloc_throughput_a"] / v100_pairs["solo_throughput_a"]
    assert np.mean(np.abs(measured[:, 0] - truth)) < np.mean(np.abs(by_profile[:, 0] - truth))


def test_probe_co_runs_move_a_new_workload_toward_its_measurements(v100_pairs: pd.DataFrame) -> None:
    """A new workload that suffers far more than its profile says: three probe pairs teach the model so."""
    fam_a, fam_b = pair_families(v100_pairs)
    held = (fam_a == "resnet-50") | (fam_b == "resnet-50")
    victim = "ResNet-50 (batch size 64)"
    frame = v100_pairs.copy()
    hit_a = frame["workload_a"] == victim
    hit_b = frame["workload_b"] == victim
    frame.loc[hit_a, "coloc_throughput_a"] = 0.05 * frame.loc[hit_a, "solo_throughput_a"]
    frame.loc[hit_b, "coloc_throughput_b"] = 0.05 * frame.loc[hit_b, "solo_throughput_b"]
    refs = reference_workloads(frame[~held], 3, excluded_families={"resnet-50"})
    mine = (hit_a | hit_b).to_numpy()
    probes = mine & (frame["workload_a"].isin(refs) | frame["workload_b"].isin(refs)).to_numpy()
    test = frame[mine & ~probes & ~(held & ~mine)]
    test = test[test["workload_a"] == victim]
    without = InterferenceModel(**FAST).fit(frame[~held]).predict_frame(test)[:, 0]
    with_probes = InterferenceModel(**FAST).fit(frame[~held | probes]).predict_frame(test)[:, 0]
    assert np.mean(with_probes) < np.mean(without) - 0.1


def test_consistent_workloads_let_three_probe_pairs_count_almost_fully(v100_pairs: pd.DataFrame) -> None:
    """Where each workload's normalised throughput is its own, whatever the partner, three probe pairs are enough to
    know a new workload: the check then picks the lightest shrinkage of its offsets, which keeps ~90 % of them."""
    names = sorted(set(v100_pairs["workload_a"]) | set(v100_pairs["workload_b"]))
    own = dict(zip(names, np.linspace(0.2, 0.9, len(names)), strict=True))
    frame = v100_pairs.assign(
        coloc_throughput_a=v100_pairs["solo_throughput_a"] * v100_pairs["workload_a"].map(own),
        coloc_throughput_b=v100_pairs["solo_throughput_b"] * v100_pairs["workload_b"].map(own),
    )
    model = InterferenceModel(**FAST).fit(frame)
    assert model.shrinkage_ == min(SHRINKAGE_GRID)
    assert 3 / (3 + model.shrinkage_) >= 0.9  # the share of its offsets that three pairs give a new workload
    assert model.check_["mae_3_probes"] < model.check_["mae_no_probes"]


def test_clipping_at_one_is_decided_from_the_data(v100_pairs: pd.DataFrame) -> None:
    faster = v100_pairs.assign(coloc_throughput_a=1.2 * v100_pairs["solo_throughput_a"])
    assert InterferenceModel(**FAST).fit(faster).norm_max_ > 1.0


def test_a_saved_model_predicts_the_same(
    v100_interference: InterferenceModel, v100_pairs: pd.DataFrame, tmp_path: Path
) -> None:
    save_artifact(v100_interference.to_artifact(), tmp_path / "m")
    loaded = InterferenceModel.from_artifact(load_artifact(tmp_path / "m", kind="interference"))
    np.testing.assert_array_equal(loaded.predict_frame(v100_pairs), v100_interference.predict_frame(v100_pairs))
    for gpu in ("v100", "t4"):
        np.testing.assert_array_equal(
            loaded.predict_pairs(NEW_PAIRS, gpu), v100_interference.predict_pairs(NEW_PAIRS, gpu)
        )


def test_an_artifact_of_the_earlier_model_is_refused_with_a_reason(
    v100_interference: InterferenceModel, tmp_path: Path
) -> None:
    artifact = v100_interference.to_artifact()
    old = replace(artifact, state={k: artifact.state[k] for k in ("n_pairs", "norm_range", "features")})
    save_artifact(old, tmp_path / "old")
    with pytest.raises(ArtifactError, match="retrain"):
        InterferenceModel.from_artifact(load_artifact(tmp_path / "old", kind="interference"))


def test_an_artifact_saved_before_the_selection_check_still_serves(
    v100_interference: InterferenceModel, v100_pairs: pd.DataFrame, tmp_path: Path
) -> None:
    """Without `unmeasured_weight` (an earlier artifact) every side moves all the way to the model, as it did then;
    measured pairs are predicted as before."""
    artifact = v100_interference.to_artifact()
    state = {k: v for k, v in artifact.state.items() if k not in ("unmeasured_weight", "measured_workloads")}
    save_artifact(replace(artifact, state=state), tmp_path / "earlier")
    loaded = InterferenceModel.from_artifact(load_artifact(tmp_path / "earlier", kind="interference"))
    assert loaded.unmeasured_weight_ == 1.0
    np.testing.assert_array_equal(loaded.predict_frame(v100_pairs), v100_interference.predict_frame(v100_pairs))


def test_too_few_families_to_check_uses_the_defaults(v100_pairs: pd.DataFrame) -> None:
    two = v100_pairs["workload_a"].unique()[:2]
    frame = v100_pairs[v100_pairs["workload_a"].isin(two) & v100_pairs["workload_b"].isin(two)]
    fitted = InterferenceModel(**FAST).fit(pd.concat([frame] * 10, ignore_index=True))
    assert fitted.check_ == {"held_out_families": 0}
    out = fitted.predict_pairs(NEW_PAIRS, "v100")
    assert ((out >= NORM_MIN) & (out <= fitted.norm_max_)).all()


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("resnet50-bs64-amp", "resnet50"),
        ("ResNet-18 (batch size 16)", "resnet-18"),
        ("bert_large_b16", "bert-large"),
        ("gpt2_bs8_fp16", "gpt2"),
        ("vgg16 bs=128", "vgg16"),
        ("A3C", "a3c"),
    ],
)
def test_families_are_derived_from_workload_names(name: str, family: str) -> None:
    assert workload_family(name) == family


def test_holding_out_a_family_scores_only_its_side(gavel: GavelData) -> None:
    """Without family columns (derived from the names), the held-out side only; at or below the heuristic on every
    family of one GPU type (the V100, where a grid point chosen on the other families used to lose on ResNet-50)."""
    v100 = gavel.colocations[gavel.colocations["gpu_model"] == "v100"].reset_index(drop=True)
    frame = v100.drop(columns=["family_a", "family_b"])
    result = evaluate("interference", frame, "family", num_threads=1).to_json()
    assert result["scored"] == "held-out side"
    fam_a, fam_b = pair_families(frame)
    for fold in result["folds"]:
        family = fold["fold"].removeprefix("family=")
        assert fold["scored_sides"] == int(np.sum(fam_a == family) + np.sum(fam_b == family))
        # The fold's validation figures come from its training families alone.
        inner = fold["inner_check"]
        assert inner["held_out_families"] == len(set(fam_a) | set(fam_b)) - 1
        assert inner["mae_no_probes"] <= inner["heuristic_mae_no_probes"]
    assert result["model_at_or_below_util_sum_on_every_fold"], result


def test_probes_move_reference_pairs_into_training(v100_pairs: pd.DataFrame) -> None:
    plain = evaluate("interference", v100_pairs, "family", num_threads=1).to_json()
    probed = evaluate("interference", v100_pairs, "family", probes=3, num_threads=1).to_json()
    assert probed["probes"] == 3
    for before, after in zip(plain["folds"], probed["folds"], strict=True):
        refs = probed["reference_workloads"][after["fold"]]
        assert len(refs) == 3
        assert all(workload_family(r) != after["fold"].removeprefix("family=") for r in refs)
        assert after["test_rows"] < before["test_rows"]
        assert after["train_rows"] - before["train_rows"] == before["test_rows"] - after["test_rows"]
    assert probed["model"]["mae"] < plain["model"]["mae"]
