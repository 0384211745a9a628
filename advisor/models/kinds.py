"""One table of the model kinds: what each kind is made of, so that training, evaluation, the registry, the CLI and
the service look a kind up instead of branching on its name.

Per kind (`ModelKind`): the estimator class (with `from_artifact`), the CSV format of its data, the store reader that
builds the same frame from the store, the rows that carry a label, the primary validation metric (lower is better),
how the model and its baselines are scored on held-out rows, the figures of the check a fitted model made on its own
training data (its validation figures, beside each fold's test figures in `models evaluate`), a summary of its
training data, and how its predictions are written as JSON rows (`models predict --json`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from sqlalchemy.orm import Session

from advisor.datasets import (
    Kind,
    colocations_frame,
    executions_frame,
    run_seconds,
    side_columns_from_frame,
    throughputs_frame,
)
from advisor.features import FloatArray
from advisor.models.artifact import Artifact, ArtifactError
from advisor.models.baseline_predictors import (
    ConstantInterference,
    MeanInterference,
    SharingClassInterference,
    SharingPriorInterference,
    UtilSumInterference,
)
from advisor.models.interference import InterferenceModel, gpu_names, norm_targets, sharing_modes, usable_rows
from advisor.models.jct import JctModel, MedianJct
from advisor.models.throughput import MeanThroughput, NearestGpuThroughput, ThroughputModel
from profiler.csv_formats import COLOCATIONS, EXECUTIONS, THROUGHPUTS, CsvFormat
from profiler.store import repo

Model = InterferenceModel | ThroughputModel | JctModel
Scored = npt.NDArray[np.bool_] | None
# (training part, test part, fresh model, scored sides) → absolute errors per predictor (model and baselines).
Errors = Callable[[pd.DataFrame, pd.DataFrame, Model, Scored], dict[str, FloatArray]]


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


# ------------------------------------------------------------------------------------------- interference


def _interference_errors(
    train: pd.DataFrame, test: pd.DataFrame, model: Model, scored: Scored = None
) -> dict[str, FloatArray]:
    """Absolute errors of normalised throughput per predictor: the sides `scored` (a-sides then b-sides of the test
    pairs; every side when None). The model is given the workload names, the baselines the profiles alone."""
    truth = np.concatenate(norm_targets(test))
    keep = np.ones(len(truth), dtype=bool) if scored is None else scored
    a, b = side_columns_from_frame(test, "a"), side_columns_from_frame(test, "b")
    gpus = gpu_names(test)
    assert isinstance(model, InterferenceModel)
    pred = model.fit(train).predict_frame(test)
    out = {"model": np.abs(np.concatenate([pred[:, 0], pred[:, 1]]) - truth)[keep]}
    baselines = (
        ("mean", MeanInterference()),
        ("half", ConstantInterference(value=0.5)),
        ("util_sum", UtilSumInterference()),
        ("sharing_class", SharingClassInterference()),
    )
    for name, baseline in baselines:
        pred = baseline.fit(train).predict_columns(a, b, gpus)
        out[name] = np.abs(np.concatenate([pred[:, 0], pred[:, 1]]) - truth)[keep]
    pred = SharingPriorInterference().predict_modes(a, b, sharing_modes(test))
    out["sharing_prior"] = np.abs(np.concatenate([pred[:, 0], pred[:, 1]]) - truth)[keep]
    return out


def _interference_check(model: Model) -> dict[str, Any]:
    assert isinstance(model, InterferenceModel)
    return dict(model.check_)


def _interference_summary(errors: dict[str, FloatArray]) -> dict[str, dict[str, float]]:
    return {name: {"mae": float(np.mean(e))} for name, e in errors.items()}


def _interference_data(frame: pd.DataFrame) -> dict[str, Any]:
    return {
        "gpu_models": sorted(set(gpu_names(frame))),
        "workloads": len(set(frame["workload_a"]) | set(frame["workload_b"])),
    }


def _interference_rows(model: Model, frame: pd.DataFrame) -> list[dict[str, float | None]]:
    assert isinstance(model, InterferenceModel)
    return [{"norm_a": _finite(a), "norm_b": _finite(b)} for a, b in model.predict_frame(frame).tolist()]


# ------------------------------------------------------------------------------------------- throughput


def _throughput_errors(
    train: pd.DataFrame, test: pd.DataFrame, model: Model, scored: Scored = None
) -> dict[str, FloatArray]:
    """Absolute percentage errors (as ratios) per predictor, and absolute log2 errors (keys ``<name>:log2``)."""
    truth = test["throughput"].to_numpy(np.float64)
    predictors: dict[str, Any] = {"model": model, "nearest_gpu": NearestGpuThroughput(), "mean": MeanThroughput()}
    out: dict[str, FloatArray] = {}
    for name, predictor in predictors.items():
        predicted = predictor.fit(train).predict_frame(test)
        out[name] = np.abs(predicted - truth) / truth
        out[f"{name}:log2"] = np.abs(np.log2(np.maximum(predicted, 1e-12)) - np.log2(truth))
    return out


def _throughput_check(model: Model) -> dict[str, Any]:
    assert isinstance(model, ThroughputModel)
    return dict(model.check_)


def _throughput_summary(errors: dict[str, FloatArray]) -> dict[str, dict[str, float]]:
    return {
        name: {
            "mape": float(np.mean(e)),
            "median_ape": float(np.median(e)),
            "mean_abs_log2_error": float(np.mean(errors[f"{name}:log2"])),
        }
        for name, e in errors.items()
        if not name.endswith(":log2")
    }


def _throughput_data(frame: pd.DataFrame) -> dict[str, Any]:
    return {"gpu_models": sorted(set(frame["gpu_model"])), "workloads": int(frame["workload"].nunique())}


def _throughput_rows(model: Model, frame: pd.DataFrame) -> list[dict[str, float | None]]:
    assert isinstance(model, ThroughputModel)
    return [{"throughput": _finite(v)} for v in np.asarray(model.predict_frame(frame)).tolist()]


# ------------------------------------------------------------------------------------------- JCT


def _jct_errors(train: pd.DataFrame, test: pd.DataFrame, model: Model, scored: Scored = None) -> dict[str, FloatArray]:
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


def _jct_check(model: Model) -> dict[str, Any]:
    assert isinstance(model, JctModel)
    return dict(model.validation_)


def _jct_summary(errors: dict[str, FloatArray]) -> dict[str, dict[str, float]]:
    return {
        name: {"median_ae_seconds": float(np.median(e)), "mae_log": float(np.mean(errors[f"{name}:log"]))}
        for name, e in errors.items()
        if not name.endswith(":log")
    }


def _jct_data(frame: pd.DataFrame) -> dict[str, Any]:
    return {"first_submit_s": float(frame["submit_time_s"].min()), "last_submit_s": float(frame["submit_time_s"].max())}


def _jct_rows(model: Model, frame: pd.DataFrame) -> list[dict[str, float | None]]:
    assert isinstance(model, JctModel)
    q = model.predict_frame(frame)
    return [
        {"p10": _finite(a), "p50": _finite(b), "p90": _finite(c)}
        for a, b, c in zip(q.p10.tolist(), q.p50.tolist(), q.p90.tolist(), strict=True)
    ]


def _jct_labelled(frame: pd.DataFrame) -> pd.DataFrame:
    seconds = run_seconds(frame)
    return frame[np.isfinite(seconds) & (seconds >= 0)].reset_index(drop=True)


# ------------------------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class ModelKind:
    """What one model kind is made of (see the module doc)."""

    name: Kind
    estimator: type[InterferenceModel] | type[ThroughputModel] | type[JctModel]
    baselines: tuple[str, ...]
    csv: CsvFormat
    # the store's rows as a frame; results flagged for a wide spread of repeats only when asked for (True)
    store_frame: Callable[[Session, bool], pd.DataFrame]
    labelled: Callable[[pd.DataFrame], pd.DataFrame]
    metric: str
    errors: Errors
    check: Callable[[Model], dict[str, Any]]
    summarise: Callable[[dict[str, FloatArray]], dict[str, dict[str, float]]]
    data_summary: Callable[[pd.DataFrame], dict[str, Any]]
    prediction_rows: Callable[[Model, pd.DataFrame], list[dict[str, float | None]]]

    def new_model(self, *, num_threads: int = 1, params: dict[str, Any] | None = None) -> Model:
        """A fresh estimator with its default hyperparameters, overridden by `params`."""
        return self.estimator(**{"num_threads": num_threads, **(params or {})})


MODEL_KINDS: dict[Kind, ModelKind] = {
    "interference": ModelKind(
        name="interference",
        estimator=InterferenceModel,
        baselines=("mean", "util_sum", "sharing_class"),
        csv=COLOCATIONS,
        store_frame=lambda session, flagged: colocations_frame(
            repo.list_colocations(session=session), include_flagged=flagged
        ),
        labelled=usable_rows,
        metric="mae",
        errors=_interference_errors,
        check=_interference_check,
        summarise=_interference_summary,
        data_summary=_interference_data,
        prediction_rows=_interference_rows,
    ),
    "throughput": ModelKind(
        name="throughput",
        estimator=ThroughputModel,
        baselines=("nearest_gpu", "mean"),
        csv=THROUGHPUTS,
        store_frame=lambda session, flagged: throughputs_frame(
            repo.list_profiles(session=session), include_flagged=flagged
        ),
        labelled=lambda frame: frame[frame["throughput"] > 0].reset_index(drop=True),
        metric="mape",
        errors=_throughput_errors,
        check=_throughput_check,
        summarise=_throughput_summary,
        data_summary=_throughput_data,
        prediction_rows=_throughput_rows,
    ),
    "jct": ModelKind(
        name="jct",
        estimator=JctModel,
        baselines=("user_workload_median",),
        csv=EXECUTIONS,
        store_frame=lambda session, _flagged: executions_frame(repo.list_executions(session=session)),
        labelled=_jct_labelled,
        metric="mae_log",
        errors=_jct_errors,
        check=_jct_check,
        summarise=_jct_summary,
        data_summary=_jct_data,
        prediction_rows=_jct_rows,
    ),
}
PRIMARY_METRIC: dict[Kind, str] = {kind: spec.metric for kind, spec in MODEL_KINDS.items()}


def model_from_artifact(artifact: Artifact) -> Model:
    """The model an artifact holds, by its kind."""
    spec = MODEL_KINDS.get(artifact.kind)  # type: ignore[call-overload]
    if spec is None:
        raise ArtifactError(f"unknown model kind {artifact.kind!r}")
    model: Model = spec.estimator.from_artifact(artifact)
    return model
