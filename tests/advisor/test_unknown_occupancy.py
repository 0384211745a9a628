"""Unknown is never free (issue 40): a GPU whose collector could not read its process list is taken for every route
that places pods, with the reason saying so; and a stale node's lost GPUs follow `GPUADVISOR_STRICT_STALENESS`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
GIB = 1024**3


def _unknown(body: dict[str, Any], indices: range | list[int]) -> dict[str, Any]:
    """The snapshot with the process lists of `indices` unreadable, as the collector reports them: busy by NVML's
    own figures, no process listed."""
    for gpu in body["gpus"]:
        if gpu["index"] in indices:
            gpu.update(processes=[], processes_known=False, utilization_ratio=0.9, memory_used_bytes=40 * GIB)
    return body


def _client(tmp_path: Path, clock: Clock, **settings: object) -> TestClient:
    app_settings = AdvisorSettings(
        db_url=f"sqlite:///{tmp_path}/u.db",
        no_kube=True,
        api_token=TOKEN,
        **settings,  # type: ignore[arg-type]
    )
    return TestClient(create_app(app_settings, state=ClusterState(clock=clock)))


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with _client(tmp_path, Clock()) as c:
        yield c


def test_older_snapshots_without_the_field_read_as_known() -> None:
    parsed = NodeSnapshot.model_validate(snapshot("n1", gpus=1))
    assert parsed.gpus[0].processes_known is True


def test_allocate_never_picks_a_gpu_whose_processes_are_unknown(client: TestClient) -> None:
    body = _unknown(snapshot("n1", gpus=2), [0])
    assert client.post("/v1/telemetry", json=body, headers=AUTH).status_code == 202
    picked = client.post("/v1/allocate", json={"pod": {"gpus": 1}, "node": "n1"}).json()
    assert picked["feasible"]
    assert picked["gpus"] == [1]
    two = client.post("/v1/allocate", json={"pod": {"gpus": 2}, "node": "n1"}).json()
    assert not two["feasible"]
    assert "1 GPU counted as taken: the collector could not read which processes use them" in two["reason"]
    share = client.post("/v1/allocate", json={"pod": {"gpu_milli": 500}, "node": "n1"}).json()
    assert share["gpus"] == [1]


def test_a_node_whose_gpus_are_all_unknown_is_full_for_score_and_filter(client: TestClient) -> None:
    body = _unknown(snapshot("n1", gpus=8), range(8))
    assert client.post("/v1/telemetry", json=body, headers=AUTH).status_code == 202
    (score,) = client.post("/v1/score", json={"pod": {"gpus": 1}, "nodes": ["n1"]}).json()["scores"]
    assert score["score"] == 0
    assert "8 GPUs counted as taken" in score["reason"]
    result = client.post("/extender/filter", json={"Pod": v1_pod(gpus=1), "NodeNames": ["n1"]}).json()
    assert result["NodeNames"] == []
    assert "8 GPUs counted as taken" in result["FailedNodes"]["n1"]
    assert "n1" not in result.get("FailedAndUnresolvableNodes", {})  # it can come back: not unresolvable


@pytest.mark.parametrize("strict", [False, True])
def test_a_stale_node_with_lost_gpus_is_unresolvable_only_under_strict_staleness(tmp_path: Path, strict: bool) -> None:
    clock = Clock()
    with _client(tmp_path, clock, strict_staleness=strict, staleness_seconds=30) as client:
        lost = snapshot("n1", gpus=8, unhealthy=range(8))
        assert client.post("/v1/telemetry", json=lost, headers=AUTH).status_code == 202
        fresh = client.post("/extender/filter", json={"Pod": v1_pod(gpus=1), "NodeNames": ["n1"]}).json()
        assert "n1" in fresh["FailedAndUnresolvableNodes"]  # fresh telemetry: lost GPUs are lost
        clock.now += 120
        stale = client.post("/extender/filter", json={"Pod": v1_pod(gpus=1), "NodeNames": ["n1"]}).json()
        assert ("n1" in stale.get("FailedAndUnresolvableNodes", {})) is strict
        assert ("n1" in stale["NodeNames"]) is not strict
