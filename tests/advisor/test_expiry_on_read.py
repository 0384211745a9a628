"""A node silent past `GPUADVISOR_NODE_EXPIRY_SECONDS` is gone from every read of the state — `/v1/nodes`, one node,
scores, the extender, Volcano — even when that read is the first request after the expiry (no ingest, no scrape)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.cluster.state import ClusterState
from advisor.settings import AdvisorSettings
from collector.snapshot import NodeSnapshot
from tests.advisor.factories import snapshot, v1_pod
from tests.support.clock import Clock

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXPIRY_SECONDS = 600.0


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def client(tmp_path: Path, clock: Clock) -> Iterator[TestClient]:
    """`old` last heard from 610 s ago, `live` 20 s ago; nothing has been asked of the advisor since `old` expired."""
    # Staleness above the expiry: a node still held would be scored as fresh, so an unknown score means it left.
    settings = AdvisorSettings(
        db_url=f"sqlite:///{tmp_path}/e.db", no_kube=True, api_token=TOKEN, staleness_seconds=2 * EXPIRY_SECONDS
    )
    state = ClusterState(clock=clock, node_expiry_seconds=EXPIRY_SECONDS)
    with TestClient(create_app(settings, state=state)) as c:
        for name in ("old", "live"):
            assert c.post("/v1/telemetry", json=snapshot(name, gpus=2), headers=AUTH).status_code == 202
        clock.now += 590
        assert c.post("/v1/telemetry", json=snapshot("live", gpus=2), headers=AUTH).status_code == 202
        clock.now += 20
        yield c


def _unknown_scores(client: TestClient, endpoint: str) -> float:
    registry = client.app.state.ctx.metrics.registry  # type: ignore[attr-defined]
    value = registry.get_sample_value("gpuadvisor_advisor_scores_total", {"endpoint": endpoint, "outcome": "unknown"})
    return float(value or 0.0)


def _nodes_list(client: TestClient) -> None:
    assert [n["name"] for n in client.get("/v1/nodes").json()["nodes"]] == ["live"]


def _one_node(client: TestClient) -> None:
    assert client.get("/v1/nodes/old").status_code == 404
    assert client.get("/v1/nodes/live").status_code == 200


def _score_named(client: TestClient) -> None:
    assert client.post("/v1/score", json={"pod": {"gpus": 1}, "nodes": ["old"]}).status_code == 404


def _score_all(client: TestClient) -> None:
    scores = client.post("/v1/score", json={"pod": {"gpus": 1}}).json()["scores"]
    assert [s["node"] for s in scores] == ["live"]


def _extender(client: TestClient) -> None:
    body = {"Pod": v1_pod(gpus=1), "NodeNames": ["old", "live"]}
    assert client.post("/extender/prioritize", json=body).status_code == 200
    assert _unknown_scores(client, "extender") == 1


def _volcano(client: TestClient) -> None:
    body = {"task": {"Pod": v1_pod(gpus=1)}, "nodes": [{"Name": "old"}, {"Name": "live"}]}
    assert client.post("/volcano/prioritize", json=body).status_code == 200
    assert _unknown_scores(client, "volcano") == 1


@pytest.mark.parametrize(
    "first_read",
    [_nodes_list, _one_node, _score_named, _score_all, _extender, _volcano],
    ids=lambda f: f.__name__.strip("_"),
)
def test_the_first_read_after_the_expiry_no_longer_sees_the_silent_node(
    client: TestClient, first_read: Callable[[TestClient], None]
) -> None:
    first_read(client)


def test_the_state_expires_on_read_and_a_returning_node_comes_back(clock: Clock) -> None:
    state = ClusterState(clock=clock, node_expiry_seconds=EXPIRY_SECONDS)
    state.ingest(NodeSnapshot.model_validate(snapshot("a", gpus=1)))
    clock.now += EXPIRY_SECONDS
    assert set(state.nodes) == {"a"}  # exactly at the expiry it is still held
    clock.now += 1
    assert state.record("a") is None
    assert state.nodes == {}
    assert state.records() == []
    assert state.expired_nodes == 1
    state.ingest(NodeSnapshot.model_validate(snapshot("a", gpus=1)))
    assert set(state.nodes) == {"a"}
    clock.now += EXPIRY_SECONDS + 1
    assert state.records() == []
    assert state.expired_nodes == 2
