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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from advisor.datasets import FORMAT_OF_KIND, DatasetError, Kind, pair_families, run_seconds, side_columns_from_frame
from advisor.features import FloatArray
from advisor.models.baselines import MeanInterference, SharingClassInterference, UtilSumInterference
from advisor.models.interference import (
    InterferenceModel,
    gpu_names,
    norm_targets,
    probe_rows,
    reference_workloads,
    usable_rows,
)
from advisor.models.jct import JctModel, MedianJct
from advisor.models.throughput import MeanThroughput, NearestGpuThroughput, ThroughputModel

PRIMARY_METRIC: dict[Kind, str] = {"interference": "mae", "throughput": "mape", "jct": "mae_log"}
MAX_LEAVE_ONE_OUT_GROUPS = 12
FOLDS = 5
TIME_COLUMNS = ("submit_time", "start_time", "end_time")

Model = InterferenceModel | ThroughputModel | JctModel


def new_model(kind: Kind, *, num_threads: int = 1, params: dict[str, Any] | None = None) -> Model:
    """A fresh estimator of `kind` with its default hyperparameters, overridden by `params`."""
    options = {"num_threads": num_threads, **(params or {})}
    if kind == "interference":
        return InterferenceModel(**options)
    if kind == "throughput":
        return ThroughputModel(**options)
    return JctModel(**options)


def clean(kind: Kind, frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of `frame` that carry a usable label for `kind`."""
    if kind == "interference":
        return usable_rows(frame)
    if kind == "throughput":
        return frame[frame["throughput"] > 0].reset_index(drop=True)
    seconds = run_seconds(frame)
    return frame[np.isfinite(seconds) & (seconds >= 0)].reset_index(drop=True)


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
            raise DatasetError(f"--holdout-by {split_by}: the data has no {split_by} column")
        order = np.argsort(frame[column].to_numpy(np.float64), kind="stable")
        cut = round(n * 0.8)
        return [(f"first 80% by {split_by}", order[:cut].astype(np.float64), order[cut:].astype(np.float64))]
    if split_by in ("pair", "row"):
        if split_by == "pair":
            if "workload_a" not in frame.columns:
                raise DatasetError("--holdout-by pair needs a colocations CSV (workload_a, workload_b)")
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
        raise DatasetError(f"--holdout-by {split_by}: no such column (and not one of pair, row, a time column)")
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


def _interference_errors(
    train: pd.DataFrame, test: pd.DataFrame, model: Model, scored: npt.NDArray[np.bool_] | None = None
) -> dict[str, FloatArray]:
    """Absolute errors of normalised throughput per predictor: the sides `scored` (a-sides then b-sides of the test
    pairs; every side when None). The model is given the workload names, the baselines the profiles alone."""
    truth = np.concatenate(norm_targets(test))
    keep = np.ones(len(truth), dtype=bool) if scored is None else scored
    a, b = side_columns_from_frame(test, "a"), side_columns_from_frame(test, "b")
    gpus = gpu_names(test)
    predictors: dict[str, Any] = {
        "model": model,
        "mean": MeanInterference(),
        "util_sum": UtilSumInterference(),
        "sharing_class": SharingClassInterference(),
    }
    out = {}
    for name, predictor in predictors.items():
        fitted = predictor.fit(train)
        pred = fitted.predict_frame(test) if name == "model" else fitted.predict_columns(a, b, gpus)
        out[name] = np.abs(np.concatenate([pred[:, 0], pred[:, 1]]) - truth)[keep]
    return out


def _throughput_errors(train: pd.DataFrame, test: pd.DataFrame, model: Model) -> dict[str, FloatArray]:
    """Absolute percentage errors (as ratios) per predictor, and absolute log2 errors (keys ``<name>:log2``)."""
    truth = test["throughput"].to_numpy(np.float64)
    predictors: dict[str, Any] = {"model": model, "nearest_gpu": NearestGpuThroughput(), "mean": MeanThroughput()}
    out: dict[str, FloatArray] = {}
    for name, predictor in predictors.items():
        predicted = predictor.fit(train).predict_frame(test)
        out[name] = np.abs(predicted - truth) / truth
        out[f"{name}:log2"] = np.abs(np.log2(np.maximum(predicted, 1e-12)) - np.log2(truth))
    return out


def _jct_errors(train: pd.DataFrame, test: pd.DataFrame, model: Model) -> dict[str, FloatArray]:
    """Absolute errors in seconds and of natural-log run time (keys ``<name>:log``) per predictor."""
    truth = np.maximum(run_seconds(test), 1.0)
    assert isinstance(model, JctModel)
    p50 = model.fit(train).predict_frame(test).p50
    median = MedianJct().fit(train).predict_frame(test)
    out = {}
    for name, raw in (("model", p50), ("user_workload_median", median)):
        pred = np.maximum(raw, 1.0)
        out[name] = np.abs(pred - truth)
        out[f"{name}:log"] = np.abs(np.log(pred) - np.log(truth))
    return out


_ERRORS: dict[Kind, Callable[[pd.DataFrame, pd.DataFrame, Model], dict[str, FloatArray]]] = {
    "interference": _interference_errors,
    "throughput": _throughput_errors,
    "jct": _jct_errors,
}


def _summarise(kind: Kind, errors: dict[str, FloatArray]) -> dict[str, dict[str, float]]:
    if kind == "interference":
        return {name: {"mae": float(np.mean(e))} for name, e in errors.items()}
    if kind == "throughput":
        return {
            name: {
                "mape": float(np.mean(e)),
                "median_ape": float(np.median(e)),
                "mean_abs_log2_error": float(np.mean(errors[f"{name}:log2"])),
            }
            for name, e in errors.items()
            if not name.endswith(":log2")
        }
    out = {}
    for name, e in errors.items():
        if name.endswith(":log"):
            continue
        out[name] = {"median_ae_seconds": float(np.median(e)), "mae_log": float(np.mean(errors[f"{name}:log"]))}
    return out


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
    """
    frame = clean(kind, frame)
    fmt = FORMAT_OF_KIND[kind]
    side_folds = _side_folds(frame, split_by) if kind == "interference" else None
    if probes < 0:
        raise DatasetError(f"--probes {probes}: expected a count of 0 or more")
    if probes and side_folds is None:
        raise DatasetError(
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
        model = new_model(kind, num_threads=num_threads, params=params)
        if kind == "interference":
            errors = _interference_errors(train, test_part, model, scored)
        else:
            errors = _ERRORS[kind](train, test_part, model)
        for name, e in errors.items():
            pooled.setdefault(name, []).append(e)
        scored_count = {"scored_sides": int(np.sum(scored))} if scored is not None else {}
        folds.append(
            {
                "fold": label,
                "train_rows": len(train),
                "test_rows": len(test_part),
                **scored_count,
                **_summarise(kind, errors),
            }
        )
    if not folds:
        raise DatasetError(
            f"--holdout-by {split_by}: no fold leaves at least {fmt.min_train_rows} training rows and one test row"
        )
    return Evaluation(
        kind,
        split_by,
        len(frame),
        _summarise(kind, {k: np.concatenate(v) for k, v in pooled.items()}),
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
    everything; the JCT model's own chronological validation is used as is. Raises `DatasetError` when there are too
    few usable rows.
    """
    fmt = FORMAT_OF_KIND[kind]
    frame = clean(kind, frame)
    if len(frame) < fmt.min_train_rows:
        raise DatasetError(
            f"{source}: {len(frame)} usable row(s); training the {kind} model needs at least {fmt.min_train_rows}"
        )
    metric = PRIMARY_METRIC[kind]
    model = new_model(kind, num_threads=num_threads, params=params)
    split, train_rows, test_rows, scored = _validation_fold(kind, frame, seed)
    test_part = frame.iloc[test_rows].reset_index(drop=True)
    if kind == "jct":
        assert isinstance(model, JctModel)
        model.fit(frame)
        metrics: dict[str, Any] = dict(model.validation_)
        metrics["baseline_mae_log"] = metrics["history_mae_log"]
    else:
        train_part = frame.iloc[train_rows].reset_index(drop=True)
        candidate = new_model(kind, num_threads=num_threads, params=params)
        if kind == "interference":
            errors = _interference_errors(train_part, test_part, candidate, scored)
        else:
            errors = _ERRORS[kind](train_part, test_part, candidate)
        summary = _summarise(kind, errors)
        metrics = {metric: summary["model"][metric], "baselines": {k: v for k, v in summary.items() if k != "model"}}
        model.fit(frame)
    validation = Validation(split, test_part, scored, fingerprint(kind, frame))
    metrics["validation"] = {"split": split, "rows": len(test_part), "data": validation.fingerprint}
    metrics["metric"] = metric
    summary_info: dict[str, Any] = {"source": source, "rows": len(frame)}
    if kind == "interference":
        summary_info["gpu_models"] = sorted(set(gpu_names(frame)))
        summary_info["workloads"] = len(set(frame["workload_a"]) | set(frame["workload_b"]))
    elif kind == "throughput":
        summary_info["gpu_models"] = sorted(set(frame["gpu_model"]))
        summary_info["workloads"] = int(frame["workload"].nunique())
    else:
        summary_info["first_submit_s"] = float(frame["submit_time_s"].min())
        summary_info["last_submit_s"] = float(frame["submit_time_s"].max())
    return Trained(model, metrics, summary_info, validation)
