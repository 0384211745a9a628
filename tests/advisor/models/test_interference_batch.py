"""The interference model's batch path: repeated and swapped pairs are predicted once, exactly as each pair alone."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from advisor.datasets import side_columns_from_frame
from advisor.features import SideColumns
from advisor.models import interference
from advisor.models.interference import InterferenceModel, familiarity_weights, gpu_names

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
