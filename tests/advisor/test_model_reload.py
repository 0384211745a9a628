"""Every replica follows promotions made elsewhere: two advisor apps share one store and one artifact directory; one
(or the CLI) promotes, the other serves the new version after its next poll — and keeps what it serves when the
promoted artifact cannot be read."""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session, sessionmaker

from advisor.api import create_app
from advisor.api.context import AppContext
from advisor.datasets import GavelData, Kind, gavel_trace_executions, load_gavel
from advisor.models.artifact import META_FILE
from advisor.models.interference import InterferenceModel
from advisor.models.jct import JctModel
from advisor.models.reference import GAVEL_THROUGHPUTS, GAVEL_TRACES, bundled_gavel_dir
from advisor.models.registry import register, rollback, save_trained
from advisor.models.throughput import ThroughputModel
from advisor.models.training import PRIMARY_METRIC, Model, Trained
from advisor.predictors import UsageProfile
from advisor.settings import AdvisorSettings
from profiler.records import ProfileRecord
from profiler.store import db, repo


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[Kind, Path]:
    """One small (fast to fit) artifact of every kind, trained on slices of the bundled Gavel data."""
    root = tmp_path_factory.mktemp("reload-artifacts")
    gavel: GavelData = load_gavel(bundled_gavel_dir() / GAVEL_THROUGHPUTS)
    executions = gavel_trace_executions(bundled_gavel_dir() / GAVEL_TRACES, gavel.throughputs).head(400)
    models: list[Model] = [
        InterferenceModel(num_boost_round=10, num_threads=1).fit(gavel.colocations.head(400)),
        JctModel(num_boost_round=10, num_threads=1).fit(executions),
        ThroughputModel(num_boost_round=10, num_threads=1).fit(gavel.throughputs),
    ]
    out: dict[Kind, Path] = {}
    for model in models:
        out[model.kind] = root / model.kind
        # A validation error of 1.0 for each: a later version with 2.0 is registered but not promoted.
        # All validated on the same data, so the registry compares their recorded metrics.
        metrics = {
            "metric": PRIMARY_METRIC[model.kind],
            PRIMARY_METRIC[model.kind]: 1.0,
            "validation": {"split": "test", "rows": 1, "data": "the same rows"},
        }
        save_trained(Trained(model=model, metrics=metrics, training_summary={}), out[model.kind])
    return out


@dataclass
class Cluster:
    """Two replicas on one store file and one artifact directory, and the registry as the CLI reaches it."""

    sessions: sessionmaker[Session]
    db_path: Path
    model_dir: Path
    a: TestClient
    b: TestClient

    def ctx(self, client: TestClient) -> AppContext:
        app = client.app
        assert isinstance(app, FastAPI)
        ctx = app.state.ctx
        assert isinstance(ctx, AppContext)
        return ctx

    def new_version(self, kind: Kind, source: Path, name: str, *, error: float | None = None) -> Path:
        """Copy an artifact under the shared model directory (optionally with another validation error) and register
        it, as `gpuadvisor models train --db` does."""
        directory = self.model_dir / kind / name
        shutil.copytree(source, directory)
        if error is not None:
            meta = json.loads((directory / META_FILE).read_text())
            meta["metrics"][PRIMARY_METRIC[kind]] = error
            (directory / META_FILE).write_text(json.dumps(meta))
        register(self.sessions, kind, directory)
        return directory


def serving(client: TestClient) -> dict[str, str]:
    served: dict[str, str] = client.get("/v1/models").json()["serving"]
    return served


def score_models(client: TestClient) -> dict[str, str]:
    models: dict[str, str] = client.post("/v1/score", json={"pod": {"gpus": 1}}).json()["models"]
    return models


def served_metric(client: TestClient) -> dict[str, str]:
    """What `gpuadvisor_advisor_model_served` says answers each question."""
    out: dict[str, str] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        if family.name == "gpuadvisor_advisor_model_served":
            for sample in family.samples:
                assert sample.value == 1.0
                out[sample.labels["question"]] = sample.labels["model"]
    return out


@pytest.fixture
def cluster(tmp_path: Path, artifacts: dict[Kind, Path]) -> Iterator[Cluster]:
    db_path = tmp_path / "store.db"
    url = f"sqlite:///{db_path}"
    engine = db.make_engine(url)
    db.upgrade(engine)
    sessions = db.session_factory(engine)
    model_dir = tmp_path / "models"
    for kind, source in artifacts.items():
        directory = model_dir / kind / "v1"
        shutil.copytree(source, directory)
        register(sessions, kind, directory)
    # Reloader off: the tests drive the poll (`ServedModels.refresh`) themselves.
    settings = AdvisorSettings(db_url=url, model_dir=model_dir, no_kube=True, model_reload_seconds=0)
    with ExitStack() as stack:
        a = stack.enter_context(TestClient(create_app(settings)))
        b = stack.enter_context(TestClient(create_app(settings)))
        yield Cluster(sessions, db_path, model_dir, a, b)
    engine.dispose()


def test_a_replica_serves_a_version_promoted_elsewhere_after_one_poll(
    cluster: Cluster, artifacts: dict[Kind, Path]
) -> None:
    assert serving(cluster.b)["jct"] == "jct v1"
    cluster.new_version("jct", artifacts["jct"], "v2")  # as good as v1: promoted

    assert serving(cluster.b)["jct"] == "jct v1"  # nothing changes between polls
    assert cluster.ctx(cluster.b).models.refresh()
    assert serving(cluster.b) == {**serving(cluster.a), "jct": "jct v2"}  # `a` has not polled yet
    assert score_models(cluster.b)["jct"] == "jct v2"
    assert served_metric(cluster.b)["jct"] == "jct v2"
    assert served_metric(cluster.b)["interference"] == "interference v1"

    assert rollback(cluster.sessions, "jct") == 1  # `gpuadvisor models rollback jct`
    assert cluster.ctx(cluster.b).models.refresh()
    assert serving(cluster.b)["jct"] == "jct v1"
    assert served_metric(cluster.b)["jct"] == "jct v1"


def test_an_unchanged_promotion_reloads_nothing(cluster: Cluster, artifacts: dict[Kind, Path]) -> None:
    ctx = cluster.ctx(cluster.b)
    bundle = ctx.predictors
    assert not ctx.models.refresh()
    cluster.new_version("jct", artifacts["jct"], "v2-worse", error=2.0)
    listed = {(v["kind"], v["version"]): v["promoted"] for v in cluster.b.get("/v1/models").json()["versions"]}
    assert listed[("jct", 1)]
    assert not listed[("jct", 2)]  # registered, not promoted
    assert not ctx.models.refresh()
    assert ctx.predictors is bundle
    assert serving(cluster.b)["jct"] == "jct v1"


def _remove(directory: Path) -> None:
    shutil.rmtree(directory)


def _truncate_booster(directory: Path) -> None:
    (booster,) = directory.glob("*.txt")
    booster.write_text(booster.read_text()[:200])


@pytest.mark.parametrize("damage", [_remove, _truncate_booster], ids=["missing", "truncated booster"])
def test_an_unreadable_promoted_artifact_keeps_the_served_models(
    cluster: Cluster, artifacts: dict[Kind, Path], caplog: pytest.LogCaptureFixture, damage: Callable[[Path], None]
) -> None:
    ctx = cluster.ctx(cluster.b)
    before = serving(cluster.b)
    bundle = ctx.predictors
    damage(cluster.new_version("jct", artifacts["jct"], "v2"))  # promoted, then lost or damaged

    with caplog.at_level(logging.WARNING, logger="advisor.serving"):
        assert not ctx.models.refresh()
        assert not ctx.models.refresh()  # the same promotion is not read (nor logged) again
    assert ctx.predictors is bundle
    assert serving(cluster.b) == before
    assert served_metric(cluster.b)["jct"] == "jct v1"
    still = [r for r in caplog.records if r.name == "advisor.serving" and "still serving" in r.getMessage()]
    assert len(still) == 1
    assert "jct v1" in still[0].getMessage()

    rollback(cluster.sessions, "jct")  # a new promotion is tried again
    assert ctx.models.refresh()
    assert serving(cluster.b)["jct"] == "jct v1"


def test_an_unreadable_registry_keeps_the_served_models(cluster: Cluster) -> None:
    ctx = cluster.ctx(cluster.b)
    before = score_models(cluster.b)
    assert before["jct"] == "jct v1"
    with sqlite3.connect(cluster.db_path) as conn:
        conn.execute("ALTER TABLE models RENAME TO models_away")
    assert not ctx.models.refresh()
    assert score_models(cluster.b) == before
    with sqlite3.connect(cluster.db_path) as conn:
        conn.execute("ALTER TABLE models_away RENAME TO models")
    assert not ctx.models.refresh()  # back, and nothing was promoted meanwhile
    assert score_models(cluster.b) == before


def test_a_new_profile_in_the_store_is_indexed_after_one_poll(cluster: Cluster) -> None:
    """A trial run that finished elsewhere (the profiler writes the store) is used without a restart or a training."""
    ctx = cluster.ctx(cluster.b)
    served = serving(cluster.b)
    assert ctx.predictors.usage.usage("my-bert", "a100") is None
    profile = ProfileRecord(
        workload="my-bert",
        gpu_model="NVIDIA A100-SXM4-40GB",
        throughput_samples_per_s=420.0,
        batch_size=32,
        source="trial",
        sm_util_mean_ratio=0.6,
        mem_bw_util_ratio=0.3,
    )
    with cluster.sessions.begin() as session:
        repo.save_profile(session=session, profile=profile)

    assert ctx.models.refresh()
    assert ctx.predictors.usage.usage("my-bert", "a100") == UsageProfile(0.6, 0.3)
    assert served["usage"] == "heuristic"
    assert serving(cluster.b) == {**served, "usage": "profiles"}  # the models stay; only the profiles were re-read
    assert not ctx.models.refresh()  # nothing new since

    with cluster.sessions.begin() as session:  # measured again: the same row, rewritten
        repo.save_profile(session=session, profile=replace(profile, sm_util_mean_ratio=0.9))
    assert ctx.models.refresh()
    assert ctx.predictors.usage.usage("my-bert", "a100") == UsageProfile(0.9, 0.3)


def _reloader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "advisor-model-reload"]


@pytest.mark.parametrize(("seconds", "running"), [(3600.0, 1), (0.0, 0)])
def test_the_lifespan_runs_the_reloader_unless_disabled(tmp_path: Path, seconds: float, running: int) -> None:
    before = len(_reloader_threads())
    settings = AdvisorSettings(
        db_url=f"sqlite:///{tmp_path}/store.db", model_dir=tmp_path, no_kube=True, model_reload_seconds=seconds
    )
    engine = db.make_engine(settings.db_url)
    db.upgrade(engine)
    engine.dispose()
    with TestClient(create_app(settings)):
        assert len(_reloader_threads()) == before + running
    assert len(_reloader_threads()) == before


def test_the_reload_interval_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert AdvisorSettings().model_reload_seconds == 60.0
    monkeypatch.setenv("GPUADVISOR_MODEL_RELOAD_SECONDS", "5")
    assert AdvisorSettings().model_reload_seconds == 5.0
    monkeypatch.setenv("GPUADVISOR_MODEL_RELOAD_SECONDS", "-1")
    with pytest.raises(ValueError, match="model_reload_seconds"):
        AdvisorSettings()
