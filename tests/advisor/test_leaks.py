"""Reads reveal nothing sensitive (issue 40): a trial run's env values are redacted, `/readyz` names no host or port
and stays ready while the store is down (scoring needs none), and a database URL is never echoed with its password."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.api.routes.trialruns import REDACTED
from advisor.settings import AdvisorSettings
from profiler.store import db, repo
from tests.advisor.factories import snapshot

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _migrated(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/leaks.db"
    engine = db.make_engine(url)
    db.upgrade(engine)
    engine.dispose()
    return url


def test_a_trial_runs_env_values_are_redacted_on_read(tmp_path: Path) -> None:
    url = _migrated(tmp_path)
    spec = {
        "workload": "bert",
        "image": "registry.example/bert:1",
        "command": ["python", "train.py"],
        "env": [{"name": "WANDB_API_KEY", "value": "wandb-secret-123"}, {"name": "EMPTY"}],
        "matrix": {"gpuCounts": [1]},
        "colocateWith": [{"workload": "r50", "command": ["x"], "env": [{"name": "HF_TOKEN", "value": "hf-secret"}]}],
    }
    engine = db.make_engine(url)
    with db.session_factory(engine)() as session, session.begin():
        repo.save_trial_run(session=session, namespace="ml", name="bert-sweep", workload="bert", spec=spec)
    engine.dispose()
    with TestClient(create_app(AdvisorSettings(db_url=url, no_kube=True, api_token=TOKEN))) as client:
        response = client.get("/v1/trialruns/ml/bert-sweep")
    assert response.status_code == 200
    assert "secret" not in response.text
    got = response.json()["spec"]
    assert got["env"] == [{"name": "WANDB_API_KEY", "value": REDACTED}, {"name": "EMPTY"}]
    assert got["colocateWith"][0]["env"] == [{"name": "HF_TOKEN", "value": REDACTED}]
    assert got["image"] == spec["image"]


def test_readyz_stays_ready_without_the_store_and_names_no_host(tmp_path: Path) -> None:
    url = "postgresql+psycopg://gpuadvisor:pw-secret@127.0.0.1:9/gpuadvisor?connect_timeout=2"
    with TestClient(create_app(AdvisorSettings(db_url=url, no_kube=True, api_token=TOKEN))) as client:
        assert client.post("/v1/telemetry", json=snapshot("n1"), headers=AUTH).status_code == 202
        ready = client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json() == {"status": "ready", "store": "unavailable"}
        assert "127.0.0.1" not in ready.text
        assert ":9" not in ready.text
        scored = client.post("/v1/score", json={"pod": {"gpus": 1}, "nodes": ["n1"]})
        assert scored.status_code == 200  # what readiness promises


def test_readyz_reports_a_missing_schema_apart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/empty.db"
    with TestClient(create_app(AdvisorSettings(db_url=url, no_kube=True))) as client:
        assert client.get("/readyz").json() == {"status": "ready", "store": "schema_missing"}
    with TestClient(create_app(AdvisorSettings(db_url=_migrated(tmp_path), no_kube=True))) as client:
        body = client.get("/readyz").json()
    assert body["store"] == "ok"
    assert body["schema_revision"]


@pytest.mark.parametrize(
    "url",
    [
        "mysql://admin:hunter2@db.example:3306/gpuadvisor",
        "post gres://admin:hunter2@db.example/gpuadvisor",
        "postgresql+psycopg://admin:hunter2@db.example:port/gpuadvisor",
        "oracle://admin:hunter2@db/x",
    ],
)
def test_a_database_url_is_never_echoed_with_its_password(url: str) -> None:
    with pytest.raises(db.StoreError) as raised:
        db.make_engine(url)
    assert "hunter2" not in str(raised.value)
    assert "admin" in str(raised.value)
