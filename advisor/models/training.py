"""Training with a validation metric, and grouped cross-validation of every model against its baselines.

`train` is what `models train`, `POST /v1/models/train` and the bundled reference models use: it scores the model
on a held-out part of the data (the metric promotion compares), then refits on everything. `evaluate` is the
honest comparison of docs/models.md: the model and each baseline on the same grouped splits.

Splits (`split_by`):
- ``pair`` (colocations): random 5-fold over unordered pairs {A, B} on one GPU model, so (A, B) and (B, A) stay
  on the same side;
- a name ``X`` with ``X_a``/``X_b`` columns (colocations: ``workload``, ``family``, ``batch_size``): leave one value
  out — the test fold holds every pair in which either side has that value, and training holds no such pair;
- a time column (``submit_time``, ``start_time``, ``end_time``): train on the first 80% by time, test on the rest;
- ``row``: random 5-fold over rows;
- any other column: leave one value out when it has at most 12 values, else 5 folds of values.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from advisor.datasets import FORMAT_OF_KIND, Kind, pair_families, run_seconds
from advisor.features import FloatArray
from advisor.models.interference import (
    InterferenceModel,
    norm_targets,
    probe_rows,
    reference_workloads,
)
from advisor.models.jct import JctModel
from advisor.models.kinds import MODEL_KINDS, PRIMARY_METRIC, Model
from advisor.models.throughput import ThroughputModel
from profiler.csv_formats import InputDataError

__all__ = ["PRIMARY_METRIC", "Evaluation", "Model", "Trained", "Validation", "evaluate", "score", "splits", "train"]

MAX_LEAVE_ONE_OUT_GROUPS = 12
FOLDS = 5
TIME_COLUMNS = ("submit_time", "start_time", "end_time")

# ------------------------------------------------------------------------------------------- splits


def _random_folds(keys: list[str], seed: int) -> FloatArray:
    unique = sorted(set(keys))
    order = np.random.default_rng(seed).permutation(len(unique))
    fold_of = {key: int(order[i]) % FOLDS for i, key in enumerate(unique)}
    return np.array([fold_of[k] for k in keys], dtype=np.float64)


def side_values(frame: pd.DataFrame, split_by: str) -> tuple[npt.NDArray[np.str_], npt.NDArray[np.str_]] | None:
    """Each side's value of a side name (``family``: the column, else derived from the workload names; any ``X``
    with ``X_a``/``X_b`` columns), or None when `split_by` names no side of a colocations frame."""
    if "workload_a" not in frame.columns:
        return None
    if split_by == "family":
        return pair_families(frame)
    if f"{split_by}_a" in frame.columns and f"{split_by}_b" in frame.columns:
        return frame[f"{split_by}_a"].astype(str).to_numpy(dtype=str), frame[f"{split_by}_b"].astype(str).to_numpy(
            dtype=str
        )
    return None


def splits(frame: pd.DataFrame, split_by: str, *, seed: int = 0) -> list[tuple[str, FloatArray, FloatArray]]:
    """(label, train row indices, test row indices) per fold; see the module doc for the split kinds."""
    n = len(frame)
    if split_by in TIME_COLUMNS:
        column = f"{split_by}_s"
        if column not in frame.columns:
            raise InputDataError(f"--holdout-by {split_by}: the data has no {split_by} column")
        order = np.argsort(frame[column].to_numpy(np.float64), kind="stable")
        cut = round(n * 0.8)
        return [(f"first 80% by {split_by}", order[:cut].astype(np.float64), order[cut:].astype(np.float64))]
    if split_by in ("pair", "row"):
        if split_by == "pair":
            if "workload_a" not in frame.columns:
                raise InputDataError("--holdout-by pair needs a colocations CSV (workload_a, workload_b)")
            keys = [
                "|".join([g, *sorted((a, b))])
                for g, a, b in zip(frame["gpu_model"], frame["workload_a"], frame["workload_b"], strict=True)
            ]
        else:
            keys = [str(i) for i in range(n)]
        folds = _random_folds(keys, seed)
        return [
            (
                f"fold {k + 1}/{FOLDS}",
                np.flatnonzero(folds != k).astype(np.float64),
                np.flatnonzero(folds == k).astype(np.float64),
            )
            for k in range(FOLDS)
        ]
    sides = side_values(frame, split_by)
    if sides is not None:
        side_a, side_b = sides
        out = []
        for value in sorted(set(side_a) | set(side_b)):
            test = (side_a == value) | (side_b == value)
            out.append(
                (
                    f"{split_by}={value}",
                    np.flatnonzero(~test).astype(np.float64),
                    np.flatnonzero(test).astype(np.float64),
                )
            )
        return out
    if split_by not in frame.columns:
        raise InputDataError(f"--holdout-by {split_by}: no such column (and not one of pair, row, a time column)")
    values = frame[split_by].astype(str).to_numpy()
    unique = sorted(set(values))
    if len(unique) <= MAX_LEAVE_ONE_OUT_GROUPS:
        return [
            (
                f"{split_by}={v}",
                np.flatnonzero(values != v).astype(np.float64),
                np.flatnonzero(values == v).astype(np.float64),
            )
            for v in unique
        ]
    folds = _random_folds(list(values), seed)
    return [
        (
            f"{split_by} fold {k + 1}/{FOLDS}",
            np.flatnonzero(folds != k).astype(np.float64),
            np.flatnonzero(folds == k).astype(np.float64),
        )
        for k in range(FOLDS)
    ]


# ------------------------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class Evaluation:
    kind: Kind
    split_by: str
    rows: int
    pooled: dict[str, dict[str, float]]
    folds: list[dict[str, Any]]
    probes: int = 0
    references: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        metric = PRIMARY_METRIC[self.kind]
        model = self.pooled["model"][metric]
        out = {
            "kind": self.kind,
            "holdout_by": self.split_by,
            "rows": self.rows,
            "metric": metric,
            "model": self.pooled["model"],
            "baselines": {k: v for k, v in self.pooled.items() if k != "model"},
            "model_beats_every_baseline": all(v[metric] > model for k, v in self.pooled.items() if k != "model"),
            "folds": self.folds,
        }
        if self.kind == "interference":
            out["scored"] = "held-out side" if self.references or _is_side_split(self.split_by) else "both sides"
            out["model_at_or_below_util_sum_on_every_fold"] = all(
                f["model"][metric] <= f["util_sum"][metric] for f in self.folds
            )
            out["probes"] = self.probes
            if self.references:
                out["reference_workloads"] = self.references
        if self.kind == "throughput":
            # The goal across GPU types: below nearest-GPU scaling on both typical-error measures in every fold.
            out["model_beats_nearest_gpu_on_every_fold"] = all(
                f["model"][m] < f["nearest_gpu"][m] for f in self.folds for m in ("median_ape", "mean_abs_log2_error")
            )
        return out


def _is_side_split(split_by: str) -> bool:
    return split_by not in ("pair", "row", *TIME_COLUMNS)


def _side_folds(
    frame: pd.DataFrame, split_by: str
) -> list[tuple[str, str, npt.NDArray[np.bool_], npt.NDArray[np.bool_]]] | None:
    """(label, held-out value, test-row mask, scored-side mask over a-sides then b-sides of the test rows) per value
    of a side split of a colocations frame; None when `split_by` is not a side name."""
    sides = side_values(frame, split_by)
    if sides is None:
        return None
    side_a, side_b = sides
    out = []
    for value in sorted(set(side_a) | set(side_b)):
        test = (side_a == value) | (side_b == value)
        scored = np.concatenate([side_a[test] == value, side_b[test] == value])
        out.append((f"{split_by}={value}", value, test, scored))
    return out


def evaluate(
    kind: Kind,
    frame: pd.DataFrame,
    split_by: str,
    *,
    probes: int = 0,
    num_threads: int = 1,
    seed: int = 0,
    params: dict[str, Any] | None = None,
) -> Evaluation:
    """Grouped cross-validation of the model and its baselines on the same folds; metrics pooled over all test rows.

    Interference split by a side (``family``, ``workload``, ...) scores only the held-out side of each test pair.
    `probes` K > 0 (interference, side splits only): for each held-out workload its pairs with K fixed reference
    workloads (`advisor.models.interference.reference_workloads`, chosen among the training pairs of the fold) move
    from the test set into training — what the profiler's probe co-runs give a new workload.

    Each fold also carries `inner_check`: the figures of the check the fold's model made on its training part alone
    (`ModelKind.check`): validation figures, beside the fold's test figures.
    """
    spec = MODEL_KINDS[kind]
    frame = spec.labelled(frame)
    fmt = spec.csv
    side_folds = _side_folds(frame, split_by) if kind == "interference" else None
    if probes < 0:
        raise InputDataError(f"--probes {probes}: expected a count of 0 or more")
    if probes and side_folds is None:
        raise InputDataError(
            "--probes needs interference data split by a side of the pair (family, workload), "
            f"not --holdout-by {split_by}"
        )
    pooled: dict[str, list[FloatArray]] = {}
    folds = []
    references: dict[str, list[str]] = {}
    if side_folds is not None:
        fam_a, fam_b = pair_families(frame)
        side_a, side_b = side_values(frame, split_by) or (fam_a, fam_b)
        plan: list[tuple[str, npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_] | None]] = []
        for label, value, test, sides_scored in side_folds:
            kept_sides = sides_scored
            moved = np.zeros(len(frame), dtype=bool)
            if probes:
                # No reference workload from a held-out workload's family (it would not be one a new job brings).
                held_families = set(fam_a[side_a == value]) | set(fam_b[side_b == value])
                refs = reference_workloads(frame[~test], probes, excluded_families=held_families)
                references[label] = refs
                moved = probe_rows(frame, test, refs)
                keep = ~moved[test]
                kept_sides = kept_sides[np.concatenate([keep, keep])]
            plan.append((label, np.flatnonzero(~test | moved), np.flatnonzero(test & ~moved), kept_sides))
    else:
        plan = [
            (label, train_rows.astype(np.int64), test_rows.astype(np.int64), None)
            for label, train_rows, test_rows in splits(frame, split_by, seed=seed)
        ]
    for label, train_rows, test_rows, scored in plan:
        train = frame.iloc[train_rows].reset_index(drop=True)
        test_part = frame.iloc[test_rows].reset_index(drop=True)
        if len(test_part) == 0 or len(train) < fmt.min_train_rows:
            continue
        model = spec.new_model(num_threads=num_threads, params=params)
        errors = spec.errors(train, test_part, model, scored)
        for name, e in errors.items():
            pooled.setdefault(name, []).append(e)
        scored_count = {"scored_sides": int(np.sum(scored))} if scored is not None else {}
        folds.append(
            {
                "fold": label,
                "train_rows": len(train),
                "test_rows": len(test_part),
                **scored_count,
                **spec.summarise(errors),
                "inner_check": spec.check(model),
            }
        )
    if not folds:
        raise InputDataError(
            f"--holdout-by {split_by}: no fold leaves at least {fmt.min_train_rows} training rows and one test row"
        )
    return Evaluation(
        kind,
        split_by,
        len(frame),
        spec.summarise({k: np.concatenate(v) for k, v in pooled.items()}),
        folds,
        probes,
        references,
    )


# ------------------------------------------------------------------------------------------- training


@dataclass(frozen=True)
class Validation:
    """The rows a candidate was validated on (and, for interference, which sides were scored), so that the registry
    can score the promoted version on exactly the same rows; `fingerprint` identifies the whole training data set."""

    split: str
    rows: pd.DataFrame
    scored: npt.NDArray[np.bool_] | None
    fingerprint: str


@dataclass(frozen=True)
class Trained:
    model: Model
    metrics: dict[str, Any]
    training_summary: dict[str, Any]
    validation: Validation | None = None


_VALIDATION_SPLIT: dict[Kind, str] = {"interference": "family", "throughput": "row", "jct": "submit_time"}
VALIDATION_GROUP_FRACTION = 0.2
MIN_VALIDATION_FAMILIES = 3


def fingerprint(kind: Kind, frame: pd.DataFrame) -> str:
    """A short hash of the rows of `frame` in the columns of `kind`'s format (order-independent)."""
    columns = sorted(c for c in FORMAT_OF_KIND[kind].known if c in frame.columns)
    hashes = np.sort(pd.util.hash_pandas_object(frame[columns].astype(str), index=False).to_numpy())
    return hashlib.sha256(hashes.tobytes()).hexdigest()[:16]


def _validation_fold(
    kind: Kind, frame: pd.DataFrame, seed: int
) -> tuple[str, npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_] | None]:
    """(split, train rows, validation rows, scored sides) of the held-out part `train` validates on.

    Interference holds out whole job families (a fifth of them, at least one; `pair_families`) and scores their side
    only, as a new workload is what the model is for; with fewer than three families, a fifth of the pairs. The
    throughput model holds out a random fifth of the rows; the JCT model the last fifth by submit time.
    """
    if kind == "interference":
        fam_a, fam_b = pair_families(frame)
        families = sorted(set(fam_a) | set(fam_b))
        if len(families) >= MIN_VALIDATION_FAMILIES:
            order = np.random.default_rng(seed).permutation(len(families))
            count = max(1, round(VALIDATION_GROUP_FRACTION * len(families)))
            held = {families[i] for i in order[:count]}
            test = np.isin(fam_a, list(held)) | np.isin(fam_b, list(held))
            scored = np.concatenate([np.isin(fam_a[test], list(held)), np.isin(fam_b[test], list(held))])
            return (
                f"families {', '.join(sorted(held))} held out",
                np.flatnonzero(~test),
                np.flatnonzero(test),
                scored,
            )
        _, train_rows, test_rows = splits(frame, "pair", seed=seed)[0]
        return "a fifth of the pairs held out", train_rows.astype(np.int64), test_rows.astype(np.int64), None
    label, train_rows, test_rows = splits(frame, _VALIDATION_SPLIT[kind], seed=seed)[0]
    return label, train_rows.astype(np.int64), test_rows.astype(np.int64), None


def score(kind: Kind, model: Model, validation: Validation) -> float:
    """`kind`'s primary metric of an already fitted `model` on the validation rows (the registry's comparison)."""
    rows = validation.rows
    if isinstance(model, InterferenceModel):
        pred = model.predict_frame(rows)
        errors = np.abs(np.concatenate([pred[:, 0], pred[:, 1]]) - np.concatenate(norm_targets(rows)))
        return float(np.mean(errors if validation.scored is None else errors[validation.scored]))
    if isinstance(model, ThroughputModel):
        truth = rows["throughput"].to_numpy(np.float64)
        return float(np.mean(np.abs(model.predict_frame(rows) - truth) / truth))
    truth = np.maximum(run_seconds(rows), 1.0)
    p50 = np.maximum(model.predict_frame(rows).p50, 1.0)
    return float(np.mean(np.abs(np.log(p50) - np.log(truth))))


def train(
    kind: Kind,
    frame: pd.DataFrame,
    *,
    source: str,
    num_threads: int = 1,
    seed: int = 0,
    params: dict[str, Any] | None = None,
) -> Trained:
    """Fit `kind` on `frame`, with validation metrics from one held-out part (see `_validation_fold`).

    Interference and throughput fit on the rest, score model and baselines on the held-out part, then refit on
    everything; the JCT model's own chronological validation is used as is. Raises `InputDataError` when there are too
    few usable rows.
    """
    spec = MODEL_KINDS[kind]
    fmt = spec.csv
    frame = spec.labelled(frame)
    if len(frame) < fmt.min_train_rows:
        raise InputDataError(
            f"{source}: {len(frame)} usable row(s); training the {kind} model needs at least {fmt.min_train_rows}"
        )
    metric = PRIMARY_METRIC[kind]
    model = spec.new_model(num_threads=num_threads, params=params)
    split, train_rows, test_rows, scored = _validation_fold(kind, frame, seed)
    test_part = frame.iloc[test_rows].reset_index(drop=True)
    if kind == "jct":
        assert isinstance(model, JctModel)
        model.fit(frame)
        metrics: dict[str, Any] = dict(model.validation_)
        metrics["baseline_mae_log"] = metrics["history_mae_log"]
    else:
        train_part = frame.iloc[train_rows].reset_index(drop=True)
        candidate = spec.new_model(num_threads=num_threads, params=params)
        summary = spec.summarise(spec.errors(train_part, test_part, candidate, scored))
        metrics = {metric: summary["model"][metric], "baselines": {k: v for k, v in summary.items() if k != "model"}}
        model.fit(frame)
    validation = Validation(split, test_part, scored, fingerprint(kind, frame))
    metrics["validation"] = {"split": split, "rows": len(test_part), "data": validation.fingerprint}
    metrics["metric"] = metric
    summary_info: dict[str, Any] = {"source": source, "rows": len(frame), **spec.data_summary(frame)}
    return Trained(model, metrics, summary_info, validation)
