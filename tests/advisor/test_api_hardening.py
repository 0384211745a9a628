"""What a hostile or broken client meets: 4xx naming the field (never a 5xx or an echo), body limits, writes that need
a token, snapshots from the future refused, and a state (and /metrics) that stays the size of the live cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.api.app import NATIVE_BODY_LIMIT_BYTES
from advisor.api.errors import BodyError, parse_json
from advisor.cli.up import local_token
from advisor.cluster.state import TOPOLOGY_CACHE_ENTRIES, ClusterState
from advisor.settings import AdvisorSettings
from collector.snapshot import NodeSnapshot
from tests.advisor.factories import snapshot, v1_pod
from tests.support.clock import Clock

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _settings(tmp_path: Path, **overrides: object) -> AdvisorSettings:
    return AdvisorSettings(db_url=f"sqlite:///{tmp_path}/h.db", no_kube=True, api_token=TOKEN, **overrides)  # type: ignore[arg-type]


@pytest.fixture
def client(tmp_path: Path, clock: Clock) -> Iterator[TestClient]:
    with TestClient(create_app(_settings(tmp_path), state=ClusterState(clock=clock))) as c:
        assert c.post("/v1/telemetry", json=snapshot("n1"), headers=AUTH).status_code == 202
        yield c


def _only_error(response_json: dict[str, object]) -> dict[str, object]:
    detail = response_json["detail"]
    assert isinstance(detail, list)
    assert len(detail) == 1, detail
    error = detail[0]
    assert isinstance(error, dict)
    assert set(error) == {"loc", "msg", "type"}
    return error


# -- non-finite numbers and invalid UTF-8 ----------------------------------------------------------------------------


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
@pytest.mark.parametrize(
    ("path", "template", "loc"),
    [
        ("/v1/score", '{"pod": {"gpus": 1, "cpu_milli": %s}}', ["body", "pod", "cpu_milli"]),
        ("/v1/predict/jct", '{"workload": "w", "gpu_model": "V100", "gpu_count": %s}', ["body", "gpu_count"]),
        (
            "/v1/predict/interference",
            '{"gpu_model": "V100", "workload_a": "a", "workload_b": "b", '
            '"usage_a": {"sm_utilization_ratio": %s, "memory_bandwidth_utilization_ratio": 0.5}}',
            ["body", "usage_a", "sm_utilization_ratio"],
        ),
        (
            "/extender/prioritize",
            '{"Pod": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": %s}}}]}}, '
            '"NodeNames": ["n1"]}',
            ["body", "Pod", "spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"],
        ),
        (
            "/volcano/prioritize",
            '{"task": {"Pod": {"spec": {"priority": %s}}}, "nodes": [{"Name": "n1"}]}',
            ["body", "task", "Pod", "spec", "priority"],
        ),
    ],
)
def test_a_non_finite_number_is_a_422_naming_the_field(
    client: TestClient, path: str, template: str, loc: list[object], number: str
) -> None:
    response = client.post(path, content=(template % number).encode(), headers=JSON)
    assert response.status_code == 422, response.text
    error = _only_error(response.json())
    assert error["loc"] == loc
    assert error["type"] == "finite_number"
    assert str(error["msg"]).startswith(".".join(str(p) for p in loc[1:]) + ": must be a finite number")


def test_invalid_utf8_is_a_422_naming_the_field_on_every_body(client: TestClient) -> None:
    bad_pod = b'{"pod": {"gpus": 1, "workload": "r\xffn"}}'
    error = _only_error(client.post("/v1/score", content=bad_pod, headers=JSON).json())
    assert (error["loc"], error["type"]) == (["body", "pod", "workload"], "utf8_invalid")
    bad_node = json.dumps(snapshot("n\udcff", gpus=1), ensure_ascii=False).encode("utf-8", "surrogateescape")
    response = client.post("/v1/telemetry", content=bad_node, headers=AUTH)
    assert response.status_code == 422
    assert _only_error(response.json())["loc"] == ["body", "node"]
    key = client.post("/v1/predict/jct", content=b'{"w\xfe": 1}', headers=JSON)
    assert key.status_code == 422
    assert _only_error(key.json())["loc"] == ["body", "w\ufffd"]  # the key, its bad byte replaced


def test_an_unpaired_surrogate_escape_is_a_422_naming_the_field(client: TestClient) -> None:
    """Valid JSON, but no UTF-8 encoder can write it back: in a key of an error's `loc`, or in a Node object the
    filter hands back, it was a 500 on the way out."""
    key = client.post("/v1/score", content=rb'{"pod": {"gpus": 1, "\udcff": NaN}}', headers=JSON)
    assert key.status_code == 422
    error = _only_error(key.json())
    assert (error["loc"], error["type"]) == (["body", "pod", "\ufffd"], "unicode_invalid")
    node = {"metadata": {"name": "n1"}, "status": {"note": "\ud800"}}
    echoed = client.post(
        "/extender/filter", content=json.dumps({"Pod": v1_pod(), "Nodes": {"items": [node]}}), headers=JSON
    )
    assert echoed.status_code == 422
    assert _only_error(echoed.json())["loc"] == ["body", "Nodes", "items", 0, "status", "note"]
    emoji = client.post(
        "/v1/predict/jct", content=json.dumps({"workload": "\U0001f600", "gpu_model": "V100"}), headers=JSON
    )
    assert emoji.status_code == 200  # a valid pair is one character, and fine


def test_non_finite_readings_in_a_snapshot_are_refused(client: TestClient) -> None:
    raw = json.dumps(snapshot("n2", gpus=2)).replace('"power_watts": 300.0', '"power_watts": 1e400', 1)
    response = client.post("/v1/telemetry", content=raw.encode(), headers=AUTH)
    assert response.status_code == 422
    assert _only_error(response.json())["loc"] == ["body", "gpus", 0, "power_watts"]
    assert client.get("/v1/nodes/n2").status_code == 404


def test_parse_json_names_the_path_of_the_first_bad_value() -> None:
    with pytest.raises(BodyError) as bad:
        parse_json(b'{"a": [1, 2, {"b": NaN}]}')
    assert bad.value.loc == ("body", "a", 2, "b")
    with pytest.raises(BodyError) as deep:
        parse_json(b"[" * 100_000 + b"]" * 100_000)
    assert deep.value.kind == "json_invalid"
    assert parse_json(b'{"x": 1.5, "y": "\xc3\xa9"}') == {"x": 1.5, "y": "é"}


def test_a_422_never_echoes_the_input_and_lists_at_most_20_errors(client: TestClient) -> None:
    huge = "x" * 500_000
    response = client.post("/v1/score", json={"pod": {"gpus": huge}, "nodes": [{"bad": i} for i in range(1000)]})
    assert response.status_code == 422
    assert len(response.content) < 10_000
    assert huge not in response.text
    assert len(response.json()["detail"]) == 20


# -- unknown fields ---------------------------------------------------------------------------------------------------


def test_an_unknown_field_in_the_native_api_is_a_422_naming_it(client: TestClient) -> None:
    response = client.post("/v1/score", json={"pod": {"gpus": 1, "gpus_typo": 3}})
    assert response.status_code == 422
    error = _only_error(response.json())
    assert error["loc"] == ["body", "pod", "gpus_typo"]
    assert str(error["msg"]).startswith("pod.gpus_typo: Extra inputs are not permitted")
    jct = client.post("/v1/predict/jct", json={"workload": "w", "gpu_model": "V100", "gpus": 2})
    assert _only_error(jct.json())["loc"] == ["body", "gpus"]


def test_scheduler_bodies_keep_accepting_fields_newer_than_the_advisor(client: TestClient) -> None:
    pod = v1_pod(gpus=1)
    pod["spec"]["someFieldFromKubernetes1_40"] = {"x": 1}
    args = {"Pod": pod, "NodeNames": ["n1"], "NodeNamesV2": ["future"]}
    assert client.post("/extender/prioritize", json=args).json() == [{"Host": "n1", "Score": 10}]
    volcano = {"task": {"Pod": pod, "Namespace": "ml"}, "nodes": [{"Name": "n1", "Idle": {}}], "extra": 1}
    assert client.post("/volcano/prioritize", json=volcano).status_code == 200


# -- body limits ------------------------------------------------------------------------------------------------------


def test_bodies_beyond_their_route_limit_are_a_one_line_413(tmp_path: Path) -> None:
    settings = _settings(tmp_path, scheduler_body_limit_bytes=2 * 1024 * 1024)
    with TestClient(create_app(settings)) as client:
        big = b'{"pod": {"gpus": 1}, "nodes": ["' + b"n" * NATIVE_BODY_LIMIT_BYTES + b'"]}'
        response = client.post("/v1/score", content=big, headers=JSON)
        assert response.status_code == 413
        assert response.json() == {"detail": f"body: /v1/score takes at most {NATIVE_BODY_LIMIT_BYTES} bytes"}

        def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while reading
            yield b'{"Pod": {}, "NodeNames": ["'
            for _ in range(3):
                yield b"n" * 1024 * 1024
            yield b'"]}'

        streamed = client.post("/extender/prioritize", content=chunks(), headers=JSON)
        assert streamed.status_code == 413
        assert "\n" not in streamed.text
        assert len(streamed.content) < 200
        # a scheduler's full node list of 1.5 MB is within its limit, though far beyond the native API's
        items = [{"metadata": {"name": f"n{i}", "labels": {"pad": "p" * 60}}} for i in range(15_000)]
        nodes = json.dumps({"Pod": v1_pod(gpus=1), "Nodes": {"items": items}}).encode()
        assert NATIVE_BODY_LIMIT_BYTES < len(nodes) < settings.scheduler_body_limit_bytes
        assert client.post("/extender/prioritize", content=nodes, headers=JSON).status_code == 200


# -- snapshots -------------------------------------------------------------------------------------------------------


def test_a_snapshot_from_the_future_is_refused_and_counted(client: TestClient) -> None:
    far = snapshot("n1", timestamp=datetime(9999, 12, 31, tzinfo=UTC))
    response = client.post("/v1/telemetry", json=far, headers=AUTH)
    assert response.status_code == 422
    error = _only_error(response.json())
    assert error["loc"] == ["body", "timestamp"]
    assert "ahead of this advisor's clock" in str(error["msg"])
    # within the allowed skew is fine, and a real snapshot after the refused one is taken
    soon = snapshot("n1", timestamp=datetime.now(UTC) + timedelta(seconds=60))
    assert client.post("/v1/telemetry", json=soon, headers=AUTH).json()["accepted"]
    metrics = client.get("/metrics").text
    assert 'gpuadvisor_advisor_snapshots_total{result="future"} 1.0' in metrics


def test_duplicate_gpu_indices_are_refused(client: TestClient) -> None:
    raw = snapshot("dup", gpus=2)
    raw["gpus"][1]["index"] = 0
    response = client.post("/v1/telemetry", json=raw, headers=AUTH)
    assert response.status_code == 422
    error = _only_error(response.json())
    assert error["loc"] == ["body", "gpus", 1, "index"]
    assert "GPU index 0 appears twice" in str(error["msg"])


# -- writes need a token ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, "", "  "])
def test_without_a_token_writes_are_refused_unless_explicitly_allowed(tmp_path: Path, token: str | None) -> None:
    closed = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/c.db", no_kube=True, api_token=token)
    with TestClient(create_app(closed)) as client:
        for path, body in (("/v1/telemetry", snapshot("n1")), ("/v1/models/train", {}), ("/v1/trialruns", {})):
            response = client.post(path, json=body)
            assert response.status_code == 401, path
            assert "GPUADVISOR_ALLOW_UNAUTHENTICATED_WRITES" in response.json()["detail"]
        assert client.post("/v1/score", json={"pod": {"gpus": 1}}).status_code == 200  # reads stay open
    opened = closed.model_copy(update={"allow_unauthenticated_writes": True})
    with TestClient(create_app(opened)) as client:
        assert client.post("/v1/telemetry", json=snapshot("n1")).status_code == 202


def test_up_writes_a_private_token_file_and_says_where(tmp_path: Path) -> None:
    settings = AdvisorSettings(model_dir=tmp_path / "state" / "models")
    token, where = local_token(settings)
    path = tmp_path / "state" / "api-token"
    assert where == str(path)
    assert path.read_text().strip() == token
    assert len(token) == 32
    assert path.stat().st_mode & 0o777 == 0o600
    again, _ = local_token(settings)
    assert again != token
    assert path.read_text().strip() == again
    assert local_token(settings.model_copy(update={"api_token": "mine"})) == ("mine", "GPUADVISOR_API_TOKEN")


# -- bounded state and /metrics -------------------------------------------------------------------------------------


def test_a_silent_node_expires_from_the_state_and_metrics(tmp_path: Path, clock: Clock) -> None:
    settings = _settings(tmp_path, export_gpu_links=True)
    state = ClusterState(clock=clock, node_expiry_seconds=600)
    with TestClient(create_app(settings, state=state)) as client:
        for name in ("old", "live"):
            assert client.post("/v1/telemetry", json=snapshot(name, gpus=2), headers=AUTH).status_code == 202
        clock.now += 400
        assert client.post("/v1/telemetry", json=snapshot("live", gpus=2), headers=AUTH).status_code == 202
        clock.now += 300  # old: silent 700 s; live: 300 s
        metrics = client.get("/metrics").text
        assert 'node="live"' in metrics
        assert 'node="old"' not in metrics
        assert [n["name"] for n in client.get("/v1/nodes").json()["nodes"]] == ["live"]
        assert client.get("/v1/nodes/old").status_code == 404
        assert client.post("/v1/score", json={"pod": {"gpus": 1}, "nodes": ["old"]}).status_code == 404
        # it comes back with its next snapshot
        assert client.post("/v1/telemetry", json=snapshot("old", gpus=2), headers=AUTH).status_code == 202
        assert client.get("/v1/nodes/old").status_code == 200


def test_the_topology_cache_stays_bounded_when_links_change_every_snapshot() -> None:
    state = ClusterState()
    levels = ["NVLINK", "PCIE_SWITCH", "PCIE_HOSTBRIDGE", "NUMA", "SYSTEM"]
    for i in range(TOPOLOGY_CACHE_ENTRIES + 200):
        links = [{"a": a, "b": a + 1, "level": levels[(i // 5**a) % 5]} for a in range(5)]
        state.ingest(NodeSnapshot.model_validate(snapshot("flappy", gpus=6, links=links)))
    assert state.topology_cache_size() == TOPOLOGY_CACHE_ENTRIES
    assert state.nodes["flappy"].topology.known


def test_metrics_of_1000_eight_gpu_nodes_stay_small_and_links_are_opt_in(tmp_path: Path) -> None:
    sizes = {}
    for links in (False, True):
        state = ClusterState()
        for i in range(1000):
            state.ingest(NodeSnapshot.model_validate(snapshot(f"node-{i:04d}")))
        with TestClient(create_app(_settings(tmp_path, export_gpu_links=links), state=state)) as client:
            client.post("/v1/score", json={"pod": {"gpus": 1}})
            sizes[links] = len(client.get("/metrics").content)
    assert sizes[False] <= 1_200_000
    assert sizes[False] < 50_000  # O(1) in nodes without the per-link series
    assert sizes[True] > 1000 * 28 * 50  # 28 pairs per node, one series each


# -- outages and hints ----------------------------------------------------------------------------------------------


def test_score_without_nodes_says_why_the_list_is_empty(tmp_path: Path) -> None:
    with TestClient(create_app(_settings(tmp_path))) as client:
        empty = client.post("/v1/score", json={"pod": {"gpus": 1}}).json()
        assert empty["scores"] == []
        assert "no node has sent telemetry" in empty["hint"]
        client.post("/v1/telemetry", json=snapshot("n1"), headers=AUTH)
        assert "`nodes` is empty" in client.post("/v1/score", json={"pod": {"gpus": 1}, "nodes": []}).json()["hint"]
        assert client.post("/v1/score", json={"pod": {"gpus": 1}}).json()["hint"] == ""


def test_interference_says_whether_the_model_or_the_heuristic_answered(client: TestClient) -> None:
    query = {"gpu_model": "V100", "workload_a": "a", "workload_b": "b"}
    answer = client.post("/v1/predict/interference", json=query).json()
    assert answer["source"] == "heuristic"
    assert answer["reason"].startswith("heuristic (no interference model is promoted")
    assert "unprofiled" in answer["reason"]
    given = {**query, "usage_a": {"sm_utilization_ratio": 0.2, "memory_bandwidth_utilization_ratio": 0.1}}
    assert "usage of a given" in client.post("/v1/predict/interference", json=given).json()["reason"]


def test_openapi_fields_of_the_native_api_are_described(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for model in ("PodQuery", "JctQuery", "InterferenceQuery", "NodeScoreOut", "InterferenceAnswer"):
        undescribed = [f for f, spec in schemas[model]["properties"].items() if "description" not in spec]
        assert not [f for f in undescribed if f not in {"node", "gpu_model", "pod", "components"}], model


def test_a_pod_error_is_a_422_in_the_documented_shape_with_the_pod_field(client: TestClient) -> None:
    pod = v1_pod(gpus=1)
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "-1"
    response = client.post("/extender/prioritize", json={"Pod": pod, "NodeNames": ["n1"]})
    assert response.status_code == 422
    error = _only_error(response.json())
    assert error["loc"] == ["body", "spec.containers[0].resources.limits.nvidia.com/gpu"]
    assert str(error["msg"]).startswith("spec.containers[0].resources.limits.nvidia.com/gpu: ")
