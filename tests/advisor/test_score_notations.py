"""One GPU notation per pod (docs/advisor.md, "GPU requests"): `/v1/score` and `/v1/allocate` answer 422 naming the
field when a pod asks for whole GPUs and a share at once, or mixes the plain fields with a v1.Pod's spec."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.settings import AdvisorSettings
from tests.advisor.factories import snapshot, v1_pod

TOKEN = "s3cret"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/n.db", no_kube=True, api_token=TOKEN)
    with TestClient(create_app(settings)) as c:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        assert c.post("/v1/telemetry", json=snapshot("n1", gpus=2), headers=headers).status_code == 202
        yield c


@pytest.mark.parametrize(
    ("pod", "field"),
    [
        ({"gpus": 1, "gpu_milli": 500}, "gpu_milli"),
        ({"gpus": 2, "gpu_memory_bytes": 2**30}, "gpu_memory_bytes"),
        ({"gpus": 1, **{k: v for k, v in v1_pod(gpus=1).items() if k in ("metadata", "spec")}}, "gpus"),
        ({"gpu_milli": 250, "spec": v1_pod(gpus=1)["spec"]}, "gpu_milli"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/score", "/v1/allocate"])
def test_two_gpu_notations_in_one_pod_are_a_422_naming_the_field(
    client: TestClient, path: str, pod: dict[str, Any], field: str
) -> None:
    body: dict[str, Any] = {"pod": pod, "nodes": ["n1"]} if path == "/v1/score" else {"pod": pod, "node": "n1"}
    response = client.post(path, json=body)
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert field in ".".join(str(part) for part in error["loc"]) + error["msg"]
    assert "two GPU notations" in error["msg"]


def test_one_notation_is_still_scored(client: TestClient) -> None:
    for pod in ({"gpus": 1}, {"gpu_milli": 500}, {"gpu_milli": 500, "gpu_memory_bytes": 2**30}):
        assert client.post("/v1/score", json={"pod": pod, "nodes": ["n1"]}).status_code == 200, pod
