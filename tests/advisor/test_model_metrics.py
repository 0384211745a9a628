"""The advisor's model series: what each replica serves, and the promoted versions' accuracy next to their baselines."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry
from sqlalchemy.orm import Session, sessionmaker

from advisor.api.model_metrics import ModelCollector, validation_errors
from advisor.predictors import Predictors
from profiler.store import db, repo

# The metrics the reference training writes for each kind (advisor.models.training), trimmed.
INTERFERENCE = {
    "metric": "mae",
    "mae": 0.048,
    "baselines": {"mean": {"mae": 0.149}, "sharing_class": {"mae": 0.138}, "util_sum": {"mae": 0.159}},
}
THROUGHPUT = {
    "metric": "mape",
    "mape": 0.41,
    "baselines": {"mean": {"mape": 7.1, "median_ape": 0.94}, "nearest_gpu": {"mape": 0.49, "median_ape": 0.35}},
}
JCT = {
    "metric": "mae_log",
    "mae_log": 1.37,
    "baseline_mae_log": 1.80,
    "history_mae_log": 1.79,
    "lightgbm_mae_log": 1.39,
    "n_validation": 1088,
    "p10_p90_coverage": 0.8,
}


def test_validation_errors_pair_the_model_with_each_baseline_on_its_primary_metric() -> None:
    assert validation_errors(INTERFERENCE) == [
        ("model", "mae", 0.048),
        ("mean", "mae", 0.149),
        ("sharing_class", "mae", 0.138),
        ("util_sum", "mae", 0.159),
    ]
    assert validation_errors(THROUGHPUT) == [
        ("model", "mape", 0.41),
        ("mean", "mape", 7.1),
        ("nearest_gpu", "mape", 0.49),
    ]
    assert validation_errors(JCT) == [
        ("model", "mae_log", 1.37),
        ("baseline", "mae_log", 1.80),
        ("history", "mae_log", 1.79),
        ("lightgbm", "mae_log", 1.39),
    ]


def test_validation_errors_ignore_what_is_not_a_number_or_has_no_primary_metric() -> None:
    assert validation_errors({}) == []
    assert validation_errors({"mae": 0.1}) == []
    assert validation_errors({"metric": "mae", "mae": "n/a", "baselines": {"mean": {"mae": True}, "x": 3}}) == []


@dataclass
class Serving:
    sessions: sessionmaker[Session]
    predictors: Predictors


def scrape(serving: Serving) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(ModelCollector(serving))
    return registry


def test_replica_reports_what_it_serves_and_the_registry_its_promoted_versions(tmp_path: Path) -> None:
    engine = db.make_engine(f"sqlite:///{tmp_path}/store.db")
    db.upgrade(engine)
    sessions = db.session_factory(engine)
    serving = Serving(sessions, Predictors.heuristic())

    registry = scrape(serving)
    assert registry.get_sample_value("gpuadvisor_advisor_model_served", {"question": "jct", "model": "heuristic"}) == 1
    assert registry.get_sample_value("gpuadvisor_advisor_model_promoted_version", {"kind": "jct"}) is None

    with db.transaction(sessions) as session:
        for metrics in (JCT, JCT):
            repo.add_model_version(
                session=session, kind="jct", artifact_path="/m", metrics=metrics, training_summary={}
            )
        repo.add_model_version(
            session=session, kind="interference", artifact_path="/m", metrics=INTERFERENCE, training_summary={}
        )
        repo.promote_model_version(session=session, kind="jct", version=2)

    registry = scrape(serving)
    assert registry.get_sample_value("gpuadvisor_advisor_model_promoted_version", {"kind": "jct"}) == 2
    labels = {"kind": "jct", "version": "2", "metric": "mae_log"}
    assert (
        registry.get_sample_value("gpuadvisor_advisor_model_validation_error", {**labels, "predictor": "model"}) == 1.37
    )
    assert (
        registry.get_sample_value("gpuadvisor_advisor_model_validation_error", {**labels, "predictor": "history"})
        == 1.79
    )
    # registered but never promoted: not what the registry serves
    assert registry.get_sample_value("gpuadvisor_advisor_model_promoted_version", {"kind": "interference"}) is None
    engine.dispose()


def test_scrape_survives_an_unreadable_registry(tmp_path: Path) -> None:
    engine = db.make_engine(f"sqlite:///{tmp_path}/never-migrated.db")
    serving = Serving(db.session_factory(engine), Predictors.heuristic())
    for _ in range(2):
        registry = scrape(serving)
        assert (
            registry.get_sample_value("gpuadvisor_advisor_model_served", {"question": "speed", "model": "heuristic"})
            == 1
        )
        assert registry.get_sample_value("gpuadvisor_advisor_model_promoted_version", {"kind": "jct"}) is None
    engine.dispose()
