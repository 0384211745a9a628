"""`/v1/trialruns` and `/v1/profiles` as users call them; submission goes to a kmock Kubernetes API."""

from __future__ import annotations

import asyncio
from pathlib import Path

import kmock
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.api.routes.trialruns import get_submitter
from advisor.settings import AdvisorSettings
from collector.kube import make_api_client
from profiler.kube import KubeCluster
from profiler.records import ColocationRecord, ProfileRecord
from profiler.store import db, repo
from tests.profiler.specs import VALID, trialrun

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TRIALRUNS = kmock.resource("gpuadvisor.io", "v1alpha1", "trialruns")


def _app(tmp_path: Path) -> FastAPI:
    url = f"sqlite:///{tmp_path}/api.db"
    engine = db.make_engine(url)
    db.upgrade(engine)
    engine.dispose()
    return create_app(AdvisorSettings(db_url=url, no_kube=True, api_token=TOKEN))


def test_an_invalid_trialrun_is_a_422_naming_the_field(tmp_path: Path) -> None:
    client = TestClient(_app(tmp_path))
    response = client.post("/v1/trialruns", json=trialrun(matrix={"gpuCounts": [-1]}), headers=AUTH)
    assert response.status_code == 422
    assert response.json()["detail"][0]["msg"].startswith("spec.matrix.gpuCounts[0]:")
    assert client.post("/v1/trialruns", json=VALID).status_code == 401


def test_without_kubernetes_a_valid_trialrun_cannot_run_and_says_how_to(tmp_path: Path) -> None:
    response = TestClient(_app(tmp_path)).post("/v1/trialruns", json=VALID, headers=AUTH)
    assert response.status_code == 503
    assert "--local" in response.json()["detail"]


@pytest.mark.asyncio
async def test_a_posted_trialrun_is_created_in_the_cluster_and_listed(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    kmock.resources["gpuadvisor.io/v1alpha1/trialruns"] = {}
    app = _app(tmp_path)
    app.dependency_overrides[get_submitter] = lambda: KubeCluster(make_api_client(str(kmock.url).rstrip("/")))
    client = TestClient(app)

    created = await asyncio.to_thread(client.post, "/v1/trialruns", json=VALID, headers=AUTH)
    assert created.status_code == 201, created.text
    assert created.json()["status"]["phase"] == "Pending"
    stored = kmock.objects[TRIALRUNS, "ml", "resnet-sweep"]
    assert stored["spec"]["matrix"]["gpuCounts"] == [1, 2]

    again = await asyncio.to_thread(client.post, "/v1/trialruns", json=VALID, headers=AUTH)
    assert again.status_code == 409

    listed = await asyncio.to_thread(client.get, "/v1/trialruns")
    assert [(r["namespace"], r["name"], r["phase"]) for r in listed.json()] == [("ml", "resnet-sweep", "Pending")]
    detail = await asyncio.to_thread(client.get, "/v1/trialruns/ml/resnet-sweep")
    assert detail.json()["spec"]["workload"] == "resnet50"
    missing = await asyncio.to_thread(client.get, "/v1/trialruns/ml/nope")
    assert missing.status_code == 404


def test_profiles_are_listed_with_their_colocations(tmp_path: Path) -> None:
    app = _app(tmp_path)
    sessions = app.state.ctx.sessions
    with db.transaction(sessions) as s:
        repo.save_profile(
            session=s, profile=ProfileRecord(workload="bert", gpu_model="A100", throughput_samples_per_s=90)
        )
        repo.save_profile(
            session=s, profile=ProfileRecord(workload="gpt", gpu_model="A100", throughput_samples_per_s=9)
        )
        repo.save_colocation(
            session=s,
            colocation=ColocationRecord(
                gpu_model="A100",
                workload_a="bert",
                workload_b="lstm",
                solo_throughput_a=90,
                solo_throughput_b=50,
                coloc_throughput_a=45,
                coloc_throughput_b=40,
            ),
        )
    body = TestClient(app).get("/v1/profiles", params={"workload": "bert"}).json()
    assert [p["workload"] for p in body["profiles"]] == ["bert"]
    assert body["colocations"][0]["norm_a"] == pytest.approx(0.5)
    assert len(TestClient(app).get("/v1/profiles").json()["profiles"]) == 2


# the authorizer's denial as the API server words it (k8s.io/apiserver endpoints/handlers/responsewriters)
RBAC_DENIAL = (
    'trialruns.gpuadvisor.io is forbidden: User "system:serviceaccount:gpuadvisor:gpuadvisor-advisor" cannot create '
    'resource "trialruns" in API group "gpuadvisor.io" in the namespace "ml"'
)


@pytest.mark.asyncio
async def test_a_trialrun_in_a_namespace_without_trials_is_a_403_naming_it(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    # the API server's answer where the advisor's ServiceAccount has no Role (deploy/trial-namespace)
    kmock.resources["gpuadvisor.io/v1alpha1/trialruns"] = {}
    kmock["post", kmock.namespace("ml")] << 403 << {"kind": "Status", "code": 403, "message": RBAC_DENIAL}
    app = _app(tmp_path)
    app.dependency_overrides[get_submitter] = lambda: KubeCluster(make_api_client(str(kmock.url).rstrip("/")))

    response = await asyncio.to_thread(TestClient(app).post, "/v1/trialruns", json=VALID, headers=AUTH)
    assert response.status_code == 403
    assert response.json()["detail"].startswith("metadata.namespace: trials are not allowed in namespace 'ml'")
    assert (await asyncio.to_thread(TestClient(app).get, "/v1/trialruns")).json() == []


@pytest.mark.asyncio
async def test_a_trialrun_refused_by_an_admission_webhook_is_a_403_naming_admission_not_the_namespace(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    # how the API server passes a validating webhook's denial on (k8s.io/apiserver admission/plugin/webhook/errors)
    denial = 'admission webhook "trials.policy.example" denied the request: TrialRuns need a team label'
    kmock.resources["gpuadvisor.io/v1alpha1/trialruns"] = {}
    kmock["post", kmock.namespace("ml")] << 403 << {"kind": "Status", "code": 403, "message": denial}
    app = _app(tmp_path)
    app.dependency_overrides[get_submitter] = lambda: KubeCluster(make_api_client(str(kmock.url).rstrip("/")))

    response = await asyncio.to_thread(TestClient(app).post, "/v1/trialruns", json=VALID, headers=AUTH)
    assert response.status_code == 403
    detail = response.json()["detail"]
    assert detail.startswith("the cluster's admission control refused the TrialRun in namespace 'ml'")
    assert "trials.policy.example" in detail
    assert "not allowed in namespace" not in detail
    assert (await asyncio.to_thread(TestClient(app).get, "/v1/trialruns")).json() == []
