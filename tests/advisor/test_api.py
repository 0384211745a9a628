"""The advisor API as kube-scheduler, Volcano, collectors and users call it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from advisor.api import create_app
from advisor.api.routes.extender import fast_filter, filter_
from advisor.api.schemas import ExtenderArgs, ScoreResponse
from advisor.cluster.state import ClusterState
from advisor.settings import AdvisorSettings
from tests.advisor.factories import process, snapshot, two_socket_links, v1_pod
from tests.support.clock import Clock

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def client(tmp_path: Path, clock: Clock) -> Iterator[TestClient]:
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/a.db", no_kube=True, api_token=TOKEN)
    with TestClient(create_app(settings, state=ClusterState(clock=clock))) as c:
        yield c


def feed(client: TestClient) -> None:
    """empty: 8 free NVLinked; nearly-full: 1 free; numa: free GPUs spread over two sockets; shared: a hog on GPU 0."""
    for raw in (
        snapshot("empty"),
        snapshot("nearly-full", busy={i: [process(f"p{i}")] for i in range(7)}),
        snapshot("numa", links=two_socket_links(), busy={i: [process(f"q{i}")] for i in (0, 1, 4, 5)}),
        snapshot("shared", busy={0: [process("hog", sm=0.95)]}, bandwidth={0: 0.95}),
    ):
        response = client.post("/v1/telemetry", json=raw, headers=AUTH)
        assert response.status_code == 202, response.text
        assert response.json()["accepted"]


def test_prioritize_answers_a_host_priority_list_for_every_candidate(client: TestClient) -> None:
    feed(client)
    names = ["empty", "nearly-full", "numa", "never-seen"]
    response = client.post("/extender/prioritize", json={"Pod": v1_pod(gpus=1), "Nodes": None, "NodeNames": names})
    assert response.status_code == 200
    body = response.json()
    assert [h["Host"] for h in body] == names
    assert all(set(h) == {"Host", "Score"} and type(h["Score"]) is int and 0 <= h["Score"] <= 10 for h in body)
    scores = {h["Host"]: h["Score"] for h in body}
    assert scores["nearly-full"] > scores["empty"]
    assert scores["never-seen"] == 5


def test_prioritize_accepts_a_full_node_list_when_not_cache_capable(client: TestClient) -> None:
    feed(client)
    nodes = {
        "kind": "NodeList",
        "apiVersion": "v1",
        "items": [
            {"metadata": {"name": n, "labels": {"nvidia.com/gpu.product": "H100"}}, "status": {"capacity": {}}}
            for n in ("numa", "empty")
        ],
    }
    response = client.post("/extender/prioritize", json={"Pod": v1_pod(gpus=4), "Nodes": nodes, "NodeNames": None})
    assert response.status_code == 200
    assert [h["Host"] for h in response.json()] == ["numa", "empty"]


def test_prioritize_reads_json_only_as_json_whichever_path_answers(client: TestClient) -> None:
    """Valid requests are answered ahead of FastAPI's routing (`JsonFastPath`); a body FastAPI would not read as
    JSON (another content type) is still refused as it always was, and a JSON subtype is read."""
    feed(client)
    body = json.dumps({"Pod": v1_pod(gpus=1), "NodeNames": ["empty", "numa"]})
    refused = client.post("/extender/prioritize", content=body, headers={"content-type": "text/plain"})
    assert refused.status_code == 422
    plain = client.post("/extender/prioritize", content=body, headers={"content-type": "application/json"})
    subtype = client.post(
        "/extender/prioritize", content=body, headers={"content-type": "application/vnd.k8s+json; charset=utf-8"}
    )
    assert plain.status_code == subtype.status_code == 200
    assert plain.json() == subtype.json()
    assert plain.headers["content-type"] == "application/json"
    assert [h["Host"] for h in plain.json()] == ["empty", "numa"]


def test_four_gpu_pod_scores_nvlink_above_numa_spread_through_the_api(client: TestClient) -> None:
    feed(client)
    client.post(
        "/v1/telemetry", json=snapshot("nvl4", busy={i: [process(f"r{i}")] for i in (4, 5, 6, 7)}), headers=AUTH
    )
    response = client.post("/v1/score", json={"pod": {"gpus": 4}, "nodes": ["numa", "nvl4"]})
    assert response.status_code == 200
    scores = {s["node"]: s for s in response.json()["scores"]}
    assert scores["nvl4"]["score"] > scores["numa"]["score"]
    assert scores["nvl4"]["gpus"] == [0, 1, 2, 3]
    assert set(scores["nvl4"]["components"]) == {"packing", "affinity", "interference", "jct"}
    assert "NUMA" in scores["numa"]["reason"]


def test_score_answers_exactly_the_documented_schema_with_each_verdict_rounded(client: TestClient) -> None:
    feed(client)
    response = client.post("/v1/score", json={"pod": {"gpu_milli": 300}})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    # Built without pydantic: it must still be what ScoreResponse documents (extra fields forbidden), best first.
    parsed = ScoreResponse.model_validate(body)
    assert parsed.model_dump(mode="json") == body
    scores = [s["score"] for s in body["scores"]]
    assert scores == sorted(scores, reverse=True)
    assert {s["node"] for s in body["scores"]} == {"empty", "nearly-full", "numa", "shared"}
    for s in body["scores"]:
        assert s["score"] == round(s["score"], 3)
        assert all(v == round(v, 4) for v in s["components"].values())
        assert s["feasible"]
        assert s["known"]
        assert len(s["gpus"]) == 1
        assert s["reason"].startswith("GPUs [")
    assert body["models"]
    assert body["hint"] == ""
    # The same verdicts again (the entries come from the route's cache): the same answer.
    assert client.post("/v1/score", json={"pod": {"gpu_milli": 300}}).json() == body


def test_filter_returns_the_extender_filter_result(client: TestClient) -> None:
    feed(client)
    response = client.post(
        "/extender/filter", json={"Pod": v1_pod(gpus=2), "NodeNames": ["empty", "nearly-full", "never-seen"]}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["NodeNames"] == ["empty", "never-seen"]
    assert body["FailedNodes"] == {"nearly-full": "needs 2 free GPUs, has 1"}
    assert body["Error"] == ""
    assert "Nodes" not in body


def test_filter_hands_back_node_objects_when_sent_node_objects(client: TestClient) -> None:
    feed(client)
    items = [
        {"metadata": {"name": n, "uid": f"u-{n}"}, "spec": {"podCIDR": "10.0.0.0/24"}} for n in ("empty", "nearly-full")
    ]
    response = client.post("/extender/filter", json={"Pod": v1_pod(gpus=2), "Nodes": {"items": items}})
    body = response.json()
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["empty"]
    assert body["Nodes"]["items"][0]["spec"] == {"podCIDR": "10.0.0.0/24"}


def test_volcano_prioritize_speaks_the_plugin_shape(client: TestClient) -> None:
    feed(client)
    body = {
        "task": {"UID": "t1", "Job": "ml/job", "Name": "train-0", "Namespace": "ml", "Pod": v1_pod(gpus=1)},
        "nodes": [{"Name": "empty", "Idle": {}}, {"Name": "nearly-full"}],
    }
    response = client.post("/volcano/prioritize", json=body)
    assert response.status_code == 200
    result = response.json()
    assert result["errorMessage"] == ""
    assert set(result["nodeScore"]) == {"empty", "nearly-full"}
    assert result["nodeScore"]["nearly-full"] > result["nodeScore"]["empty"]
    assert all(0 <= v <= 100 for v in result["nodeScore"].values())


def test_a_gpu_share_is_allocated_away_from_the_hog(client: TestClient) -> None:
    feed(client)
    shared = snapshot(
        "two-shared",
        busy={
            0: [process("hog", sm=0.95), process("hog2", sm=0.05)],
            1: [process("l1", sm=0.1), process("l2", sm=0.1)],
        },
        bandwidth={0: 0.95, 1: 0.1},
    )
    client.post("/v1/telemetry", json=shared, headers=AUTH)
    response = client.post("/v1/allocate", json={"pod": {"gpu_milli": 200}, "node": "two-shared"})
    assert response.status_code == 200
    # Not next to the hog. The node has no sharing label, so its GPUs are taken to time-slice (the default compute
    # mode): next to the hog the share would wait out its turns; GPU 1's two 10 %-busy residents (steps unknown:
    # 10 ms) cost it a few per cent of turns (advisor.sharing.turn_taking), less than keeping GPU 2 whole is worth.
    assert response.json()["gpus"] == [1]


def test_a_stale_node_is_reported_and_scored_unknown(client: TestClient, clock: Clock) -> None:
    feed(client)
    clock.now += 120
    client.post("/v1/telemetry", json=snapshot("fresh"), headers=AUTH)
    score = client.post("/v1/score", json={"pod": {"gpus": 1}, "nodes": ["empty", "fresh"]}).json()["scores"]
    by_node = {s["node"]: s for s in score}
    assert not by_node["empty"]["known"]
    assert "stale" in by_node["empty"]["reason"]
    assert by_node["fresh"]["known"]
    nodes = {n["name"]: n for n in client.get("/v1/nodes").json()["nodes"]}
    assert nodes["empty"]["stale"]
    assert not nodes["fresh"]["stale"]
    detail = client.get("/v1/nodes/nearly-full").json()
    assert detail["free_gpus"] == 1
    assert detail["gpus"][0]["residents"][0]["pod"] == "ml/p0"


def test_telemetry_needs_the_bearer_token(client: TestClient) -> None:
    assert client.post("/v1/telemetry", json=snapshot("n1")).status_code == 401
    assert (
        client.post("/v1/telemetry", json=snapshot("n1"), headers={"Authorization": "Bearer nope"}).status_code == 401
    )
    assert client.post("/v1/telemetry", json=snapshot("n1"), headers=AUTH).status_code == 202


def test_empty_state_still_scores_with_the_reason(client: TestClient) -> None:
    response = client.post("/extender/prioritize", json={"Pod": v1_pod(gpus=2), "NodeNames": ["a", "b"]})
    assert response.status_code == 200
    assert response.json() == [{"Host": "a", "Score": 5}, {"Host": "b", "Score": 5}]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (
            "/extender/prioritize",
            {"Pod": {"metadata": {"name": "x"}, "spec": {"containers": []}}, "NodeNames": ["a"]},
            "spec.containers",
        ),
        ("/extender/prioritize", {"Pod": v1_pod(gpus=-2), "NodeNames": ["a"]}, "nvidia.com/gpu"),
        ("/extender/prioritize", {"Pod": v1_pod(gpus=1)}, "NodeNames"),
        ("/extender/filter", {"NodeNames": ["a"]}, "Pod"),
        ("/v1/score", {"pod": {"gpus": -1}}, "gpus"),
        ("/v1/score", {"pod": {"gpus": 1}, "nodes": ["ghost"]}, "ghost"),
        ("/v1/allocate", {"pod": {"gpus": 1}, "node": "ghost"}, "node"),
        ("/v1/score", {"pod": {}}, "pod"),
        ("/v1/predict/jct", {"workload": "", "gpu_model": "H100"}, "workload"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(client: TestClient, path: str, body: object, field: str) -> None:
    response = client.post(path, json=body)
    assert 400 <= response.status_code < 500, response.text
    assert field in response.text


def test_malformed_json_is_a_4xx(client: TestClient) -> None:
    response = client.post("/extender/prioritize", content=b'{"Pod": ', headers={"Content-Type": "application/json"})
    assert response.status_code == 422


def test_unknown_node_is_a_404(client: TestClient) -> None:
    response = client.get("/v1/nodes/ghost")
    assert response.status_code == 404
    assert "ghost" in response.json()["detail"]


def test_predictions_fall_back_to_heuristics_and_say_so(client: TestClient) -> None:
    jct = client.post("/v1/predict/jct", json={"workload": "resnet50", "gpu_model": "NVIDIA A100-SXM4-40GB"}).json()
    assert jct["jct_seconds"] is None
    assert jct["model"] == "heuristic"
    assert jct["relative_speed"] > 1.5
    pair = {
        "gpu_model": "H100",
        "workload_a": "a",
        "workload_b": "b",
        "usage_a": {"sm_utilization_ratio": 0.7, "memory_bandwidth_utilization_ratio": 0.5},
        "usage_b": {"sm_utilization_ratio": 0.7, "memory_bandwidth_utilization_ratio": 0.6},
    }
    answer = client.post("/v1/predict/interference", json=pair).json()
    assert answer["slowdown_a"] > 1.0
    assert answer["normalized_throughput_a"] == pytest.approx(1 / answer["slowdown_a"], abs=1e-3)


def test_own_metrics_count_latency_scores_and_fallbacks(client: TestClient) -> None:
    feed(client)
    client.post("/extender/prioritize", json={"Pod": v1_pod(gpus=1), "NodeNames": ["empty", "ghost"]})
    text = client.get("/metrics").text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    latency = (
        "gpuadvisor_advisor_request_duration_seconds_count",
        (("method", "POST"), ("route", "/extender/prioritize"), ("status", "200")),
    )
    assert samples[latency] == 1
    assert samples[("gpuadvisor_advisor_scores_total", (("endpoint", "extender"), ("outcome", "scored")))] == 1
    assert samples[("gpuadvisor_advisor_scores_total", (("endpoint", "extender"), ("outcome", "unknown")))] == 1
    assert samples[("gpuadvisor_advisor_fallbacks_total", (("kind", "jct"),))] == 1
    assert samples[("gpuadvisor_advisor_snapshots_total", (("result", "accepted"),))] == 4
    assert samples[("gpuadvisor_advisor_nodes", (("freshness", "fresh"),))] == 4
    assert ("gpuadvisor_advisor_fallbacks_total", (("kind", "speed"),)) not in samples


def test_a_snapshot_with_absurdly_many_gpus_is_refused(client: TestClient) -> None:
    response = client.post("/v1/telemetry", json=snapshot("huge", gpus=65, links=[]), headers=AUTH)
    assert response.status_code == 422
    assert response.json()["detail"] == [
        {"loc": ["body", "gpus"], "msg": "gpus: 65 GPUs in one snapshot; at most 64", "type": "value_error"}
    ]


def test_an_unreadable_registry_is_a_503_and_scoring_goes_on_with_heuristics(tmp_path: Path) -> None:
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/unmigrated.db", no_kube=True, api_token=TOKEN)
    with TestClient(create_app(settings)) as client:
        response = client.get("/v1/models")
        assert response.status_code == 503
        assert "registry" in response.json()["detail"]
        for path in ("/v1/profiles", "/v1/trialruns", "/v1/trialruns/ml/x"):
            outage = client.get(path)
            assert outage.status_code == 503, path
            assert outage.json() == {"detail": "the store is unavailable: OperationalError"}
        assert client.post("/v1/telemetry", json=snapshot("n1"), headers=AUTH).status_code == 202
        scored = client.post("/v1/score", json={"pod": {"gpus": 1}}).json()
        assert scored["models"]["jct"] == "heuristic"
        assert scored["scores"][0]["feasible"]


def test_a_malformed_snapshot_is_a_422_naming_the_field_and_ingest_is_timed(client: TestClient) -> None:
    bad = {**snapshot("n1"), "timestamp": "yesterday"}
    response = client.post("/v1/telemetry", json=bad, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "timestamp"]
    assert response.json()["detail"][0]["msg"].startswith("timestamp: ")
    assert client.post("/v1/telemetry", content=b"{not json", headers=AUTH).status_code == 422
    unauthorised = client.post("/v1/telemetry", json=snapshot("n1"))
    assert unauthorised.headers["www-authenticate"] == "Bearer"
    metrics = client.get("/metrics").text
    assert (
        'gpuadvisor_advisor_request_duration_seconds_count{method="POST",route="/v1/telemetry",status="422"} 2.0'
        in (metrics)
    )


def test_the_size_of_each_request_body_is_observed_by_route(client: TestClient) -> None:
    body = json.dumps({"Pod": v1_pod(gpus=1), "Nodes": None, "NodeNames": ["n1"]}).encode()
    for _ in range(2):
        assert client.post("/extender/prioritize", content=body).status_code == 200
    metrics = client.get("/metrics").text
    series = 'gpuadvisor_advisor_request_body_bytes_{}{{method="POST",route="/extender/prioritize"}} {}'
    assert series.format("sum", float(2 * len(body))) in metrics
    assert series.format("count", 2.0) in metrics
    assert 'gpuadvisor_advisor_request_body_bytes_count{method="GET",route="/metrics"}' not in metrics  # no body


def test_each_app_holds_its_own_answer_caches(client: TestClient, tmp_path: Path) -> None:
    """The hot routes' written answers and checked Nodes live on the app's context, not in route modules: one app's
    calls fill its own caches and leave another app's empty, and an answer read back from them is the one written."""
    feed(client)
    ctx = client.app.state.ctx  # type: ignore[attr-defined]
    first = client.post("/v1/score", json={"pod": {"gpus": 1}}).json()
    brief = client.post("/v1/score", json={"pod": {"gpus": 1}, "detail": "brief"}).json()
    client.post("/extender/prioritize", json={"Pod": v1_pod(gpus=1), "Nodes": None, "NodeNames": ["empty", "numa"]})
    assert len(ctx.caches.entries) == len(first["scores"]) == 4
    assert len(ctx.caches.briefs) == sum(1 for s in brief["scores"] if s["feasible"] or not s["known"]) > 0
    assert set(ctx.caches.host_prefix) == {"empty", "numa"}
    assert client.post("/v1/score", json={"pod": {"gpus": 1}}).json() == first
    other = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/b.db", no_kube=True, api_token=TOKEN)
    with TestClient(create_app(other)) as c:
        caches = c.app.state.ctx.caches  # type: ignore[attr-defined]
        assert caches is not ctx.caches
        assert (len(caches.entries), len(caches.briefs), len(caches.host_prefix)) == (0, 0, 0)


def test_a_filter_call_with_whole_nodes_is_answered_ahead_of_the_route_with_the_routes_answer(
    client: TestClient,
) -> None:
    """`fast_filter` (nodeCacheCapable: false) gives what the route gives, and hands back the passing Node objects
    byte for byte as sent, fields the advisor has no model of included."""
    feed(client)
    nodes = {
        "kind": "NodeList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "42"},
        "items": [
            {
                "metadata": {"name": n, "labels": {"nvidia.com/gpu.product": "H100"}, "annotations": {"a": "1"}},
                "status": {"images": [{"names": [f"img-{n}"], "sizeBytes": 1 << 30}], "capacity": {}},
                "spec": {"podCIDR": "10.0.0.0/24"},
            }
            for n in ("nearly-full", "empty", "numa")
        ],
    }
    body = json.dumps({"Pod": v1_pod(gpus=4), "Nodes": nodes, "NodeNames": None}).encode()
    ctx = client.app.state.ctx  # type: ignore[attr-defined]
    fast = json.loads(fast_filter(body, ctx))
    route = filter_(ExtenderArgs.model_validate_json(body), ctx).model_dump(mode="json", exclude_none=True)
    assert fast == route
    assert fast["NodeNames"] == ["empty", "numa"]
    assert fast["Nodes"]["items"] == nodes["items"][1:]
    assert fast["Nodes"]["metadata"] == {"resourceVersion": "42"}
    assert client.post("/extender/filter", content=body, headers={"content-type": "application/json"}).json() == fast
    with pytest.raises(ValueError, match="whole Node objects"):  # names only: the route answers
        fast_filter(json.dumps({"Pod": v1_pod(gpus=4), "NodeNames": ["empty"]}).encode(), ctx)
