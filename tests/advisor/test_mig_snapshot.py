"""MIG instances from the collector's snapshot as placement capacity, end to end through the service: a snapshot
whose MIG devices carry their profile is pushed to the advisor, and a pod asking `nvidia.com/mig-<profile>` (the
device plugin's mixed strategy) is placed on a node with a free instance of it; bound pods asking by profile take
instances until they go; the pending queue's profiles decide which free instances are stranded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.cluster.kube import allocation_from_pod, pending_from_pod
from advisor.cluster.state import ClusterState
from advisor.settings import AdvisorSettings
from tests.advisor.factories import mig_snapshot

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def mig_pod(name: str, profile: str, *, node: str | None = None) -> dict[str, Any]:
    """A v1.Pod asking one MIG instance of `profile`; bound to `node` (Running) when given, else Pending."""
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"limits": {f"nvidia.com/mig-{profile}": "1"}}}]
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": "2026-11-21T10:00:00Z"},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


@pytest.fixture
def state() -> ClusterState:
    return ClusterState()


@pytest.fixture
def client(tmp_path: Path, state: ClusterState) -> Iterator[TestClient]:
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/a.db", no_kube=True, api_token=TOKEN)
    with TestClient(create_app(settings, state=state)) as c:
        yield c


def push(client: TestClient, *raws: dict[str, Any]) -> None:
    for raw in raws:
        response = client.post("/v1/telemetry", json=raw, headers=AUTH)
        assert response.status_code == 202, response.text


def scores(client: TestClient, pod: dict[str, Any], nodes: list[str]) -> dict[str, dict[str, Any]]:
    response = client.post("/v1/score", json={"pod": pod, "nodes": nodes})
    assert response.status_code == 200, response.text
    return {s["node"]: s for s in response.json()["scores"]}


def priorities(client: TestClient, pod: dict[str, Any], nodes: list[str]) -> dict[str, int]:
    response = client.post("/extender/prioritize", json={"Pod": pod, "Nodes": None, "NodeNames": nodes})
    assert response.status_code == 200, response.text
    return {p["Host"]: p["Score"] for p in response.json()}


def test_a_mixed_strategy_mig_pod_is_placed_on_a_free_instance_of_its_profile_from_the_snapshot(
    client: TestClient,
) -> None:
    push(
        client,
        mig_snapshot("big", [["3g.40gb", "3g.40gb"]]),
        mig_snapshot("small", [["3g.40gb"], ["1g.10gb", "1g.10gb", "2g.20gb"]]),
        mig_snapshot("older", [[None, None]]),  # a collector without profiles: no instance it could be placed on
    )
    pod = mig_pod("p", "1g.10gb")
    got = scores(client, pod, ["big", "small", "older"])
    assert got["small"]["feasible"]
    assert got["small"]["gpus"] == [1]
    assert "MIG 1 x 1g.10gb on GPU 1" in got["small"]["reason"]
    assert not got["big"]["feasible"]
    assert "no free MIG instance for 1 x 1g.10gb (free: 2 x 3g.40gb)" in got["big"]["reason"]
    assert not got["older"]["feasible"]
    extender = priorities(client, pod, ["big", "small", "older"])
    assert extender["small"] > extender["big"]
    assert extender["small"] > extender["older"]


def test_the_extender_filter_fails_nodes_without_a_free_instance_of_the_profile(client: TestClient) -> None:
    push(client, mig_snapshot("big", [["3g.40gb", "3g.40gb"]]), mig_snapshot("small", [["1g.10gb", "2g.20gb"]]))
    body = {"Pod": mig_pod("p", "1g.10gb"), "Nodes": None, "NodeNames": ["big", "small"]}
    response = client.post("/extender/filter", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["NodeNames"] == ["small"]
    assert result["FailedNodes"] == {"big": "no free MIG instance for 1 x 1g.10gb (free: 2 x 3g.40gb)"}


def test_the_device_plugins_resource_spelling_asks_for_the_instance_nvml_names(client: TestClient) -> None:
    """NVML names a media-engine profile `1g.10gb+me`; a resource name cannot hold a `+`, so the device plugin
    advertises it as `nvidia.com/mig-1g.10gb.me`: one profile, which the plain `1g.10gb` is not."""
    push(client, mig_snapshot("plain", [["1g.10gb", "1g.10gb"]]), mig_snapshot("media", [["1g.10gb+me", "3g.40gb"]]))
    body = {"Pod": mig_pod("p", "1g.10gb.me"), "Nodes": None, "NodeNames": ["plain", "media"]}
    response = client.post("/extender/filter", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["NodeNames"] == ["media"]
    assert result["FailedNodes"] == {"plain": "no free MIG instance for 1 x 1g.10gb+me (free: 2 x 1g.10gb)"}


def test_a_snapshot_mig_profile_the_advisor_cannot_read_leaves_that_instance_out(
    client: TestClient, state: ClusterState
) -> None:
    push(client, mig_snapshot("odd", [["1g.10gb", "1g.12gb-gfx"]]))
    assert [(i.profile, i.taken) for i in state.nodes["odd"].mig_instances] == [("1g.10gb", False)]


def test_a_bound_mig_pod_takes_an_instance_of_its_profile_until_it_goes(
    client: TestClient, state: ClusterState
) -> None:
    push(client, mig_snapshot("m", [["1g.10gb", "3g.40gb"]]))
    second = mig_pod("second", "1g.10gb")
    assert scores(client, second, ["m"])["m"]["feasible"]

    first = mig_pod("first", "1g.10gb", node="m")
    state.update_pod("ml/first", allocation_from_pod(first), None)
    detail = client.get("/v1/nodes/m").json()
    assert detail["mig_instances"] == [
        {"gpu": 0, "profile": "1g.10gb", "taken": True},
        {"gpu": 0, "profile": "3g.40gb", "taken": False},
    ]
    taken = scores(client, second, ["m"])["m"]
    assert not taken["feasible"]
    assert "no free MIG instance for 1 x 1g.10gb (free: 1 x 3g.40gb)" in taken["reason"]
    assert priorities(client, second, ["m"])["m"] == 0

    state.update_pod("ml/first", None, None)  # the pod is gone: its instance is free again
    assert scores(client, second, ["m"])["m"]["feasible"]


def test_an_assumed_mig_pod_takes_its_instance_for_that_answer(client: TestClient) -> None:
    """A pod the scheduler plugin has placed (its Reserve) but the watch has not seen bound yet holds its instance."""
    push(client, mig_snapshot("m", [["1g.10gb", "3g.40gb"]]))
    second = mig_pod("second", "1g.10gb")
    body = {"pod": second, "nodes": ["m"], "assumed": [{"node": "m", "pod": mig_pod("first", "1g.10gb")}]}
    response = client.post("/v1/score", json=body)
    assert response.status_code == 200, response.text
    (score,) = response.json()["scores"]
    assert not score["feasible"]
    assert "no free MIG instance for 1 x 1g.10gb" in score["reason"]
    assert scores(client, second, ["m"])["m"]["feasible"]  # the state itself is unchanged


def test_the_pending_queue_decides_which_free_instances_are_stranded(client: TestClient, state: ClusterState) -> None:
    """Taking the 1g.10gb on x leaves a 3g.40gb, on y a 2g.20gb: whichever profile the queue waits for is not
    stranded, so the node that keeps it packs better; with nothing waiting the two are alike."""
    push(client, mig_snapshot("x", [["1g.10gb", "3g.40gb"]]), mig_snapshot("y", [["1g.10gb", "2g.20gb"]]))
    pod = mig_pod("p", "1g.10gb")

    alone = scores(client, pod, ["x", "y"])
    assert alone["x"]["components"]["packing"] == alone["y"]["components"]["packing"]

    waiting = pending_from_pod(mig_pod("waiting", "3g.40gb"))
    assert waiting is not None
    state.update_pending("ml/waiting", waiting)
    for_3g = scores(client, pod, ["x", "y"])
    assert for_3g["x"]["components"]["packing"] > for_3g["y"]["components"]["packing"]
    assert "0 free instance(s) no pending pod's profile fits" in for_3g["x"]["reason"]
    assert "1 free instance(s) no pending pod's profile fits" in for_3g["y"]["reason"]

    state.update_pending("ml/waiting", None)
    waiting_2g = pending_from_pod(mig_pod("waiting-2g", "2g.20gb"))
    assert waiting_2g is not None
    state.replace_pending([waiting_2g])
    for_2g = scores(client, pod, ["x", "y"])
    assert for_2g["y"]["components"]["packing"] > for_2g["x"]["components"]["packing"]
