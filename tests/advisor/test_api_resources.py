"""Node CPU/memory through the API: the kube watch (against kmock) or the scheduler's node objects give what is free,
and `/v1/score` and the extender verbs rule out a node whose CPU is exhausted for a pod that asks for CPU."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.api.metrics import AdvisorMetrics
from advisor.cluster.kube import KubeWatch
from advisor.cluster.state import ClusterState
from advisor.settings import AdvisorSettings
from collector.snapshot import NodeSnapshot
from tests.advisor.factories import snapshot, v1_pod
from tests.advisor.test_kube import _api, _eventually, cpu_pod, node


@pytest.fixture
def state_and_client(tmp_path: Path) -> Iterator[tuple[ClusterState, TestClient]]:
    state = ClusterState()
    for name in ("busy-cpu", "idle"):
        state.ingest(NodeSnapshot.model_validate(snapshot(name)))  # 8 free GPUs each
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/a.db", no_kube=True)
    with TestClient(create_app(settings, state=state)) as client:
        yield state, client


def _check_cpu_fit(client: TestClient, node_list: dict[str, Any] | None = None) -> None:
    """The incoming pod asks for 1 GPU and 4100 milli-CPU (factories.v1_pod); busy-cpu has 500 free, idle 8000."""
    names = ["busy-cpu", "idle"]
    score = client.post("/v1/score", json={"pod": v1_pod(gpus=1), "nodes": names})
    assert score.status_code == 200, score.text
    by_node = {s["node"]: s for s in score.json()["scores"]}
    assert not by_node["busy-cpu"]["feasible"]
    assert "needs 4100 milli-CPU, has 500 free" in by_node["busy-cpu"]["reason"]
    assert by_node["idle"]["feasible"]
    assert by_node["idle"]["score"] > 0
    args = {"Pod": v1_pod(gpus=1), "NodeNames": None if node_list else names, "Nodes": node_list}
    prioritize = client.post("/extender/prioritize", json=args)
    assert {h["Host"]: h["Score"] for h in prioritize.json()} == {"busy-cpu": 0, "idle": 10}
    failed = client.post("/extender/filter", json=args).json()["FailedNodes"]
    assert set(failed) == {"busy-cpu"}
    # a pod asking for little enough CPU still fits there
    small = client.post("/v1/score", json={"pod": {"gpus": 1, "cpu_milli": 500}, "nodes": names}).json()["scores"]
    assert all(s["feasible"] for s in small)


@pytest.mark.asyncio
async def test_the_kube_watch_makes_a_cpu_exhausted_node_infeasible_through_the_api(
    kmock: kmock.KubernetesEmulator, state_and_client: tuple[ClusterState, TestClient]
) -> None:
    state, client = state_and_client
    kmock.objects["v1/nodes", None, "busy-cpu"] = node("busy-cpu", "8", "64Gi")
    kmock.objects["v1/nodes", None, "idle"] = node("idle", "8", "64Gi")
    kmock.objects["v1/pods", "ml", "web"] = cpu_pod("web", "7500m", "1Gi", node="busy-cpu")  # no GPU
    before = (await asyncio.to_thread(client.post, "/v1/score", json={"pod": v1_pod(gpus=1)})).json()["scores"]
    assert all(s["feasible"] for s in before)  # CPU unknown: GPU-only, as before the watch
    watch = KubeWatch(state, AdvisorMetrics(), _api(kmock), read_timeout_seconds=0.5).start()
    try:
        assert await _eventually(
            lambda: state.nodes["busy-cpu"].cpu_free_milli == 500 and state.nodes["idle"].cpu_free_milli == 8000
        )
        await asyncio.to_thread(_check_cpu_fit, client)
    finally:
        await asyncio.to_thread(watch.stop)


def test_node_objects_in_an_extender_request_change_nothing_the_advisor_keeps(
    state_and_client: tuple[ClusterState, TestClient],
) -> None:
    """Anyone who can reach the extender port could otherwise make nodes look full or relabel them for every later
    request: the Node objects of a non-cache-capable scheduler serve that request only."""
    state, client = state_and_client
    state.replace_pods([], [])  # the pod watch has listed: a node's allocatable alone would decide its free CPU
    labelled = node("idle", "8", "64Gi")
    labelled["metadata"]["labels"] = {"zone": "a"}
    nodes = {"items": [node("busy-cpu", "1", "1Gi"), labelled]}
    result = client.post("/extender/filter", json={"Pod": v1_pod(gpus=1), "Nodes": nodes}).json()
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == result["NodeNames"]
    prioritized = client.post("/extender/prioritize", json={"Pod": v1_pod(gpus=1), "Nodes": nodes})
    assert prioritized.status_code == 200
    assert state.node_labels("idle") is None
    assert state.nodes["busy-cpu"].cpu_allocatable_milli is None
    scores = client.post("/v1/score", json={"pod": {"gpus": 1, "cpu_milli": 4000}}).json()["scores"]
    assert all(s["feasible"] for s in scores)  # the request's 1-CPU busy-cpu did not stick
