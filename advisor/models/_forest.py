"""Fast batch prediction of a LightGBM model: its trees compiled to bit-mask tables evaluated with numpy.

LightGBM walks every tree node by node for every row, about 5-10 ns a node, and a call costs ~0.2 ms before the
first tree: an 80-tree model took 3.5 ms for 1,000 rows, above the scorer's 2 ms budget. Here the trees are
evaluated the QuickScorer way (Lucchese et al., SIGIR'15), feature by feature instead of node by node. Leaves are
numbered left to right and each tree keeps a bit mask of the leaves a row can still reach; a split that sends the
row right removes the leaves of its left subtree. All splits on one feature are sorted by threshold, so the splits
a value goes right at are a prefix of that order, and the AND of their masks is precomputed per prefix: one
`searchsorted` and one table lookup per feature give every tree's mask for every row at once, and each row's leaf in
a tree is the lowest bit left. The result equals LightGBM's prediction bit for bit (leaf values are summed in its
order), missing-value rules included (`MissingType` None / Zero / NaN with the default direction). Models this does
not cover — categorical or linear trees, more than 64 leaves, several trees per iteration, random-forest averaging,
an objective with an output transform — are left to LightGBM (`compile_forest` returns None).

A caller that knows some columns repeat across rows (the interference model's features of one side of a pair are the
same in every pair with that workload on that GPU) passes them as `RowGroup`s: their splits are evaluated once per
distinct key and each row takes its key's mask, instead of one `searchsorted` per column over every row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from advisor.features import FloatArray

# LightGBM's kZeroThreshold: |x| at or below this counts as zero for the "Zero" missing type.
ZERO_THRESHOLD = 1e-35
MAX_LEAVES = 64
# Objectives whose prediction is the raw sum of the trees' leaf values.
IDENTITY_OBJECTIVES = frozenset({"regression", "regression_l1", "huber", "fair", "quantile", "mape"})

Masks = npt.NDArray[np.unsignedinteger[Any]]
Codes = npt.NDArray[np.intp]
# Mask words by leaves per tree: the smallest that holds every tree's leaves.
WORDS: tuple[tuple[int, type[np.unsignedinteger[Any]]], ...] = (
    (8, np.uint8),
    (16, np.uint16),
    (32, np.uint32),
    (64, np.uint64),
)
# Rows evaluated together: the chunk's masks (rows × trees words, twice) should stay in a core's L2 cache; on a
# 512 KiB L2, 1,000 rows of an 80-tree model at once took 2.5 ms, in chunks of 500 rows 1.0 ms.
CHUNK_WORDS = 40_960
MIN_CHUNK_ROWS = 64


@dataclass(frozen=True)
class FeatureTable:
    """The splits of one feature: sorted thresholds and, per prefix, every tree's mask of still reachable leaves.

    Row `p` of `masks` (p = 0..k) holds the AND over the `p` smallest thresholds' splits; row k+1 is for a missing
    value (NaN), row k+2 for a zero where some split treats zero as missing (`has_zero_rule`). `thresholds` ends
    with +inf, so `searchsorted` puts a finite value on rows 0..k and NaN on row k+1.
    """

    feature: int
    thresholds: FloatArray
    masks: Masks
    has_zero_rule: bool


@dataclass(frozen=True)
class RowGroup:
    """Columns whose values are a function of a key that many rows share (given by the caller, not checked).

    `codes[i]` is row i's key, 0..k-1; `rows[key]` is a row with that key, or any row when no row has it. Every
    row with a given key has, in each of `columns`, the same value as row `rows[key]` (any NaN for a NaN).
    """

    columns: frozenset[int]
    codes: Codes
    rows: Codes


@dataclass(frozen=True)
class CompiledForest:
    """A LightGBM model as per-feature mask tables plus each tree's leaf values, padded to `leaf_slots` a tree.

    `leaf_values[1 + t * leaf_slots + leaf]` is the value of a tree's leaf (entry 0 is unused: a row's popcount in
    `_leaf_sums` is leaf + 1); masks are the smallest words (8 to 64 bits) that hold every tree's leaves.
    """

    n_features: int
    n_trees: int
    tables: tuple[FeatureTable, ...]
    leaf_slots: int
    leaf_values: FloatArray

    def predict(self, features: FloatArray, groups: Sequence[RowGroup] = ()) -> FloatArray:
        """The model's prediction for each row of `features` (n × n_features, float64).

        The splits on a column of one of `groups` are evaluated on the group's key rows only; the result is the same
        as without the groups as long as their promise holds (columns must not be in two groups).
        """
        if features.ndim != 2 or features.shape[1] != self.n_features:
            raise ValueError(f"features: expected (n, {self.n_features}), got {features.shape}")
        n = features.shape[0]
        for group in groups:
            if group.codes.shape != (n,):
                raise ValueError(f"groups: expected {n} codes, got {group.codes.shape}")
        if len({c for g in groups for c in g.columns}) < sum(len(g.columns) for g in groups):
            raise ValueError("groups: a column is in more than one group")
        keyed = []
        per_row = list(self.tables)
        for group in groups:
            tables = [t for t in per_row if t.feature in group.columns]
            if not tables or len(group.rows) >= n:  # no fewer keys than rows: nothing to save
                continue
            masks = self._reach(_columns(features[group.rows], tables), tables, [])
            if masks is not None:
                keyed.append((masks, group.codes))
                per_row = [t for t in per_row if t.feature not in group.columns]
        columns = _columns(features, per_row)
        chunk = max(MIN_CHUNK_ROWS, CHUNK_WORDS // self.n_trees)
        if n <= chunk:
            return self._leaf_sums(self._reach(columns, per_row, keyed), n)
        return np.concatenate(
            [
                self._leaf_sums(
                    self._reach(
                        {f: c[i : i + chunk] for f, c in columns.items()},
                        per_row,
                        [(m, c[i : i + chunk]) for m, c in keyed],
                    ),
                    min(chunk, n - i),
                )
                for i in range(0, n, chunk)
            ]
        )

    @staticmethod
    def _reach(
        columns: dict[int, FloatArray], tables: Sequence[FeatureTable], keyed: list[tuple[Masks, Codes]]
    ) -> Masks | None:
        """Per row and tree, the mask of leaves the row can reach: the AND of each table's mask for the row's value
        in `columns` (by feature) and of each keyed mask table's row for the row's key (None: no splits at all)."""
        reach: Masks | None = None
        parts = list(keyed)
        for table in tables:
            column = columns[table.feature]
            # NaN sorts after the +inf sentinel that ends `thresholds`: it lands on the missing-value row by itself.
            position = np.searchsorted(table.thresholds, column, side="left")
            if table.has_zero_rule:
                position[np.abs(column) <= ZERO_THRESHOLD] = len(table.thresholds) + 1
            parts.append((table.masks, position))
        for masks, index in parts:
            if reach is None:
                reach = masks.take(index, axis=0)
            else:
                np.bitwise_and(reach, masks.take(index, axis=0), out=reach)
        return reach

    def _leaf_sums(self, reach: Masks | None, n: int) -> FloatArray:
        """Each row's prediction from its masks (rows × trees): the sum of its leaves' values, tree after tree."""
        # Leaf values are added tree after tree, in LightGBM's order, so that the sums are bit for bit LightGBM's:
        # a (trees × rows) array summed over axis 0 accumulates row by row (numpy's pairwise summation would not).
        if reach is None:
            return np.full(n, np.add.accumulate(self.leaf_values[1 :: self.leaf_slots])[-1])
        # The row's leaf is the lowest bit left: m ^ (m - 1) keeps the bits up to it, so its popcount is leaf + 1.
        np.bitwise_xor(reach, reach - reach.dtype.type(1), out=reach)
        # Small indices (16 bits up to 2,048 trees of 32 leaves) are cheaper to add and to transpose in `take`.
        offsets = self.slot_offsets
        values = self.leaf_values.take(np.add(np.bitwise_count(reach), offsets, dtype=offsets.dtype).T)
        if values.shape[1] == 1:  # one row: `sum` would add its contiguous column pairwise
            return np.add.accumulate(values[:, 0])[-1:]
        result: FloatArray = values.sum(axis=0)
        return result

    @property
    def slot_offsets(self) -> npt.NDArray[np.unsignedinteger[Any]]:
        """Per tree, where its leaf values start in `leaf_values`, minus one (the popcount is leaf + 1): t × leaf_slots,
        in the smallest unsigned type that holds every index."""
        index = np.uint16 if len(self.leaf_values) <= 1 << 16 else np.uint32
        return np.arange(0, self.n_trees * self.leaf_slots, self.leaf_slots, dtype=index)


def _columns(features: FloatArray, tables: Sequence[FeatureTable]) -> dict[int, FloatArray]:
    """The columns of `features` that `tables` split on, each contiguous (what `searchsorted` reads fastest)."""
    return {t.feature: np.ascontiguousarray(features[:, t.feature], dtype=np.float64) for t in tables}


def _identity_output(dump: dict[str, Any]) -> bool:
    """Whether the model's prediction is its raw score (e.g. not `reg_sqrt`, which squares it)."""
    words = str(dump.get("objective", "")).split(" ")
    return words[0] in IDENTITY_OBJECTIVES and "sqrt" not in words[1:]


def compile_forest(dump: dict[str, Any]) -> CompiledForest | None:
    """Compile `Booster.dump_model()` output; None when the model is outside what `CompiledForest` reproduces."""
    trees: list[dict[str, Any]] = dump.get("tree_info", [])
    if (
        not trees
        or dump.get("num_tree_per_iteration", 1) != 1
        or dump.get("average_output", False)
        or not _identity_output(dump)
        or any(t["num_leaves"] > MAX_LEAVES or t.get("num_cat", 0) > 0 for t in trees)
    ):
        return None
    n_trees = len(trees)
    leaf_slots, word = next(w for w in WORDS if max(t["num_leaves"] for t in trees) <= w[0])
    full = (1 << leaf_slots) - 1
    splits: dict[int, list[tuple[float, int, int, bool, str]]] = {}
    leaf_values = np.zeros(1 + n_trees * leaf_slots, dtype=np.float64)
    for index, tree in enumerate(trees):
        leaves: list[float] = []
        if _walk(tree["tree_structure"], index, leaves, splits, full) is None:
            return None
        leaf_values[1 + index * leaf_slots : 1 + index * leaf_slots + len(leaves)] = leaves
    tables = []
    for feature in sorted(splits):
        nodes = sorted(splits[feature], key=lambda s: s[0])
        k = len(nodes)
        masks = np.full((k + 3, n_trees), full, dtype=word)
        prefix = np.full(n_trees, full, dtype=word)
        for p, (_, tree_index, mask, _, _) in enumerate(nodes):
            prefix[tree_index] &= word(mask)
            masks[p + 1] = prefix
        for threshold, tree_index, mask, default_left, missing_type in nodes:
            # A missing value: the default direction, except the None type, where LightGBM compares 0 instead.
            nan_right = threshold < 0.0 if missing_type == "None" else not default_left
            zero_right = not default_left if missing_type == "Zero" else threshold < 0.0
            if nan_right:
                masks[k + 1, tree_index] &= word(mask)
            if zero_right:
                masks[k + 2, tree_index] &= word(mask)
        has_zero_rule = any(node[4] == "Zero" for node in nodes)
        thresholds = np.array([node[0] for node in nodes] + [np.inf], dtype=np.float64)
        tables.append(FeatureTable(feature, thresholds, masks, has_zero_rule))
    return CompiledForest(
        n_features=int(dump["max_feature_idx"]) + 1,
        n_trees=n_trees,
        tables=tuple(tables),
        leaf_slots=leaf_slots,
        leaf_values=leaf_values,
    )


def _walk(
    node: dict[str, Any],
    tree_index: int,
    leaves: list[float],
    splits: dict[int, list[tuple[float, int, int, bool, str]]],
    full: int,
) -> list[int] | None:
    """Number the leaves under `node` left to right and record its splits; None for a split we cannot compile."""
    if "split_index" not in node:
        if "leaf_coeff" in node:
            return None
        leaves.append(float(node.get("leaf_value", 0.0)))
        return [len(leaves) - 1]
    if node.get("decision_type") != "<=":
        return None
    left = _walk(node["left_child"], tree_index, leaves, splits, full)
    right = _walk(node["right_child"], tree_index, leaves, splits, full)
    if left is None or right is None:
        return None
    # Going right removes every leaf of the left subtree.
    mask = full & ~sum(1 << leaf for leaf in left)
    splits.setdefault(int(node["split_feature"]), []).append(
        (float(node["threshold"]), tree_index, mask, bool(node["default_left"]), str(node["missing_type"]))
    )
    return left + right
