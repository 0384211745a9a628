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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from advisor.datasets import FORMAT_OF_KIND, DatasetError, Kind, run_seconds, side_columns_from_frame
from advisor.features import FloatArray
from advisor.models.baselines import MeanInterference, SharingClassInterference, UtilSumInterference
from advisor.models.interference import InterferenceModel, gpu_names, norm_targets, usable_rows
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
    if f"{split_by}_a" in frame.columns and f"{split_by}_b" in frame.columns:
        side_a = frame[f"{split_by}_a"].astype(str).to_numpy()
        side_b = frame[f"{split_by}_b"].astype(str).to_numpy()
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


def _interference_errors(train: pd.DataFrame, test: pd.DataFrame, model: Model) -> dict[str, FloatArray]:
    """Absolute errors of normalised throughput (both sides of every test pair) per predictor."""
    truth = np.concatenate(norm_targets(test))
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
        pred = predictor.fit(train).predict_columns(a, b, gpus)
        out[name] = np.abs(np.concatenate([pred[:, 0], pred[:, 1]]) - truth)
    return out


def _throughput_errors(train: pd.DataFrame, test: pd.DataFrame, model: Model) -> dict[str, FloatArray]:
    """Absolute percentage errors (as ratios) per predictor."""
    truth = test["throughput"].to_numpy(np.float64)
    predictors: dict[str, Any] = {"model": model, "nearest_gpu": NearestGpuThroughput(), "mean": MeanThroughput()}
    return {name: np.abs(p.fit(train).predict_frame(test) - truth) / truth for name, p in predictors.items()}


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
        return {name: {"mape": float(np.mean(e)), "median_ape": float(np.median(e))} for name, e in errors.items()}
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

    def to_json(self) -> dict[str, Any]:
        metric = PRIMARY_METRIC[self.kind]
        model = self.pooled["model"][metric]
        return {
            "kind": self.kind,
            "holdout_by": self.split_by,
            "rows": self.rows,
            "metric": metric,
            "model": self.pooled["model"],
            "baselines": {k: v for k, v in self.pooled.items() if k != "model"},
            "model_beats_every_baseline": all(v[metric] > model for k, v in self.pooled.items() if k != "model"),
            "folds": self.folds,
        }


def evaluate(
    kind: Kind,
    frame: pd.DataFrame,
    split_by: str,
    *,
    num_threads: int = 1,
    seed: int = 0,
    params: dict[str, Any] | None = None,
) -> Evaluation:
    """Grouped cross-validation of the model and its baselines on the same folds; metrics pooled over all test rows."""
    frame = clean(kind, frame)
    fmt = FORMAT_OF_KIND[kind]
    pooled: dict[str, list[FloatArray]] = {}
    folds = []
    for label, train_rows, test_rows in splits(frame, split_by, seed=seed):
        train = frame.iloc[train_rows.astype(np.int64)].reset_index(drop=True)
        test = frame.iloc[test_rows.astype(np.int64)].reset_index(drop=True)
        if len(test) == 0 or len(train) < fmt.min_train_rows:
            continue
        errors = _ERRORS[kind](train, test, new_model(kind, num_threads=num_threads, params=params))
        for name, e in errors.items():
            pooled.setdefault(name, []).append(e)
        folds.append({"fold": label, "train_rows": len(train), "test_rows": len(test), **_summarise(kind, errors)})
    if not folds:
        raise DatasetError(
            f"--holdout-by {split_by}: no fold leaves at least {fmt.min_train_rows} training rows and one test row"
        )
    return Evaluation(
        kind, split_by, len(frame), _summarise(kind, {k: np.concatenate(v) for k, v in pooled.items()}), folds
    )


# ------------------------------------------------------------------------------------------- training


@dataclass(frozen=True)
class Trained:
    model: Model
    metrics: dict[str, Any]
    training_summary: dict[str, Any]


_VALIDATION_SPLIT: dict[Kind, str] = {"interference": "pair", "throughput": "row", "jct": "submit_time"}


def train(
    kind: Kind,
    frame: pd.DataFrame,
    *,
    source: str,
    num_threads: int = 1,
    seed: int = 0,
    params: dict[str, Any] | None = None,
) -> Trained:
    """Fit `kind` on `frame`, with validation metrics from one held-out split (see `_VALIDATION_SPLIT`).

    Interference and throughput hold out one random fold (pairs, rows), score model and baselines on it, then refit on
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
    if kind == "jct":
        assert isinstance(model, JctModel)
        model.fit(frame)
        metrics: dict[str, Any] = dict(model.validation_)
        metrics["baseline_mae_log"] = metrics["history_mae_log"]
    else:
        _, train_rows, test_rows = splits(frame, _VALIDATION_SPLIT[kind], seed=seed)[0]
        train_part = frame.iloc[train_rows.astype(np.int64)].reset_index(drop=True)
        test_part = frame.iloc[test_rows.astype(np.int64)].reset_index(drop=True)
        errors = _ERRORS[kind](train_part, test_part, new_model(kind, num_threads=num_threads, params=params))
        summary = _summarise(kind, errors)
        metrics = {metric: summary["model"][metric], "baselines": {k: v for k, v in summary.items() if k != "model"}}
        model.fit(frame)
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
    return Trained(model, metrics, summary_info)
