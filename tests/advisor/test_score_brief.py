"""`/v1/score` with `detail: brief`, as the scheduler plugin asks once per scheduling cycle (k8s/plugin/gpuadvisor):
the same verdicts as the explained answer without the explanations, and for a node the pod does not fit, why and
whether it never can (its Filter's UnschedulableAndUnresolvable, the extender's FailedAndUnresolvableNodes)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.cluster.state import ClusterState
from advisor.settings import AdvisorSettings
from tests.advisor.factories import snapshot, v1_pod

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NODES = ["two", "four", "ghost"]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/a.db", no_kube=True, api_token=TOKEN)
    with TestClient(create_app(settings, state=ClusterState(clock=lambda: 1_000_000.0))) as c:
        for raw in (snapshot("two", gpus=2), snapshot("four", gpus=4)):
            assert c.post("/v1/telemetry", json=raw, headers=AUTH).status_code == 202
        yield c


def answer(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/score", json={"nodes": NODES, "unknown_nodes": "neutral", **body})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_brief_has_the_full_answers_verdicts_in_the_same_order_without_explanations(client: TestClient) -> None:
    pod = v1_pod("p", gpus=1)
    full, brief = answer(client, {"pod": pod}), answer(client, {"pod": pod, "detail": "brief"})
    verdict = ("node", "score", "feasible", "known")
    assert [[s[k] for k in verdict] for s in brief["scores"]] == [[s[k] for k in verdict] for s in full["scores"]]
    assert all(set(s) == set(verdict) for s in brief["scores"])  # every node fits or is unknown: nothing else
    assert len(json.dumps(brief["scores"])) * 3 < len(json.dumps(full["scores"]))
    assert brief["models"] == full["models"]


def test_brief_says_which_nodes_never_fit_and_which_lack_room_now(client: TestClient) -> None:
    three = v1_pod("three", gpus=3)
    taken = [{"node": "four", "pod": v1_pod("first", gpus=2)}]
    got = {s["node"]: s for s in answer(client, {"pod": three, "detail": "brief", "assumed": taken})["scores"]}
    assert got["two"]["feasible"] is False
    assert got["two"]["unresolvable"] is True
    assert got["two"]["reason"] == "the node has 2 GPUs, the pod asks for 3"
    assert got["four"]["feasible"] is False
    assert got["four"]["unresolvable"] is False  # two of its four GPUs are taken: room later
    assert got["four"]["reason"]
    assert got["ghost"] == {"node": "ghost", "score": 50.0, "feasible": True, "known": False}  # neutral, unfiltered


def test_an_unknown_detail_is_a_422_naming_the_field(client: TestClient) -> None:
    response = client.post("/v1/score", json={"pod": v1_pod("p", gpus=1), "detail": "terse"})
    assert response.status_code == 422
    assert "detail" in response.text
