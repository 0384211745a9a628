"""`/v1/score` delta answers (`since`, `advisor.api.score_delta`): a scheduler plugin that merges each delta into the
entries it holds ends every cycle with exactly the full brief answer's entries, through bindings, new snapshots,
assumed pods, nodes turning stale, candidate windows that move, and new models; anything it cannot vouch for gets
the full answer, never an error."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.api.schemas import ScoreDeltaResponse
from advisor.api.score_delta import ScoreDeltas
from advisor.cluster.state import ClusterState, PodAllocation
from advisor.placement.config import ScoringConfig
from advisor.placement.scorer import BriefScore, Scorer, fixed_clock
from advisor.placement.types import AssumedTable, NodeState, NodeTable, PodRequest, Resident
from advisor.settings import AdvisorSettings
from tests.advisor.factories import node_state, process, snapshot, v1_pod
from tests.support.clock import Clock

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NODES = [f"n{i}" for i in range(12)]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(clock: Clock) -> ClusterState:
    return ClusterState(clock=clock)


@pytest.fixture
def client(tmp_path: Path, state: ClusterState) -> Iterator[TestClient]:
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/a.db", no_kube=True, api_token=TOKEN)
    with TestClient(create_app(settings, state=state)) as c:
        for i, name in enumerate(NODES):
            push(c, name, busy=i % 5, gpus=8 if i % 3 else 4)
        yield c


def push(client: TestClient, node: str, *, busy: int, gpus: int = 8) -> None:
    """A snapshot of `node` with its first `busy` GPUs used by a process each (some shared by two)."""
    procs = {g: [process(f"{node}-r{g}", workload="bert-base-bs32")] for g in range(busy)}
    raw = snapshot(node, gpus=gpus, busy=procs)
    assert client.post("/v1/telemetry", json=raw, headers=AUTH).status_code == 202


def post(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/score", json={"unknown_nodes": "neutral", "detail": "brief", **body})
    assert response.status_code == 200, response.text
    got: dict[str, Any] = response.json()
    if "since" in body:  # the documented answer to a request with `since`, nothing more
        assert ScoreDeltaResponse.model_validate(got).model_dump(mode="json", exclude_none=True) == got
    return got


@dataclass
class Plugin:
    """What the scheduler plugin keeps for one pod shape: the token and the entries it holds."""

    token: str = ""
    held: dict[str, dict[str, Any]] = field(default_factory=dict)
    kinds: list[str] = field(default_factory=list)

    def ask(self, client: TestClient, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """One cycle: the answer merged into what is held; every candidate's entry, as the plugin then has it."""
        got = post(client, {**body, "since": self.token})
        if not got["delta"]:
            self.held = {}
        self.held.update({s["node"]: s for s in got["scores"]})
        self.token = got["token"]
        self.kinds.append("delta" if got["delta"] else "full")
        return {n: self.held[n] for n in body["nodes"]}


def full(client: TestClient, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    got = post(client, body)
    assert "token" not in got  # without `since` the answer is the one documented before delta answers
    return {s["node"]: s for s in got["scores"]}


def check(client: TestClient, plugin: Plugin, body: dict[str, Any]) -> None:
    assert plugin.ask(client, body) == full(client, body)


def test_merged_delta_answers_equal_the_full_answer_through_a_cluster_that_changes(
    client: TestClient, state: ClusterState, clock: Clock
) -> None:
    pod = v1_pod("p", gpus=2)
    plugin = Plugin()
    window = {"pod": pod, "nodes": NODES[:6]}
    check(client, plugin, window)
    check(client, plugin, window)  # nothing changed: an empty delta
    assert post(client, {**window, "since": plugin.token})["scores"] == []
    check(client, plugin, {"pod": pod, "nodes": NODES[6:]})  # the window moves on: the new nodes are sent
    check(client, plugin, {"pod": pod, "nodes": [*NODES, "ghost"]})  # a node without telemetry: neutral
    state.update_pod("ml/bound", PodAllocation(pod="ml/bound", node="n1", gpus=4), None)  # the pod watch
    check(client, plugin, {"pod": pod, "nodes": NODES})
    push(client, "n2", busy=7)  # a new snapshot
    check(client, plugin, {"pod": pod, "nodes": NODES})
    assumed = [{"node": "n4", "pod": v1_pod("placed", gpus=4)}]
    check(client, plugin, {"pod": pod, "nodes": NODES, "assumed": assumed})
    check(client, plugin, {"pod": pod, "nodes": NODES, "assumed": assumed})
    check(client, plugin, {"pod": pod, "nodes": NODES})  # the assumed pod released
    clock.now += 20.0
    for name in NODES[:8]:
        push(client, name, busy=1)
    clock.now += 15.0  # n8..n11 are now older than the 30 s staleness: unknown
    stale = plugin.ask(client, {"pod": pod, "nodes": NODES})
    assert stale == full(client, {"pod": pod, "nodes": NODES})
    assert {n for n, s in stale.items() if not s["known"]} == set(NODES[8:])
    check(client, plugin, {"pod": pod, "nodes": NODES})
    assert plugin.kinds[0] == "full"
    assert set(plugin.kinds[1:]) == {"delta"}


def test_a_bad_or_old_token_gets_the_full_answer_and_a_new_token(client: TestClient) -> None:
    body = {"pod": v1_pod("p", gpus=1), "nodes": NODES}
    first = post(client, {**body, "since": ""})
    assert first["delta"] is False
    assert len(first["scores"]) == len(NODES)
    for token in ("nonsense", "00000000.0.0", first["token"] + "0"):
        got = post(client, {**body, "since": token})
        assert got["delta"] is False
        assert len(got["scores"]) == len(NODES)
    second = post(client, {**body, "since": got["token"]})
    assert second["delta"] is True
    stale = post(client, {**body, "since": first["token"]})  # replaced by a later full answer
    assert stale["delta"] is False


def test_the_token_follows_the_pod_shape_not_the_pod_name(client: TestClient) -> None:
    nodes = NODES[:6]
    first = post(client, {"pod": v1_pod("a", gpus=1), "nodes": nodes, "since": ""})
    same_shape = post(client, {"pod": v1_pod("b", gpus=1), "nodes": nodes, "since": first["token"]})
    assert same_shape["delta"] is True
    assert same_shape["scores"] == []
    other = post(client, {"pod": v1_pod("a", gpus=3), "nodes": nodes, "since": same_shape["token"]})
    assert other["delta"] is False
    assert len(other["scores"]) == len(nodes)


def test_an_untracked_gang_pod_gets_full_answers_with_an_empty_token(client: TestClient) -> None:
    gang = v1_pod("g", gpus=1, labels={"scheduling.x-k8s.io/pod-group": "job-1"})
    for _ in range(2):
        got = post(client, {"pod": gang, "nodes": NODES, "since": ""})
        assert (got["delta"], got["token"], len(got["scores"])) == (False, "", len(NODES))


def test_since_without_brief_detail_is_a_422_naming_it(client: TestClient) -> None:
    response = client.post("/v1/score", json={"pod": v1_pod("p"), "nodes": NODES, "detail": "full", "since": ""})
    assert response.status_code == 422
    assert "since" in response.text
    response = client.post("/v1/score", json={"pod": v1_pod("p"), "nodes": NODES, "detail": "brief", "since": 7})
    assert response.status_code == 422


def test_delta_and_full_answers_are_counted(client: TestClient) -> None:
    body = {"pod": v1_pod("p", gpus=1), "nodes": NODES}
    token = post(client, {**body, "since": ""})["token"]
    post(client, {**body, "since": token})
    metrics = client.get("/metrics").text
    assert 'gpuadvisor_advisor_score_answers_total{kind="full"} 1.0' in metrics
    assert 'gpuadvisor_advisor_score_answers_total{kind="delta"} 1.0' in metrics


def test_the_answer_size_falls_to_the_changed_entries(client: TestClient, state: ClusterState) -> None:
    body = {"pod": v1_pod("p", gpus=1), "nodes": NODES}
    first = post(client, {**body, "since": ""})
    state.update_pod("ml/bound", PodAllocation(pod="ml/bound", node="n3", gpus=1), None)
    second = post(client, {**body, "since": first["token"]})
    assert [s["node"] for s in second["scores"]] == ["n3"]
    assert len(json.dumps(second)) < len(json.dumps(first))


def test_a_window_asked_again_gets_the_nodes_that_changed_while_other_windows_were_asked(
    client: TestClient, state: ClusterState
) -> None:
    """A window asked before is checked from the node table's log: a node that changed while it was not a
    candidate, however many calls ago, is sent when its window comes round again (and only it)."""
    pod = v1_pod("p", gpus=1)
    plugin = Plugin()
    first, second = {"pod": pod, "nodes": NODES[:6]}, {"pod": pod, "nodes": NODES[6:]}
    for body in (first, second, first, second):  # both windows held
        check(client, plugin, body)
    state.update_pod("ml/bound", PodAllocation(pod="ml/bound", node="n1", gpus=8), None)
    push(client, "n2", busy=4)
    push(client, "n7", busy=2)
    check(client, plugin, second)
    check(client, plugin, second)  # the log moves on past n1 and n2's changes, which are not candidates here
    got = post(client, {**first, "since": plugin.token})
    assert (got["delta"], sorted(s["node"] for s in got["scores"])) == (True, ["n1", "n2"])
    plugin.held.update({s["node"]: s for s in got["scores"]})
    plugin.token = got["token"]
    assert {n: plugin.held[n] for n in first["nodes"]} == full(client, first)
    assert post(client, {**first, "since": plugin.token})["scores"] == []


def test_a_delta_answer_counts_every_candidate_as_the_full_answer_does(client: TestClient, state: ClusterState) -> None:
    """`gpuadvisor_advisor_scores_total` counts each candidate's outcome, also those a delta answer does not send."""
    body = {"pod": v1_pod("p", gpus=6), "nodes": [*NODES, "ghost"]}

    def counted() -> dict[str, float]:
        lines = client.get("/metrics").text.splitlines()
        found = {}
        for outcome in ("scored", "infeasible", "unknown"):
            prefix = f'gpuadvisor_advisor_scores_total{{endpoint="score",outcome="{outcome}"}} '
            found[outcome] = next((float(x[len(prefix) :]) for x in lines if x.startswith(prefix)), 0.0)
        return found

    token = ""
    for _ in range(2):  # the second call asks a window held before
        token = post(client, {**body, "since": token})["token"]
    state.update_pod("ml/bound", PodAllocation(pod="ml/bound", node="n5", gpus=8), None)  # all 8 GPUs taken
    before = counted()
    got = post(client, {**body, "since": token})
    assert (got["delta"], [s["node"] for s in got["scores"]]) == (True, ["n5"])
    delta = {k: v - before[k] for k, v in counted().items()}
    before = counted()
    post(client, body)
    assert delta == {k: v - before[k] for k, v in counted().items()}
    assert delta["scored"] > 0
    assert delta["infeasible"] > 0
    assert delta["unknown"] == 1


def test_a_call_with_an_assumed_pod_looks_up_only_the_nodes_that_changed(
    client: TestClient, state: ClusterState
) -> None:
    """In a burst nearly every call carries the pod the last cycle placed, until the pod watch sees it bound: its
    node's state is that answer's own, and only it is looked up again (`gpuadvisor_advisor_score_state_reads_total`),
    on that call and the next, not every candidate's; the merged answers still equal the full ones."""

    def reads() -> float:
        prefix = "gpuadvisor_advisor_score_state_reads_total "
        return next(float(x[len(prefix) :]) for x in client.get("/metrics").text.splitlines() if x.startswith(prefix))

    body = {"pod": v1_pod("p", gpus=1), "nodes": NODES}
    placed = {**body, "assumed": [{"node": "n4", "pod": v1_pod("placed", gpus=4)}]}
    plugin = Plugin()
    check(client, plugin, body)
    check(client, plugin, body)
    got = []
    for step in ("placed", "asked again", "bound", "asked again, bound"):
        if step == "bound":
            state.update_pod("ml/placed", PodAllocation(pod="ml/placed", node="n4", gpus=4), None)
        before = reads()
        check(client, plugin, placed if step != "bound" else body)
        got.append(reads() - before)
    # n4 compared and read again where its state changed: its own state, the same one, the bound state, no change
    assert got == [2, 1, 2, 0]
    assert set(plugin.kinds[1:]) == {"delta"}


def test_pods_of_one_shape_are_read_once_and_keep_their_own_names(client: TestClient, state: ClusterState) -> None:
    """The plugin's pods differ in name and UID only: each shape is read once (`AnswerCaches.pod_shapes`), and each
    pod still answers under its own name (the watch holds `ml/b`, not `ml/a`)."""
    state.update_pod("ml/b", PodAllocation(pod="ml/b", node="n1", gpus=1), None)
    assumed = [{"node": "n1", "pod": v1_pod("a", gpus=1)}, {"node": "n1", "pod": v1_pod("b", gpus=1)}]
    for pod in ("p", "q"):
        got = post(client, {"pod": v1_pod(pod, gpus=1), "nodes": NODES[:3], "assumed": assumed, "since": ""})
        assert got["assumed_held"] == ["ml/b"]
    assert len(client.app.state.ctx.caches.pod_shapes) == 1  # type: ignore[attr-defined]


# ScoreDeltas without the HTTP route: new models (a new Scorer), the batch-relative jct component, memory bounds.


def write(s: BriefScore) -> str:
    return json.dumps([s.node, s.score, s.feasible, s.known])


def test_a_new_scorer_new_models_or_configuration_gets_the_full_answer() -> None:
    nodes = {f"m{i}": node_state(f"m{i}", allocated={0: 1000} if i % 2 else None) for i in range(4)}
    deltas = ScoreDeltas()
    request = PodRequest(name="p", gpus=1)
    first = Scorer(ScoringConfig(), clock=fixed_clock(1000.0))
    a = deltas.answer(request, names=list(nodes), nodes=nodes, since="", scorer=first, write=write)
    b = deltas.answer(request, names=list(nodes), nodes=nodes, since=a.token, scorer=first, write=write)
    assert (a.delta, b.delta, b.entries) == (False, True, [])
    renewed = Scorer(ScoringConfig(weight_packing=3.0), clock=fixed_clock(1000.0))
    c = deltas.answer(request, names=list(nodes), nodes=nodes, since=b.token, scorer=renewed, write=write)
    assert c.delta is False
    assert sorted(c.entries) == sorted(write(s) for s in renewed.brief_candidates(request, list(nodes), nodes))


def test_an_assumed_copy_older_than_the_last_answer_is_checked_against_every_candidate() -> None:
    """Two requests in flight: one with assumed pods took its copy of the node table before a binding, another was
    answered after the binding. The older copy's answer compares every candidate (its merged answer is its full
    answer, m1 as it was), and the next answer on the table catches up through the log (m1 as it is)."""
    table = NodeTable((f"m{i}", node_state(f"m{i}")) for i in range(4))
    names = list(table)
    deltas = ScoreDeltas()
    request = PodRequest(name="p", gpus=1)
    scorer = Scorer(ScoringConfig(), clock=fixed_clock(1000.0))
    held: dict[str, str] = {}
    token = ""

    def ask(nodes: Mapping[str, NodeState]) -> bool:
        nonlocal token
        got = deltas.answer(request, names=names, nodes=nodes, since=token, scorer=scorer, write=write)
        if not got.delta:
            held.clear()
        held.update({json.loads(e)[0]: e for e in got.entries})
        token = got.token
        full = {s.node: write(s) for s in scorer.brief_candidates(request, names, nodes)}
        assert held == full
        return got.delta

    assert not ask(table)
    copy = AssumedTable(table, {"m3": node_state("m3", allocated={0: 1000})})  # a request with an assumed pod
    table.put("m1", node_state("m1", allocated=dict.fromkeys(range(6), 1000)))  # a binding, after the copy
    assert ask(table)
    assert ask(copy)
    assert ask(table)


def test_a_window_with_another_best_time_gets_the_full_answer() -> None:
    """The jct component is relative to the batch's best predicted time: a window whose best node differs from the
    table's changes every total, so the answer is full, and equal to `brief_candidates` for that window."""
    shared = {0: (Resident("x", workload="bert-base-bs32", gpu_milli=500, sm_utilization_ratio=0.6),)}
    nodes = {
        "free": node_state("free", gpus=1),
        "busy": node_state("busy", gpus=1, allocated={0: 500}, residents=shared),
    }
    pod = PodRequest(name="p", gpu_milli=400, workload="resnet50-bs64")
    scorer = Scorer(ScoringConfig(), clock=fixed_clock(1000.0))
    deltas = ScoreDeltas()
    a = deltas.answer(pod, names=["busy"], nodes=nodes, since="", scorer=scorer, write=write)
    b = deltas.answer(pod, names=["busy", "free"], nodes=nodes, since=a.token, scorer=scorer, write=write)
    expected = [write(s) for s in scorer.brief_candidates(pod, ["busy", "free"], nodes)]
    assert sorted(b.entries) == sorted(expected)
    alone, together = json.loads(a.entries[0]), json.loads(next(e for e in b.entries if '"busy"' in e))
    assert alone[1] != together[1]  # the busy node's total fell once a faster node joined the batch
    assert b.delta is False
    # The busy node's state is replaced by an equal one (a repeated snapshot): it is judged again, within the batch
    # (the free node's best time, unchanged, still counts), and its entry is the same: nothing is sent.
    nodes["busy"] = node_state("busy", gpus=1, allocated={0: 500}, residents=shared)
    c = deltas.answer(pod, names=["busy", "free"], nodes=nodes, since=b.token, scorer=scorer, write=write)
    assert (c.delta, c.entries) == (True, [])


def test_tables_are_bounded_by_shapes() -> None:
    nodes = {"m0": node_state("m0")}
    scorer = Scorer(ScoringConfig(), clock=fixed_clock(1000.0))
    deltas = ScoreDeltas(shape_limit=3)
    tokens = [
        deltas.answer(PodRequest(gpus=k), names=["m0"], nodes=nodes, since="", scorer=scorer, write=write).token
        for k in (1, 2, 3, 4)
    ]
    assert len(deltas) == 3
    evicted = deltas.answer(PodRequest(gpus=1), names=["m0"], nodes=nodes, since=tokens[0], scorer=scorer, write=write)
    assert evicted.delta is False
    kept = deltas.answer(PodRequest(gpus=4), names=["m0"], nodes=nodes, since=tokens[3], scorer=scorer, write=write)
    assert kept.delta is True
