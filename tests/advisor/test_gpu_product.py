"""A pod that accepts only some GPU models (node selector / required affinity on `nvidia.com/gpu.product`) through
the extender, as kube-scheduler calls it: nodes of other models fail the filter and score 0."""

from __future__ import annotations

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


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/a.db", no_kube=True, api_token=TOKEN)
    with TestClient(create_app(settings, state=ClusterState(clock=lambda: 1_000_000.0))) as c:
        for raw in (snapshot("h100-node"), snapshot("a100-node", model="NVIDIA A100-SXM4-40GB")):
            assert c.post("/v1/telemetry", json=raw, headers=AUTH).status_code == 202
        yield c


def _pod(spec_extra: dict[str, Any]) -> dict[str, Any]:
    pod = v1_pod(gpus=1)
    pod["spec"].update(spec_extra)
    return pod


A100_ONLY = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}}
A100_BY_AFFINITY = {
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-40GB"]}
                        ]
                    }
                ]
            }
        }
    }
}


@pytest.mark.parametrize("constraint", [A100_ONLY, A100_BY_AFFINITY], ids=["selector", "affinity"])
def test_a_node_of_a_model_the_pod_does_not_accept_fails_the_filter_and_scores_0(
    client: TestClient, constraint: dict[str, Any]
) -> None:
    names = ["h100-node", "a100-node"]
    body = client.post("/extender/filter", json={"Pod": _pod(constraint), "NodeNames": names}).json()
    assert body["NodeNames"] == ["a100-node"]
    # a model the pod never accepts: unresolvable, so preemption evicts nobody there (advisor/placement/unresolvable.py)
    assert "not one the pod accepts (a100-40gb)" in body["FailedAndUnresolvableNodes"]["h100-node"]
    scores = client.post("/extender/prioritize", json={"Pod": _pod(constraint), "NodeNames": names}).json()
    assert {h["Host"]: h["Score"] for h in scores} == {"h100-node": 0, "a100-node": 10}


def test_a_pod_that_accepts_any_model_passes_on_both(client: TestClient) -> None:
    names = ["h100-node", "a100-node"]
    body = client.post("/extender/filter", json={"Pod": _pod({}), "NodeNames": names}).json()
    assert body["NodeNames"] == names
