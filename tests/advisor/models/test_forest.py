"""The compiled forest predicts what LightGBM predicts, missing values included, and declines what it cannot do."""

from __future__ import annotations

from typing import Any

import lightgbm as lgb
import numpy as np
import pytest

from advisor.models import _lgbm
from advisor.models._forest import CompiledForest, FeatureTable, RowGroup, compile_forest


def _data(rows: int, seed: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 6))
    x[rng.random(x.shape) < 0.15] = np.nan
    x[rng.random(x.shape) < 0.1] = 0.0
    x[:, 5] = rng.integers(0, 4, rows)
    y = np.nan_to_num(x[:, 0]) * 2 + np.isnan(x[:, 1]) + np.where(np.nan_to_num(x[:, 2]) > 0.3, 1.5, -0.5)
    return x, y + rng.normal(scale=0.1, size=rows)


def _queries(seed: int) -> np.ndarray[Any, Any]:
    x, _ = _data(3000, seed)
    x[:5] = [np.inf, -np.inf, 0.0, -0.0, np.nan, 1.0]
    return x


def _train(params: dict[str, Any], rounds: int = 40) -> lgb.Booster:
    x, y = _data(2000, 0)
    base = {"objective": "regression", "verbosity": -1, "num_threads": 1, "min_data_in_leaf": 5, "seed": 0}
    return lgb.train({**base, **params}, lgb.Dataset(x, label=y), num_boost_round=rounds)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"objective": "regression_l1", "num_leaves": 31},
        {"objective": "quantile", "alpha": 0.9},
        {"num_leaves": 63, "min_data_in_leaf": 2},
        {"zero_as_missing": True},
        {"use_missing": False},
        {"max_depth": 1},
    ],
    ids=["l2", "l1", "quantile", "63-leaves", "zero-as-missing", "no-missing", "stumps"],
)
def test_matches_lightgbm(params: dict[str, Any]) -> None:
    booster = _train(params)
    forest = compile_forest(booster.dump_model())
    assert forest is not None
    x = _queries(1)
    # Bit for bit: the trees' values are added in LightGBM's order.
    np.testing.assert_array_equal(forest.predict(x), booster.predict(x, num_threads=1))
    loaded = _lgbm.from_text(_lgbm.to_text(booster))
    assert _lgbm.compiled(loaded) is not None
    np.testing.assert_array_equal(_lgbm.predict(loaded, x), booster.predict(x, num_threads=1))


def test_constant_model_and_empty_batch() -> None:
    x = np.ones((50, 2))
    booster = lgb.train({"objective": "regression", "verbosity": -1}, lgb.Dataset(x, label=np.full(50, 3.0)), 5)
    forest = compile_forest(booster.dump_model())
    assert forest is not None
    np.testing.assert_array_equal(forest.predict(np.zeros((4, 2))), booster.predict(np.zeros((4, 2))))
    assert forest.predict(np.zeros((0, 2))).shape == (0,)


def test_wrong_width_names_the_shape() -> None:
    forest = compile_forest(_train({}).dump_model())
    assert forest is not None
    with pytest.raises(ValueError, match=r"expected \(n, 6\)"):
        forest.predict(np.zeros((3, 5)))


@pytest.mark.parametrize(
    "params",
    [
        {"objective": "binary"},
        {"objective": "regression", "reg_sqrt": True},
        {"num_leaves": 80, "min_data_in_leaf": 2},
        {"linear_tree": True},
    ],
    ids=["output-transform", "sqrt-transform", "too-many-leaves", "linear"],
)
def test_models_it_cannot_reproduce_are_left_to_lightgbm(params: dict[str, Any]) -> None:
    if params.get("objective") == "binary":
        x, y = _data(2000, 0)
        booster = lgb.train({**params, "verbosity": -1}, lgb.Dataset(x, label=(y > 0).astype(float)), 10)
    elif params.get("linear_tree"):
        x, y = _data(2000, 0)
        booster = lgb.train({**params, "verbosity": -1}, lgb.Dataset(np.nan_to_num(x), label=y), 10)
    else:
        booster = _train(params, rounds=10)
    assert compile_forest(booster.dump_model()) is None
    assert _lgbm.compiled(booster) is None
    x = np.nan_to_num(_queries(2)) if params.get("linear_tree") else _queries(2)
    np.testing.assert_allclose(_lgbm.predict(booster, x), booster.predict(x, num_threads=1))


def test_categorical_splits_are_left_to_lightgbm() -> None:
    x, y = _data(2000, 0)
    data = lgb.Dataset(np.nan_to_num(x), label=y + 3.0 * (x[:, 5] == 2), categorical_feature=[5])
    booster = lgb.train({"objective": "regression", "verbosity": -1, "min_data_per_group": 5}, data, 10)
    assert any(t["num_cat"] > 0 for t in booster.dump_model()["tree_info"])
    assert compile_forest(booster.dump_model()) is None


@pytest.mark.parametrize("num_leaves", [2, 8, 12, 31, 63])
def test_masks_are_the_smallest_words_that_hold_the_leaves(num_leaves: int) -> None:
    booster = _train({"num_leaves": num_leaves, "min_data_in_leaf": 2}, rounds=20)
    dump = booster.dump_model()
    forest = compile_forest(dump)
    assert forest is not None
    leaves = max(t["num_leaves"] for t in dump["tree_info"])
    bits = next(w for w in (8, 16, 32, 64) if leaves <= w)
    assert forest.leaf_slots == bits
    assert all(t.masks.dtype.itemsize * 8 == bits for t in forest.tables)
    assert forest.slot_offsets.dtype == np.uint16
    x = _queries(3)
    np.testing.assert_array_equal(forest.predict(x), booster.predict(x, num_threads=1))


def _keyed_queries(rows: int, seed: int) -> tuple[np.ndarray[Any, Any], list[RowGroup]]:
    """Queries whose columns 0-1 are a function of one key per row and columns 2-3 of another (values from
    `_queries`, NaN, ±0 and ±inf included); columns 4-5 vary by row. Key 3 of each is used by no row."""
    x = _queries(seed)[:rows].copy()
    rng = np.random.default_rng(seed)
    table = _queries(seed + 1)[:12]
    groups = []
    for columns in ((0, 1), (2, 3)):
        codes = rng.choice(np.array([0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11]), rows).astype(np.intp)
        x[:, columns] = table[codes][:, columns]
        # Any row with the key will do; key 3 has none, so any row at all.
        key_rows = np.zeros(12, dtype=np.intp)
        key_rows[codes[::-1]] = np.arange(rows)[::-1]
        groups.append(RowGroup(frozenset(columns), codes, key_rows))
    return x, groups


@pytest.mark.parametrize("rows", [1, 7, 3000])
def test_row_groups_give_lightgbms_values(rows: int) -> None:
    booster = _train({"zero_as_missing": True})
    forest = compile_forest(booster.dump_model())
    assert forest is not None
    x, groups = _keyed_queries(rows, 4)
    expected = booster.predict(x, num_threads=1)
    np.testing.assert_array_equal(forest.predict(x, groups), expected)
    np.testing.assert_array_equal(forest.predict(x, groups[:1]), expected)
    loaded = _lgbm.from_text(_lgbm.to_text(booster))
    np.testing.assert_array_equal(_lgbm.predict(loaded, x, groups), expected)


def test_row_groups_must_fit_the_batch() -> None:
    forest = compile_forest(_train({}).dump_model())
    assert forest is not None
    x, groups = _keyed_queries(50, 5)
    with pytest.raises(ValueError, match="expected 49 codes"):
        forest.predict(x[:49], groups)
    overlapping = RowGroup(frozenset({1, 2}), groups[0].codes, groups[0].rows)
    with pytest.raises(ValueError, match="more than one group"):
        forest.predict(x, [*groups, overlapping])


def test_wide_forests_index_their_leaves_with_32_bits() -> None:
    """1 + 2,100 × 32 leaf values are more than 16-bit indices reach (a hand-built forest: one split per tree)."""
    trees, slots = 2100, 32
    values = np.concatenate([[0.0], np.random.default_rng(6).normal(size=trees * slots)])
    # Rows: at most the threshold (leaf 0 left), above it (leaf 1), missing (leaf 2), zero as missing (unused).
    masks = np.array([[1] * trees, [2] * trees, [4] * trees, [4] * trees], dtype=np.uint32)
    table = FeatureTable(feature=0, thresholds=np.array([0.5, np.inf]), masks=masks, has_zero_rule=False)
    forest = CompiledForest(n_features=1, n_trees=trees, tables=(table,), leaf_slots=slots, leaf_values=values)
    assert forest.slot_offsets.dtype == np.uint32
    expected = [np.add.accumulate(values[1 + leaf :: slots])[-1] for leaf in (0, 1, 2)]
    np.testing.assert_array_equal(forest.predict(np.array([[0.0], [1.0], [np.nan]])), expected)
