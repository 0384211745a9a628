"""`/v1/score` as the scheduler plugin calls it (k8s/plugin/gpuadvisor): every node that passed its filter named,
unknown ones scored neutrally, and the pods it has placed but the advisor may not have seen bound yet sent as
`assumed`, so that a burst of pods does not take the same free GPU twice."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.cluster.pods import GPU_MEMORY_ANNOTATION, GPU_MILLI_ANNOTATION, GPU_RESOURCE_NAMES
from advisor.cluster.state import ClusterState, PodAllocation
from advisor.settings import AdvisorSettings
from tests.advisor.factories import snapshot, v1_pod

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROOT = Path(__file__).resolve().parents[2]
PLUGIN_POD_GO = ROOT / "k8s" / "plugin" / "gpuadvisor" / "pod.go"


@pytest.fixture
def state() -> ClusterState:
    return ClusterState(clock=lambda: 1_000_000.0)


@pytest.fixture
def client(tmp_path: Path, state: ClusterState) -> Iterator[TestClient]:
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/a.db", no_kube=True, api_token=TOKEN)
    with TestClient(create_app(settings, state=state)) as c:
        for raw in (snapshot("one", gpus=2), snapshot("two", gpus=2)):
            assert c.post("/v1/telemetry", json=raw, headers=AUTH).status_code == 202
        yield c


def scores(client: TestClient, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    response = client.post("/v1/score", json=body)
    assert response.status_code == 200, response.text
    return {s["node"]: s for s in response.json()["scores"]}


def test_unknown_nodes_are_refused_unless_asked_to_score_them_neutrally(client: TestClient) -> None:
    body: dict[str, Any] = {"pod": v1_pod("p", gpus=1), "nodes": ["one", "ghost"]}
    refused = client.post("/v1/score", json=body)
    assert refused.status_code == 404
    assert "ghost" in refused.json()["detail"]
    got = scores(client, {**body, "unknown_nodes": "neutral"})
    assert got["ghost"]["known"] is False
    assert got["ghost"]["score"] == 50.0
    assert got["one"]["known"] is True


def test_assumed_pods_take_their_gpus_for_this_answer_only(client: TestClient, state: ClusterState) -> None:
    two_gpus = v1_pod("big", gpus=2)
    before = scores(client, {"pod": two_gpus, "nodes": ["one", "two"]})
    assert before["one"]["feasible"]
    assert before["two"]["feasible"]

    assumed = [{"node": "one", "pod": v1_pod("first", gpus=1)}]
    after = scores(client, {"pod": two_gpus, "nodes": ["one", "two"], "assumed": assumed})
    assert after["one"]["feasible"] is False
    assert after["one"]["score"] == 0.0
    assert after["two"]["feasible"] is True
    # The state itself is unchanged: the next request without `assumed` sees both GPUs free again.
    assert all(g.allocated_milli == 0 for g in state.nodes["one"].gpus)
    assert scores(client, {"pod": two_gpus, "nodes": ["one"]})["one"]["feasible"] is True


def test_an_assumed_pod_the_watch_already_holds_counts_once(client: TestClient, state: ClusterState) -> None:
    state.update_pod("ml/first", PodAllocation(pod="ml/first", node="one", gpus=1), None)
    one_gpu = v1_pod("second", gpus=1)
    assumed = [{"node": "one", "pod": v1_pod("first", gpus=1)}]
    response = client.post("/v1/score", json={"pod": one_gpu, "nodes": ["one"], "assumed": assumed})
    assert response.json()["scores"][0]["feasible"] is True  # one of two GPUs held, not both
    assert response.json()["assumed_held"] == ["ml/first"]  # the plugin may stop sending it
    two_more = [*assumed, {"node": "one", "pod": v1_pod("third", gpus=1)}]
    assert scores(client, {"pod": one_gpu, "nodes": ["one"], "assumed": two_more})["one"]["feasible"] is False


def test_assumed_pods_without_gpus_or_on_unknown_nodes_change_nothing(client: TestClient) -> None:
    body = {
        "pod": v1_pod("p", gpus=2),
        "nodes": ["one", "ghost"],
        "unknown_nodes": "neutral",
        "assumed": [{"node": "one", "pod": v1_pod("cpu", gpus=None)}, {"node": "ghost", "pod": v1_pod("g", gpus=1)}],
    }
    got = scores(client, body)
    assert got["one"]["feasible"] is True
    assert got["ghost"]["known"] is False


def test_an_unreadable_assumed_pod_is_a_422_naming_it(client: TestClient) -> None:
    bad = v1_pod("bad", gpus=None, annotations={GPU_MILLI_ANNOTATION: "5000"})
    response = client.post(
        "/v1/score", json={"pod": v1_pod("p", gpus=1), "nodes": ["one"], "assumed": [{"node": "one", "pod": bad}]}
    )
    assert response.status_code == 422
    assert "assumed[0]" in response.text


def _go_strings(block_name: str) -> list[str]:
    text = PLUGIN_POD_GO.read_text()
    block = re.search(rf"var {block_name} = \[\][^{{]*\{{(.*?)\}}", text, re.S)
    assert block is not None, f"{block_name} not found in {PLUGIN_POD_GO}"
    return re.findall(r'"([^"]+)"', block.group(1))


def test_the_plugin_knows_the_same_gpu_names_as_the_advisor() -> None:
    """The plugin decides which pods cost a call; a name missing there would leave those pods unscored."""
    assert _go_strings("gpuResourceNames") == list(GPU_RESOURCE_NAMES)
    assert _go_strings("gpuAnnotations") == [GPU_MILLI_ANNOTATION, GPU_MEMORY_ANNOTATION]


def test_the_same_assumed_pods_on_an_unchanged_node_keep_their_state_until_the_node_changes(
    client: TestClient, state: ClusterState
) -> None:
    # A burst sends the same assumed pods call after call: the node's state with them is built once, so per-state
    # caches (the verdicts' memo, the delta tables) see the node unchanged; a binding on it builds it again.
    first = PodAllocation(pod="ml/first", node="one", gpus=1)
    built = state.with_assumed([first])["one"]
    assert state.with_assumed([first])["one"] is built
    second = PodAllocation(pod="ml/second", node="one", gpus=1)
    both = state.with_assumed([first, second])["one"]
    assert both is not built
    assert sorted(g.allocated_milli for g in both.gpus) == [1000, 1000]
    assert sorted(g.allocated_milli for g in state.with_assumed([first])["one"].gpus) == [0, 1000]
    state.update_pod("ml/bound", PodAllocation(pod="ml/bound", node="one", gpus=1), None)
    after = state.with_assumed([first])["one"]
    assert after is not built
    assert sorted(g.allocated_milli for g in after.gpus) == [1000, 1000]  # the binding and the assumed pod
