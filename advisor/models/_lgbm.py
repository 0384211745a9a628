"""The one module that talks to LightGBM: training with our fixed defaults, fast prediction, text serialisation.

Artifacts are LightGBM's own text format (`Booster.model_to_string`), never pickles, so a model file can be read,
diffed and loaded by any LightGBM version that understands the format.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import lightgbm as lgb
import numpy as np

from advisor.features import FloatArray
from advisor.models._forest import CompiledForest, RowGroup, compile_forest

# The models default to one thread, and below this many rows a fit uses one whatever was asked: LightGBM's OpenMP
# threads spin while they wait, and on a busy machine (or a CPU-limited pod) two threads made fits 5-40x slower.
MIN_ROWS_PER_EXTRA_THREAD = 20_000


@dataclass(kw_only=True, eq=False)
class BoostedEstimator:
    """The LightGBM hyperparameters every model takes: keyword-only and stored as given (scikit-learn conventions).

    Each model is a dataclass subclass that overrides the defaults suiting its data; fitted attributes end in `_`
    and are set by `fit`, never here.
    """

    num_boost_round: int = 100
    learning_rate: float = 0.1
    num_leaves: int = 31
    min_data_in_leaf: int = 20
    num_threads: int = 1
    seed: int = 0

    def get_params(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def train_booster(
        self, features: FloatArray, target: FloatArray, *, feature_names: Sequence[str], objective: str
    ) -> lgb.Booster:
        """One booster fitted with this estimator's hyperparameters."""
        return train_booster(features, target, feature_names=feature_names, objective=objective, **self.get_params())


def train_booster(
    features: FloatArray,
    target: FloatArray,
    *,
    feature_names: Sequence[str],
    objective: str,
    num_boost_round: int,
    learning_rate: float,
    num_leaves: int,
    min_data_in_leaf: int,
    num_threads: int,
    seed: int,
    extra: dict[str, Any] | None = None,
) -> lgb.Booster:
    """Fit one booster; deterministic for a given seed and thread count."""
    params: dict[str, Any] = {
        "objective": objective,
        "learning_rate": learning_rate,
        "num_leaves": num_leaves,
        "min_data_in_leaf": min(min_data_in_leaf, max(1, len(target) // 4)),
        "num_threads": num_threads if len(target) >= MIN_ROWS_PER_EXTRA_THREAD else 1,
        "seed": seed,
        "deterministic": True,
        "force_row_wise": True,
        "feature_fraction": 0.9,
        "bagging_fraction": 0.9,
        "bagging_freq": 1,
        "verbosity": -1,
        **(extra or {}),
    }
    data = lgb.Dataset(features, label=target, feature_name=list(feature_names), free_raw_data=True)
    return lgb.train(params, data, num_boost_round=num_boost_round)


# Boosters compiled for `predict` (None: LightGBM predicts that model itself). Compiling costs ~0.05-0.2 s, more than
# it saves on a one-off prediction, so only boosters that will answer many requests are compiled: those loaded for
# serving (`from_text`) or passed to `compiled` explicitly. Training-time predictions go to LightGBM.
_COMPILED: weakref.WeakKeyDictionary[lgb.Booster, CompiledForest | None] = weakref.WeakKeyDictionary()
_COMPILED_LOCK = threading.Lock()


def compiled(booster: lgb.Booster) -> CompiledForest | None:
    """Compile the booster for `predict` (once; kept as long as the booster lives) and return its forest."""
    with _COMPILED_LOCK:
        if booster not in _COMPILED:
            _COMPILED[booster] = compile_forest(booster.dump_model())
        return _COMPILED[booster]


def predict(booster: lgb.Booster, features: FloatArray, groups: Sequence[RowGroup] = ()) -> FloatArray:
    """Prediction on a float64 matrix: the scorer's hot path (no pandas, no threads).

    A compiled booster (see `compiled`) is evaluated by its `CompiledForest` (the same values, 3-4× faster on 1,000
    rows; `groups` name columns that repeat across rows, see `RowGroup`); any other by LightGBM with one thread.
    """
    forest = _COMPILED.get(booster)
    if forest is not None:
        return forest.predict(np.asarray(features, dtype=np.float64), groups)
    result: FloatArray = np.asarray(booster.predict(features, num_threads=1, validate_features=False), dtype=np.float64)
    return result


def to_text(booster: lgb.Booster) -> str:
    text: str = booster.model_to_string()
    return text


def from_text(text: str) -> lgb.Booster:
    """Load a booster and compile it for `predict` now, so that the first request after loading does not pay for it."""
    booster = lgb.Booster(model_str=text)
    compiled(booster)
    return booster
