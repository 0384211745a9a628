"""Model versions and their accuracy on `/metrics`, for the advisor dashboard.

Two views: what answers each scoring question on this replica right now (a model version or the heuristic), and the
promoted version of each model kind in the registry with its validation error next to its baselines'. A custom
collector reads the registry at scrape time (one small query per kind), so the series follow promotions and
rollbacks made by any replica or the CLI without bookkeeping.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from advisor.datasets import KINDS
from advisor.predictors import Predictors
from profiler.store import repo
from profiler.store.models import ModelVersion

log = logging.getLogger(__name__)

MODEL = "model"


def validation_errors(metrics: Mapping[str, Any]) -> list[tuple[str, str, float]]:
    """(predictor, metric, value) from a version's validation metrics: `model` for the version itself, then each
    baseline it was compared with — nested as `baselines.<name>.<metric>` or flat as `<name>_<metric>`."""
    metric = metrics.get("metric")
    if not isinstance(metric, str):
        return []
    found: list[tuple[str, str, float]] = []

    def add(predictor: str, value: object) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool):
            found.append((predictor, metric, float(value)))

    add(MODEL, metrics.get(metric))
    baselines = metrics.get("baselines")
    if isinstance(baselines, Mapping):
        for name, values in sorted(baselines.items()):
            if isinstance(values, Mapping):
                add(str(name), values.get(metric))
    suffix = f"_{metric}"
    for key, value in sorted(metrics.items()):
        if key.endswith(suffix) and key != metric:
            add(key.removesuffix(suffix), value)
    return found


class Serving(Protocol):
    """What the collector reads on each scrape (the app's `AppContext`): the store and the live predictor bundle."""

    @property
    def sessions(self) -> sessionmaker[Session]: ...

    @property
    def predictors(self) -> Predictors: ...


class ModelCollector(Collector):
    """Builds the model families on every scrape from `serving` (the predictors are replaced on every reload)."""

    def __init__(self, serving: Serving) -> None:
        self._serving = serving
        self._registry_failing = False

    def collect(self) -> Iterator[Metric]:
        served = GaugeMetricFamily(
            "gpuadvisor_advisor_model_served",
            "1 for what answers each scoring question on this replica: a model version or the heuristic.",
            labels=["question", "model"],
        )
        for question, name in sorted(self._serving.predictors.names().items()):
            served.add_metric([question, name], 1.0)
        yield served

        promoted = GaugeMetricFamily(
            "gpuadvisor_advisor_model_promoted_version",
            "Promoted version of each model kind in the registry.",
            labels=["kind"],
        )
        error = GaugeMetricFamily(
            "gpuadvisor_advisor_model_validation_error",
            "Validation error of the promoted version of each model kind (lower is better): the model itself "
            "(predictor=model) and each baseline it was compared with.",
            labels=["kind", "version", "metric", "predictor"],
        )
        for row in self._promoted():
            promoted.add_metric([row.kind], float(row.version))
            for predictor, metric, value in validation_errors(row.metrics):
                error.add_metric([row.kind, str(row.version), metric, predictor], value)
        yield promoted
        yield error

    def _promoted(self) -> list[ModelVersion]:
        """The promoted rows; none (logged once per outage, the scrape still succeeds) while the store is down."""
        try:
            with self._serving.sessions() as session:
                rows = [repo.promoted_model_version(session=session, kind=kind) for kind in KINDS]
        except SQLAlchemyError as e:
            if not self._registry_failing:
                log.warning("model registry unreadable, model series left out of /metrics: %s", e.__class__.__name__)
            self._registry_failing = True
            return []
        self._registry_failing = False
        return [row for row in rows if row is not None]
