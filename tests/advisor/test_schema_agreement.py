"""The OpenAPI schema and the routes agree (issue 40): a request body the schema rejects is refused (422), one it
accepts is not refused for its shape, numbers are strict at every edge (`true` is no number), and what a route
answers satisfies its own response schema."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.settings import AdvisorSettings
from tests.advisor.factories import process, snapshot, v1_pod

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path_factory.mktemp('schema')}/s.db"
    with TestClient(create_app(AdvisorSettings(db_url=url, no_kube=True, api_token=TOKEN))) as c:
        busy = {0: [process("a", workload="resnet")], 1: [process("b"), process("c")]}  # b, c: no workload
        for raw in (snapshot("n1", busy=busy), snapshot("n2")):
            assert c.post("/v1/telemetry", json=raw, headers=AUTH).status_code == 202
        yield c


@pytest.fixture(scope="module")
def openapi(client: TestClient) -> dict[str, Any]:
    spec: dict[str, Any] = client.get("/openapi.json").json()
    return spec


def _validator(openapi: dict[str, Any], schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({**schema, "components": openapi["components"]})


def _request_schema(openapi: dict[str, Any], path: str) -> jsonschema.Draft202012Validator:
    body = openapi["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return _validator(openapi, body)


def _pod(**spec: Any) -> dict[str, Any]:
    pod = v1_pod()
    pod["spec"] = {**pod["spec"], **spec}
    return pod


EXTENDER_BODIES: list[tuple[str, dict[str, Any]]] = [
    ("a pod without spec", {"Pod": {}, "NodeNames": ["n1"]}),
    ("a spec without containers", {"Pod": {"spec": {}}, "NodeNames": ["n1"]}),
    ("no containers", {"Pod": {"spec": {"containers": []}}, "NodeNames": ["n1"]}),
    ("a boolean priority", {"Pod": _pod(priority=True), "NodeNames": ["n1"]}),
    ("a real pod", {"Pod": v1_pod(), "NodeNames": ["n1", "n2"]}),
    ("a real pod, no GPU", {"Pod": v1_pod(gpus=None), "NodeNames": ["n1"]}),
]


@pytest.mark.parametrize("path", ["/extender/prioritize", "/extender/filter"])
@pytest.mark.parametrize(("case", "body"), EXTENDER_BODIES, ids=[c for c, _ in EXTENDER_BODIES])
def test_an_extender_body_is_refused_exactly_when_the_schema_rejects_it(
    client: TestClient, openapi: dict[str, Any], path: str, case: str, body: dict[str, Any]
) -> None:
    schema_accepts = not list(_request_schema(openapi, path).iter_errors(body))
    response = client.post(path, json=body)
    assert (response.status_code == 200) == schema_accepts, (case, response.status_code, response.text[:300])


BOOLEANS: list[tuple[str, dict[str, Any], list[str | int]]] = [
    ("/v1/score", {"pod": {"gpus": True}}, ["body", "pod", "gpus"]),
    ("/v1/score", {"pod": {"gpus": 1, "cpu_milli": True}}, ["body", "pod", "cpu_milli"]),
    ("/v1/predict/jct", {"workload": "w", "gpu_model": "V100", "gpu_count": True}, ["body", "gpu_count"]),
    (
        "/v1/predict/interference",
        {
            "gpu_model": "V100",
            "workload_a": "a",
            "workload_b": "b",
            "usage_a": {"sm_utilization_ratio": True, "memory_bandwidth_utilization_ratio": 0.5},
        },
        ["body", "usage_a", "sm_utilization_ratio"],
    ),
    (
        "/extender/prioritize",
        {"Pod": v1_pod(gpus=None) | {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": True}}}]}}},
        ["body", "Pod", "spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"],
    ),
]


@pytest.mark.parametrize(("path", "body", "loc"), BOOLEANS, ids=[f"{p} {loc[-1]}" for p, _, loc in BOOLEANS])
def test_a_boolean_is_no_number_anywhere(
    client: TestClient, path: str, body: dict[str, Any], loc: list[str | int]
) -> None:
    body = {**body, "NodeNames": ["n1"]} if path.startswith("/extender/") else body
    response = client.post(path, json=body, headers=AUTH)
    assert response.status_code == 422, response.text[:300]
    assert loc in [error["loc"] for error in response.json()["detail"]]


@pytest.mark.parametrize(
    ("field", "value"), [("memory_used_bytes", True), ("utilization_ratio", True), ("index", False), ("healthy", 1)]
)
def test_a_snapshot_with_a_boolean_for_a_number_or_a_number_for_a_boolean_is_refused(
    client: TestClient, field: str, value: object
) -> None:
    raw = copy.deepcopy(snapshot("n3"))
    raw["gpus"][0][field] = value
    response = client.post("/v1/telemetry", json=raw, headers=AUTH)
    assert response.status_code == 422, response.text[:300]
    assert ["body", "gpus", 0, field] in [error["loc"] for error in response.json()["detail"]]


@pytest.mark.parametrize("query", ["", "?detail=true", "?detail=false"])
def test_the_node_list_satisfies_its_own_response_schema(
    client: TestClient, openapi: dict[str, Any], query: str
) -> None:
    """Residents without a workload are in the answer (n1's GPU 1): `workload` is required, so it is there, null."""
    response = client.get("/v1/nodes" + query)
    assert response.status_code == 200
    schema = openapi["paths"]["/v1/nodes"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in _validator(openapi, schema).iter_errors(response.json())]
    assert errors == []
    if query == "?detail=true":
        residents = [r for n in response.json()["nodes"] for g in n["gpus"] for r in g["residents"]]
        assert any(r["workload"] is None for r in residents)


def test_one_node_satisfies_its_response_schema(client: TestClient, openapi: dict[str, Any]) -> None:
    response = client.get("/v1/nodes/n1")
    schema = openapi["paths"]["/v1/nodes/{name}"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert [e.message for e in _validator(openapi, schema).iter_errors(response.json())] == []


def test_deep_nesting_is_a_422_on_every_post_route(client: TestClient, openapi: dict[str, Any]) -> None:
    posts = [path for path, operations in openapi["paths"].items() if "post" in operations]
    assert len(posts) >= 10
    for body in (b'{"a":' * 3000 + b"1" + b"}" * 3000, b"[" * 3000 + b"]" * 3000):
        for path in posts:
            response = client.post(path, content=body, headers={**AUTH, "Content-Type": "application/json"})
            assert response.status_code == 422, (path, response.status_code, response.text[:200])
            assert response.json()["detail"][0]["loc"] == ["body"], path
