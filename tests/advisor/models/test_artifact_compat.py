"""A model directory saved by an earlier build still loads and predicts the same numbers.

`data/interference-artifact/` is an interference model (8 boosting rounds on the bundled Gavel V100 pairs) saved by
the tree at commit 5d6f09d, before `advisor/models/interference.py` was split into modules;
`data/interference-artifact-predictions.json` is what that build predicted for every 7th pair (the first 12). The
registry keeps such directories across upgrades, so a refactor must read them back to the same bits.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from advisor.models.interference import InterferenceModel
from advisor.models.registry import load_model

DATA = Path(__file__).resolve().parent / "data"


def _probe_pairs(v100_pairs: pd.DataFrame) -> pd.DataFrame:
    return v100_pairs.iloc[::7].head(12).reset_index(drop=True)


def test_an_interference_artifact_from_before_the_split_predicts_the_same_bits(v100_pairs: pd.DataFrame) -> None:
    expected = json.loads((DATA / "interference-artifact-predictions.json").read_text())
    model = load_model(DATA / "interference-artifact", kind="interference")
    assert isinstance(model, InterferenceModel)
    predicted = model.predict_frame(_probe_pairs(v100_pairs))
    assert predicted.tolist() == expected


def test_the_artifact_saves_back_to_the_same_state(v100_pairs: pd.DataFrame) -> None:
    """Loaded through the class's old import path and saved again, nothing of the fitted state is lost or changed."""
    meta = json.loads((DATA / "interference-artifact" / "meta.json").read_text())
    model = load_model(DATA / "interference-artifact", kind="interference")
    assert isinstance(model, InterferenceModel)
    again = InterferenceModel.from_artifact(model.to_artifact())
    assert json.loads(json.dumps(again.to_artifact().state)) == meta["state"]
    assert (
        again.predict_frame(_probe_pairs(v100_pairs)).tolist() == model.predict_frame(_probe_pairs(v100_pairs)).tolist()
    )
