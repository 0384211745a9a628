"""The compiled forest gives a row the same value alone as in a batch (the throughput model evaluates only the
distinct rows of a batch, so a row may reach the forest alone)."""

from __future__ import annotations

import lightgbm as lgb
import numpy as np

from advisor.models._forest import compile_forest


def test_a_row_alone_gets_lightgbms_value_as_in_a_batch() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 4))
    y = 2.0 * x[:, 0] + np.where(x[:, 1] > 0.3, 1.5, -0.5) + rng.normal(scale=0.1, size=500)
    params = {"objective": "regression", "verbosity": -1, "num_threads": 1, "min_data_in_leaf": 5, "seed": 0}
    booster = lgb.train(params, lgb.Dataset(x, label=y), num_boost_round=80)
    forest = compile_forest(booster.dump_model())
    assert forest is not None
    queries = rng.normal(size=(60, 4))
    expected = booster.predict(queries, num_threads=1)
    alone = np.concatenate([forest.predict(queries[i : i + 1]) for i in range(len(queries))])
    np.testing.assert_array_equal(alone, expected)
    np.testing.assert_array_equal(forest.predict(queries), expected)
