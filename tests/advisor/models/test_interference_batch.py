"""The interference model's batch path: repeated and swapped pairs are predicted once, exactly as each pair alone."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from advisor.datasets import side_columns_from_frame
from advisor.features import SideColumns, SoloProfile, interference_features, side_columns
from advisor.models import interference
from advisor.models.interference import (
    GENERAL_KEYED,
    SPECIFIC_KEYED,
    InterferenceModel,
    familiarity_weights,
    general_features,
    gpu_names,
)

COLUMNS = ("solo_throughput", "batch_size", "sm_util", "mem_bw_util", "mem_bytes", "amp")
Batch = tuple[SideColumns, SideColumns, list[str]]


@pytest.fixture(scope="module")
def loaded(v100_interference: InterferenceModel) -> InterferenceModel:
    """As the service has it: boosters read back from text and compiled (`advisor.models._forest`)."""
    return InterferenceModel.from_artifact(v100_interference.to_artifact())


@pytest.fixture(scope="module")
def batch(v100_pairs: pd.DataFrame) -> Batch:
    """500 pairs: measured ones, near and far from them, unknown batch sizes and throughputs, utilisation, other
    GPU names; every fifth pair repeats an earlier one and every seventh is an earlier one swapped."""
    rng = np.random.default_rng(7)
    n = 500
    rows = v100_pairs.iloc[rng.integers(0, len(v100_pairs), n)].reset_index(drop=True)
    a, b, gpus = side_columns_from_frame(rows, "a"), side_columns_from_frame(rows, "b"), gpu_names(rows)
    kind = np.arange(n) % 5
    scale = np.select([kind == 1, kind == 2], [1.37, 40.0], 1.0)
    a = replace(
        a,
        solo_throughput=a.solo_throughput * scale,
        batch_size=np.where(kind == 3, 0.0, a.batch_size),
        sm_util=np.where(kind == 4, rng.random(n), a.sm_util),
        mem_bytes=np.where(kind == 4, rng.random(n) * 8e9, a.mem_bytes),
    )
    b = replace(b, solo_throughput=np.where(np.arange(n) % 97 == 0, np.nan, b.solo_throughput * scale))
    names = ["v100", "Tesla V100-SXM2-16GB", "NVIDIA H100 80GB HBM3", "some unknown gpu"]
    gpus = [names[i % 4] if i % 3 == 0 else g for i, g in enumerate(gpus)]
    # Repeats and swaps of earlier pairs.
    this = {c: getattr(a, c).copy() for c in COLUMNS}
    other = {c: getattr(b, c).copy() for c in COLUMNS}
    for i in range(1, n):
        j = int(rng.integers(0, i))
        if i % 5 == 0 or i % 7 == 0:
            first, second = (this, other) if i % 5 == 0 else (other, this)
            for c in COLUMNS:
                this[c][i], other[c][i] = first[c][j], second[c][j]
            gpus[i] = gpus[j]
    return SideColumns(**this), SideColumns(**other), gpus


def _alone(model: InterferenceModel, batch: Batch) -> np.ndarray:
    a, b, gpus = batch
    return np.vstack(
        [
            model.predict_columns(
                SideColumns(*(getattr(a, c)[i : i + 1] for c in COLUMNS)),
                SideColumns(*(getattr(b, c)[i : i + 1] for c in COLUMNS)),
                gpus[i : i + 1],
            )
            for i in range(len(a))
        ]
    )


def test_the_batch_takes_every_branch_of_the_gate(v100_interference: InterferenceModel, batch: Batch) -> None:
    weight = familiarity_weights(
        v100_interference.profiles_.pair_distances(*batch), v100_interference.familiarity_scale_
    )
    assert (weight == 1).any()
    assert ((weight > 0) & (weight < 1)).any()
    assert (weight == 0).any()


@pytest.mark.parametrize("which", ["fitted", "loaded"])
def test_a_batch_with_repeats_predicts_each_pair_as_alone(
    which: str, v100_interference: InterferenceModel, loaded: InterferenceModel, batch: Batch
) -> None:
    model = v100_interference if which == "fitted" else loaded
    together = model.predict_columns(*batch)
    np.testing.assert_array_equal(together, _alone(model, batch))
    a, b, gpus = batch
    np.testing.assert_array_equal(model.predict_columns(b, a, gpus), together[:, ::-1])


def test_repeated_and_swapped_pairs_are_predicted_once(batch: Batch) -> None:
    a, b, gpus = batch
    keys = set()
    for i in range(len(a)):
        this = tuple(getattr(a, c)[i].tobytes() for c in COLUMNS)
        other = tuple(getattr(b, c)[i].tobytes() for c in COLUMNS)
        keys |= {(this, other, gpus[i]), (other, this, gpus[i])}
    rows = interference._directed_rows(a, b, gpus)
    assert len(rows) == len(keys) < 2 * len(a)
    assert (rows.swap[rows.swap] == np.arange(len(rows))).all()


def test_rows_sharing_a_hash_are_not_merged(
    loaded: InterferenceModel, batch: Batch, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = loaded.predict_columns(*batch)
    monkeypatch.setattr(interference, "_row_hashes", lambda bits: np.zeros(bits.shape[1], dtype=np.uint64))
    assert len(interference._directed_rows(*batch)) == 2 * len(batch[0])
    np.testing.assert_array_equal(loaded.predict_columns(*batch), expected)


def test_keyed_columns_depend_on_their_side_and_gpu_model_only(batch: Batch) -> None:
    """The boosters read `SPECIFIC_KEYED`/`GENERAL_KEYED` columns once per distinct side: they must not change when
    only the other side changes."""
    a, b, gpus = batch
    order = np.random.default_rng(3).permutation(len(a))
    shuffled_a = SideColumns(*(getattr(a, c)[order] for c in COLUMNS))
    shuffled_b = SideColumns(*(getattr(b, c)[order] for c in COLUMNS))
    for keyed, build in ((SPECIFIC_KEYED, lambda f: f), (GENERAL_KEYED, general_features)):
        this, other = sorted(keyed[0]), sorted(keyed[1])
        assert this
        assert other
        base = build(interference_features(a, b, gpus))
        np.testing.assert_array_equal(build(interference_features(a, shuffled_b, gpus))[:, this], base[:, this])
        np.testing.assert_array_equal(build(interference_features(shuffled_a, b, gpus))[:, other], base[:, other])
        # The rest depend on both sides: keying them would be wrong.
        rest = sorted(set(range(base.shape[1])) - keyed[0] - keyed[1])
        changed = build(interference_features(a, shuffled_b, gpus))[:, rest]
        assert not np.array_equal(changed, base[:, rest], equal_nan=True)


@pytest.mark.parametrize("below", [None, 40], ids=["sorted", "table"])
def test_numbering_gives_equal_keys_equal_numbers(below: int | None) -> None:
    keys = np.random.default_rng(5).integers(0, 40, 600)
    number, index = interference._numbered(keys, below)
    assert sorted(set(number.tolist())) == list(range(len(set(keys.tolist()))))
    np.testing.assert_array_equal(keys[index[number]], keys)
    same_key = keys[:, None] == keys[None, :]
    np.testing.assert_array_equal(number[:, None] == number[None, :], same_key)


def test_profiles_are_read_as_columns(loaded: InterferenceModel) -> None:
    pairs = [
        (SoloProfile("a", 800.0, 64, sm_util_ratio=0.9, amp=True), SoloProfile("b", 300.0)),
        (SoloProfile("c", float("nan"), 0, mem_bw_util_ratio=0.2, mem_bytes=4e9), SoloProfile("d", 5.0, 8, amp=False)),
    ]
    a = side_columns([p[0] for p in pairs])
    np.testing.assert_array_equal(a.solo_throughput, [800.0, np.nan])
    np.testing.assert_array_equal(a.batch_size, [64.0, 0.0])
    np.testing.assert_array_equal(a.sm_util, [0.9, np.nan])
    np.testing.assert_array_equal(a.mem_bw_util, [np.nan, 0.2])
    np.testing.assert_array_equal(a.mem_bytes, [np.nan, 4e9])
    np.testing.assert_array_equal(a.amp, [1.0, np.nan])
    b = side_columns([p[1] for p in pairs])
    np.testing.assert_array_equal(b.amp, [np.nan, 0.0])
    gpus = ["v100", "NVIDIA H100 80GB HBM3"]
    np.testing.assert_array_equal(loaded.predict_pairs(pairs, gpus), loaded.predict_columns(a, b, gpus))
    with pytest.raises(ValueError, match="pairs"):
        loaded.predict_pairs([(pairs[0][0],)], "v100")  # type: ignore[list-item]


def test_gpu_spellings_of_profile_pairs_share_a_code(loaded: InterferenceModel) -> None:
    names = ["Tesla V100-SXM2-16GB", "v100", "some unknown gpu", "V100", "NVIDIA H100 80GB HBM3", "v100"]
    codes = interference.GpuCodes.normalized(names, len(names))
    assert codes.names == ["v100", "some-unknown-gpu", "h100"]
    np.testing.assert_array_equal(codes.codes, [0, 0, 1, 0, 2, 0])
    one = interference.GpuCodes.normalized("Tesla V100-SXM2-16GB", 4)
    assert one.names == ["v100"]
    np.testing.assert_array_equal(one.codes, [0, 0, 0, 0])
    pairs = [(SoloProfile("a", 100.0 * (i + 1), 32), SoloProfile("b", 50.0, 0, sm_util_ratio=0.4)) for i in range(6)]
    a, b = side_columns([p[0] for p in pairs]), side_columns([p[1] for p in pairs])
    normal = [gpu_names(pd.DataFrame({"gpu_model": [g]}))[0] for g in names]
    np.testing.assert_array_equal(loaded.predict_pairs(pairs, names), loaded.predict_columns(a, b, normal))
    np.testing.assert_array_equal(loaded.predict_pairs(pairs, "V100"), loaded.predict_columns(a, b, ["v100"] * 6))
    with pytest.raises(ValueError, match="gpu_models"):
        loaded.predict_pairs(pairs, names[:5])
    with pytest.raises(ValueError, match="gpu_models"):
        loaded.predict_columns(a, b, ["v100"])
