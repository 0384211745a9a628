"""Job completion time: a QSSF-style blend of a history estimate and LightGBM, with p10/p50/p90 quantiles.

As in the QSSF policy of Helios (SC'21), a job's run time is first estimated from the history of similar jobs —
its workload, else its user, else its queue at the same GPU count, else its queue, else all jobs — and blended with
a LightGBM prediction from the job's request, submit time and those same history statistics:
``log p50 = α · history + (1 - α) · lightgbm``. α and the quantile offsets are chosen on the last 20% of the
training jobs by submit time (a chronological validation split), so they reflect how the estimate does on jobs that
come later. p10/p90 are p50 shifted by the 10th/90th percentile of the validation residuals of log run time.

Training rows get their history features from the jobs submitted before them (`time_ordered_history`), as a job being
served does, so neither its own run time nor a later job's is in its features. A job whose workload, user and queue
have no history gets the median of all jobs (`blend`).
Run time is end - start (end - submit where the start is unknown), at least one second.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from advisor.datasets import job_query_from_frame, run_seconds
from advisor.features import JCT_FEATURES, FloatArray, HistoryColumns, JobQuery, jct_features
from advisor.gpus import normalize_gpu_model
from advisor.models import _lgbm
from advisor.models._lgbm import BoostedEstimator
from advisor.models.artifact import Artifact

MIN_HISTORY_JOBS = 3
VALIDATION_FRACTION = 0.2
HISTORY_BLOCKS = 50
_KEYS = ("workload", "user", "queue", "queue_gpus")


def _key_values(query: JobQuery, key: str) -> list[str]:
    if key == "workload":
        return list(query.workloads)
    if key == "user":
        return list(query.users)
    if key == "queue":
        return list(query.queues)
    return [f"{q}|{int(c)}" if q else "" for q, c in zip(query.queues, query.gpu_count, strict=True)]


@dataclass(frozen=True)
class History:
    """Per key (workload, user, queue, queue|GPUs), the median, count and IQR of past log run times."""

    tables: dict[str, dict[str, tuple[float, float, float]]]
    global_log_median: float

    @classmethod
    def from_jobs(cls, query: JobQuery, log_run: FloatArray) -> History:
        tables: dict[str, dict[str, tuple[float, float, float]]] = {}
        for key in _KEYS:
            groups = pd.Series(log_run).groupby(pd.Series(_key_values(query, key)))
            stats = pd.DataFrame(
                {
                    "median": groups.median(),
                    "count": groups.size(),
                    "iqr": groups.quantile(0.75) - groups.quantile(0.25),
                }
            )
            tables[key] = {
                str(k): (float(m), float(c), float(i))
                for k, m, c, i in zip(stats.index, stats["median"], stats["count"], stats["iqr"], strict=True)
                if k
            }
        return cls(tables, float(np.median(log_run)) if len(log_run) else 0.0)

    def _lookup(self, query: JobQuery, key: str) -> tuple[FloatArray, FloatArray, FloatArray]:
        table = self.tables.get(key, {})
        nan = (np.nan, 0.0, np.nan)
        keys = _key_values(query, key)
        # Each distinct key is looked up once; the rows then gather its statistics by code.
        distinct = {k: i for i, k in enumerate(dict.fromkeys(keys))}
        codes = np.fromiter(map(distinct.__getitem__, keys), np.int64, len(keys))
        stats = np.array([table.get(k, nan) for k in distinct], dtype=np.float64).reshape(-1, 3)
        rows = stats[codes]
        return rows[:, 0], rows[:, 1], rows[:, 2]

    def columns(self, query: JobQuery) -> HistoryColumns:
        w_med, w_cnt, _ = self._lookup(query, "workload")
        u_med, u_cnt, u_iqr = self._lookup(query, "user")
        q_med, q_cnt, _ = self._lookup(query, "queue")
        g_med, g_cnt, g_iqr = self._lookup(query, "queue_gpus")
        return HistoryColumns(w_med, w_cnt, u_med, u_cnt, u_iqr, q_med, q_cnt, g_med, g_cnt, g_iqr)

    def estimate(self, columns: HistoryColumns) -> FloatArray:
        """The history estimate of log run time: the most specific key with at least `MIN_HISTORY_JOBS` jobs."""
        result = np.full(len(columns.workload_count), self.global_log_median)
        for median, count in (
            (columns.queue_log_median, columns.queue_count),
            (columns.queue_gpus_log_median, columns.queue_gpus_count),
            (columns.user_log_median, columns.user_count),
            (columns.workload_log_median, columns.workload_count),
        ):
            result = np.where(count >= MIN_HISTORY_JOBS, median, result)
        return result

    def to_json(self) -> dict[str, Any]:
        return {
            "tables": {k: {n: list(v) for n, v in t.items()} for k, t in self.tables.items()},
            "global": self.global_log_median,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> History:
        tables = {
            str(k): {str(n): (float(v[0]), float(v[1]), float(v[2])) for n, v in t.items()}
            for k, t in data["tables"].items()
        }
        return cls(tables, float(data["global"]))


def _subset(query: JobQuery, rows: npt.NDArray[Any]) -> JobQuery:
    idx = rows.astype(np.int64)
    return JobQuery(
        workloads=[query.workloads[i] for i in idx],
        users=[query.users[i] for i in idx],
        queues=[query.queues[i] for i in idx],
        gpu_models=[query.gpu_models[i] for i in idx],
        gpu_count=query.gpu_count[idx],
        submit_time_seconds=query.submit_time_seconds[idx],
    )


def _stack_columns(parts: Sequence[tuple[FloatArray, HistoryColumns]], n: int) -> HistoryColumns:
    names = HistoryColumns.__dataclass_fields__
    out = {name: np.full(n, np.nan) for name in names}
    for rows, cols in parts:
        for name in names:
            out[name][rows.astype(np.int64)] = getattr(cols, name)
    return HistoryColumns(**out)


def time_ordered_history(query: JobQuery, log_run: FloatArray) -> HistoryColumns:
    """History features of training jobs (sorted by submit time) from the jobs submitted before them: the jobs are cut
    into `HISTORY_BLOCKS` chronological blocks and each block sees the blocks before it — what a job at serving time
    sees (the past only). The first block has no history, so the trees also learn what a job without one takes."""
    n = len(query)
    edges = np.linspace(0, n, HISTORY_BLOCKS + 1).round().astype(np.int64)
    parts = []
    for start, end in pairwise(edges.tolist()):
        if end <= start:
            continue
        past = np.arange(start, dtype=np.float64)
        block = np.arange(start, end, dtype=np.float64)
        history = History.from_jobs(_subset(query, past), log_run[:start])
        parts.append((block, history.columns(_subset(query, block))))
    return _stack_columns(parts, n)


def _known(columns: HistoryColumns) -> npt.NDArray[np.bool_]:
    """Jobs with a history estimate of their own (a workload, user or queue with `MIN_HISTORY_JOBS` past jobs)."""
    counts = (columns.workload_count, columns.user_count, columns.queue_count, columns.queue_gpus_count)
    known: npt.NDArray[np.bool_] = np.logical_or.reduce([np.nan_to_num(c) >= MIN_HISTORY_JOBS for c in counts])
    return known


def blend(alpha: float, history_log: FloatArray, model_log: FloatArray, columns: HistoryColumns) -> FloatArray:
    """``α · history + (1 - α) · lightgbm`` of log run time; a job with no history of its own gets the history
    estimate (the median of all jobs) alone: the trees have seen too few such jobs to say more."""
    mixed: FloatArray = np.where(_known(columns), alpha * history_log + (1 - alpha) * model_log, history_log)
    return mixed


@dataclass(frozen=True, slots=True)
class JctPrediction:
    """Run-time quantiles in seconds, one entry per job."""

    p10: FloatArray
    p50: FloatArray
    p90: FloatArray


@dataclass(kw_only=True, eq=False)
class JctModel(BoostedEstimator):
    """History + LightGBM blend with quantiles (see module doc); sklearn conventions (fit returns self)."""

    kind = "jct"

    def _train(self, query: JobQuery, log_run: FloatArray) -> Any:
        history = time_ordered_history(query, log_run)
        return self.train_booster(
            jct_features(query, history),
            log_run,
            feature_names=JCT_FEATURES,
            objective="regression_l1",
        )

    def fit(self, frame: pd.DataFrame) -> JctModel:
        """Train on an executions frame (`advisor.datasets.EXECUTIONS`); jobs with a non-finite run time are dropped."""
        seconds = run_seconds(frame)
        frame = frame[np.isfinite(seconds)].sort_values("submit_time_s", kind="stable").reset_index(drop=True)
        query = job_query_from_frame(frame)
        log_run = np.log(np.maximum(run_seconds(frame), 1.0))
        n = len(frame)
        cut = round(n * (1.0 - VALIDATION_FRACTION))
        train, valid = np.arange(cut, dtype=np.float64), np.arange(cut, n, dtype=np.float64)
        q_train, q_valid = _subset(query, train), _subset(query, valid)
        booster = self._train(q_train, log_run[:cut])
        history = History.from_jobs(q_train, log_run[:cut])
        columns = history.columns(q_valid)
        model_log = _lgbm.predict(booster, jct_features(q_valid, columns))
        history_log = history.estimate(columns)
        truth = log_run[cut:]
        alphas = np.linspace(0.0, 1.0, 11)
        errors = [float(np.mean(np.abs(blend(a, history_log, model_log, columns) - truth))) for a in alphas]
        self.alpha_ = float(alphas[int(np.argmin(errors))])
        residuals = truth - blend(self.alpha_, history_log, model_log, columns)
        self.log_offsets_ = (float(np.quantile(residuals, 0.1)), float(np.quantile(residuals, 0.9)))
        self.validation_ = {
            "mae_log": float(min(errors)),
            "history_mae_log": errors[-1],
            "lightgbm_mae_log": errors[0],
            "p10_p90_coverage": float(
                np.mean((residuals >= self.log_offsets_[0]) & (residuals <= self.log_offsets_[1]))
            ),
            "n_validation": int(n - cut),
        }
        self.booster_ = self._train(query, log_run)
        self.history_ = History.from_jobs(query, log_run)
        self.n_jobs_ = n
        counts = query.gpu_count[np.isfinite(query.gpu_count)]
        self.max_gpu_count_ = float(np.max(counts)) if len(counts) else math.inf
        return self

    def knows_workload(self, workload: str) -> bool:
        """Whether past jobs of `workload` are in the model's history (its estimate then rests on them)."""
        return workload in self.history_.tables.get("workload", {})

    def predict_query(self, query: JobQuery) -> JctPrediction:
        """Run-time quantiles (seconds) for each job (GPU names normalised; the fast path)."""
        if len(query) == 0:
            empty = np.empty(0, dtype=np.float64)
            return JctPrediction(empty, empty, empty)
        columns = self.history_.columns(query)
        model_log = _lgbm.predict(self.booster_, jct_features(query, columns))
        p50_log = blend(self.alpha_, self.history_.estimate(columns), model_log, columns)
        return JctPrediction(
            p10=np.exp(p50_log + self.log_offsets_[0]),
            p50=np.exp(p50_log),
            p90=np.exp(p50_log + self.log_offsets_[1]),
        )

    def predict(
        self,
        *,
        workloads: Sequence[str],
        users: Sequence[str],
        gpu_models: Sequence[str],
        gpu_count: Sequence[float],
        submit_time_seconds: Sequence[float],
        queues: Sequence[str] | None = None,
    ) -> JctPrediction:
        """Run-time quantiles (seconds) for jobs given column by column (GPU models in any spelling, "" = unknown)."""
        query = JobQuery(
            workloads=list(workloads),
            users=list(users),
            queues=list(queues) if queues is not None else [""] * len(workloads),
            gpu_models=[normalize_gpu_model(g) if g else "" for g in gpu_models],
            gpu_count=np.asarray(gpu_count, dtype=np.float64),
            submit_time_seconds=np.asarray(submit_time_seconds, dtype=np.float64),
        )
        return self.predict_query(query)

    def predict_frame(self, frame: pd.DataFrame) -> JctPrediction:
        return self.predict_query(job_query_from_frame(frame))

    def to_artifact(self) -> Artifact:
        return Artifact(
            kind=self.kind,
            params=self.get_params(),
            state={
                "n_jobs": self.n_jobs_,
                "alpha": self.alpha_,
                "log_offsets": list(self.log_offsets_),
                "validation": self.validation_,
                "history": self.history_.to_json(),
                "features": list(JCT_FEATURES),
                "max_gpu_count": self.max_gpu_count_ if math.isfinite(self.max_gpu_count_) else None,
            },
            boosters={"jct": _lgbm.to_text(self.booster_)},
        )

    @classmethod
    def from_artifact(cls, artifact: Artifact) -> JctModel:
        model = cls(**artifact.params)
        model.booster_ = _lgbm.from_text(artifact.boosters["jct"])
        model.alpha_ = float(artifact.state["alpha"])
        offsets = artifact.state["log_offsets"]
        model.log_offsets_ = (float(offsets[0]), float(offsets[1]))
        model.validation_ = dict(artifact.state["validation"])
        model.history_ = History.from_json(artifact.state["history"])
        model.n_jobs_ = int(artifact.state["n_jobs"])
        # Artifacts saved before the GPU-count range was recorded: no bound known.
        top = artifact.state.get("max_gpu_count")
        model.max_gpu_count_ = math.inf if top is None else float(top)
        return model


class MedianJct:
    """The baseline: median run time of the job's workload, else of its user, else of all training jobs."""

    def fit(self, frame: pd.DataFrame) -> MedianJct:
        seconds = pd.Series(run_seconds(frame))
        self.by_workload_ = seconds.groupby(frame["workload"].to_numpy()).median().to_dict()
        self.by_user_ = seconds.groupby(frame["user"].to_numpy()).median().to_dict()
        self.by_workload_.pop("", None)
        self.by_user_.pop("", None)
        self.median_ = float(seconds.median())
        return self

    def predict_frame(self, frame: pd.DataFrame) -> FloatArray:
        return np.array(
            [
                self.by_workload_.get(w, self.by_user_.get(u, self.median_))
                for w, u in zip(frame["workload"], frame["user"], strict=True)
            ],
            dtype=np.float64,
        )
