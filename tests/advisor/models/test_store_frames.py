"""Store rows → the models' frames: results whose repeats spread too far are left out unless asked for."""

from __future__ import annotations

from dataclasses import replace

from advisor.datasets import colocations_frame, throughputs_frame
from profiler.records import ColocationRecord, ProfileRecord


def stored_pair(workload_b: str, *, flagged: bool) -> ColocationRecord:
    """A time-sliced H100 pair as trial runs store it; `flagged` when its repeats spread too far."""
    return ColocationRecord(
        gpu_model="NVIDIA H100 80GB HBM3",
        workload_a="cnn-bs64",
        workload_b=workload_b,
        solo_throughput_a=100.0,
        solo_throughput_b=50.0,
        coloc_throughput_a=50.0,
        coloc_throughput_b=25.0,
        sharing="time-slicing",
        repeats=3,
        spread_ratio=0.4 if flagged else 0.05,
        flagged=flagged,
    )


def test_flagged_colocations_are_left_out_of_training_unless_asked_for() -> None:
    records = [stored_pair("lstm-bs20", flagged=False), stored_pair("recommender-bs256", flagged=True)]
    assert list(colocations_frame(records)["workload_b"]) == ["lstm-bs20"]
    assert sorted(colocations_frame(records, include_flagged=True)["workload_b"]) == ["lstm-bs20", "recommender-bs256"]


def test_flagged_trial_profiles_are_left_out_of_training_unless_asked_for() -> None:
    steady = ProfileRecord(workload="cnn-bs64", gpu_model="H100", throughput_samples_per_s=100.0, batch_size=64)
    noisy = ProfileRecord(
        workload="lstm-bs20", gpu_model="H100", throughput_samples_per_s=10.0, batch_size=20, extra={"flagged": True}
    )
    assert list(throughputs_frame([steady, noisy])["workload"]) == ["cnn-bs64"]
    assert len(throughputs_frame([steady, noisy], include_flagged=True)) == 2


def test_store_colocations_reach_the_models_with_their_sharing_mode_and_utilisation() -> None:
    pair = stored_pair("lstm-bs20", flagged=False)
    frame = colocations_frame([replace(pair, sm_util_a=0.9, sm_util_b=0.12)])
    assert list(frame["sharing"]) == ["time-slicing"]
    assert list(frame["sm_util_a"]) == [0.9]
    assert list(frame["sm_util_b"]) == [0.12]
