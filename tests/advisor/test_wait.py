"""Waiting for a faster GPU: when the pod's residents leave (`jct_leave_times`), when a node has room
(`room_seconds`), which candidates the filter passes over (`wait_verdicts`), and the same through `/extender/filter`
with a served JCT model and start times from the Kubernetes watch."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.cluster.state import ClusterState, PodAllocation
from advisor.datasets import gavel_trace_executions, load_gavel
from advisor.models.jct import JctModel
from advisor.models.reference import GAVEL_THROUGHPUTS, GAVEL_TRACES, bundled_gavel_dir
from advisor.models.registry import register, save_trained
from advisor.models.training import Trained
from advisor.placement.config import ScoringConfig
from advisor.placement.filter import FilterRequest, filter_nodes
from advisor.placement.queue import NodePlacement, PendingPod
from advisor.placement.shortest import CLAIM_GRACE_SECONDS
from advisor.placement.types import WHOLE_GPU_MILLI, NodeState, PodRequest, Resident, ScoringInputError
from advisor.placement.waiting import (
    LEAVE_ENDS,
    LeaveTimes,
    RoomAt,
    has_room_now,
    jct_leave_times,
    room_at,
    room_seconds,
    wait_verdicts,
)
from advisor.predictors import HeuristicInterference, HeuristicJct, HeuristicUsage, Predictors, SpecSpeed
from advisor.settings import AdvisorSettings
from profiler.store import db
from tests.advisor.factories import H100, node_state, process, snapshot, v1_pod
from tests.support.clock import Clock

FAST = H100
SLOW = "Tesla T4"
NOW = 10_000.0
CONFIG = ScoringConfig()


class TableJct:
    """`bert` runs 1000 s on the fast model and 4000 s on the slow one; `resnet` 500 s / 2000 s; per GPU count."""

    name = "jct table"

    def jct_seconds(self, workload: str | None, gpu_model: str, gpu_count: int) -> float | None:
        base = {"bert": 1000.0, "resnet": 500.0}.get(workload or "")
        if base is None:
            return None
        return base * (1.0 if gpu_model == FAST else 4.0) / gpu_count


PREDICTORS = Predictors(speed=SpecSpeed(), interference=HeuristicInterference(), jct=TableJct(), usage=HeuristicUsage())
POD = PodRequest(name="ml/new", gpus=1, workload="bert")


def resident(pod: str, *, milli: int = 0, started: float | None = None, workload: str | None = "resnet") -> Resident:
    return Resident(pod=pod, workload=workload, gpu_milli=milli, started_seconds=started)


def gpu_node(
    name: str,
    model: str = FAST,
    *,
    gpus: int = 2,
    held: Mapping[int, tuple[Resident, ...]] | None = None,
    allocated: Mapping[int, int] | None = None,
    unhealthy: tuple[int, ...] = (),
    observed_at: float = NOW,
) -> NodeState:
    """A node whose GPUs in `held` are allocated to their residents (whole, or the sum of their shares)."""
    held = held or {}
    allocated = dict(allocated or {})
    for index, residents in held.items():
        shares = sum(r.gpu_milli for r in residents)
        allocated.setdefault(index, shares or WHOLE_GPU_MILLI)
    return node_state(
        name,
        allocated=allocated,
        residents=dict(held),
        model=model,
        gpus=gpus,
        observed_at=observed_at,
        unhealthy=unhealthy,
    )


def ends(seconds: Mapping[str, float | None]) -> LeaveTimes:
    """`LeaveTimes` at NOW that know each resident's end, in seconds from NOW, by its pod name (None: unknown)."""

    def end(node: NodeState, r: Resident) -> float | None:
        left = seconds.get(r.pod)
        return None if left is None else NOW + left

    return LeaveTimes(end, NOW)


def full_fast() -> NodeState:
    """A fast node with both GPUs held, by ml/a and ml/b."""
    return gpu_node("fast", held={0: (resident("ml/a"),), 1: (resident("ml/b"),)})


def verdicts(
    nodes: list[NodeState],
    remaining: Mapping[str, float | None],
    *,
    names: list[str] | None = None,
    pod: PodRequest = POD,
    config: ScoringConfig = CONFIG,
    predictors: Predictors = PREDICTORS,
) -> dict[str, str]:
    by_name = {n.name: n for n in nodes}
    return wait_verdicts(
        pod,
        names if names is not None else ["slow"],
        by_name,
        config=config,
        predictors=predictors,
        leaving=ends(remaining),
        now_seconds=NOW,
    )


# --------------------------------------------------------------------------------------------------------------------
# room_seconds


def test_room_is_now_with_free_gpus_else_when_the_kth_gpu_empties() -> None:
    node = gpu_node(
        "n",
        gpus=4,
        held={1: (resident("ml/a"),), 2: (resident("ml/b"),), 3: (resident("ml/c"),)},
    )
    remaining = ends({"ml/a": 50.0, "ml/b": 200.0, "ml/c": None})
    assert room_seconds(node, PodRequest(gpus=1), remaining) == 0.0
    assert room_seconds(node, PodRequest(gpus=2), remaining) == 50.0
    assert room_seconds(node, PodRequest(gpus=3), remaining) == 200.0
    assert room_seconds(node, PodRequest(gpus=4), remaining) == math.inf  # ml/c's end is unknown: never frees
    assert room_seconds(node, PodRequest(gpus=5), remaining) == math.inf


def test_an_unhealthy_gpu_never_gives_room() -> None:
    node = gpu_node("n", gpus=2, held={1: (resident("ml/a"),)}, unhealthy=(0,))
    assert room_seconds(node, PodRequest(gpus=1), ends({"ml/a": 30.0})) == 30.0
    assert room_seconds(node, PodRequest(gpus=2), ends({"ml/a": 30.0})) == math.inf


def test_a_gpu_held_without_a_known_pod_on_it_never_frees() -> None:
    reserved = gpu_node("n", gpus=1, allocated={0: WHOLE_GPU_MILLI})  # granted to a pod that runs no process yet
    host_only = gpu_node("h", gpus=1, allocated={0: WHOLE_GPU_MILLI}, held={0: (Resident(pod="host"),)})
    for node in (reserved, host_only):
        assert room_seconds(node, PodRequest(gpus=1), ends({})) == math.inf


def test_a_share_fits_beside_shares_now_or_waits_for_the_whole_gpu_to_empty() -> None:
    node = gpu_node("n", gpus=1, held={0: (resident("ml/a", milli=300), resident("ml/b", milli=300))})
    remaining = ends({"ml/a": 100.0, "ml/b": 400.0})
    assert room_seconds(node, PodRequest(gpu_milli=400), remaining) == 0.0
    # 500 would fit once ml/a leaves (100 s), but shares freed one by one are not counted: the GPU empties at 400 s.
    assert room_seconds(node, PodRequest(gpu_milli=500), remaining) == 400.0
    assert room_seconds(node, PodRequest(gpu_milli=500), ends({"ml/a": 100.0, "ml/b": None})) == math.inf


def test_room_as_a_clock_time_holds_until_a_resident_runs_past_its_predicted_end() -> None:
    """`room_at` is `room_seconds` plus the clock, unchanged while the clock moves until the first predicted end
    passes; then that GPU counts as never freeing, and the answer is found again."""
    node = gpu_node(
        "n",
        gpus=4,
        held={0: (resident("ml/a"),), 1: (resident("ml/b"),), 2: (resident("ml/c"),), 3: (resident("ml/d"),)},
    )
    at = {"ml/a": NOW + 50.0, "ml/b": NOW + 200.0, "ml/c": NOW + 300.0, "ml/d": NOW + 1000.0}

    def leaving(now: float) -> LeaveTimes:
        return LeaveTimes(lambda _, r: at[r.pod], now)

    two = PodRequest(gpus=2)
    assert room_at(node, two, leaving(NOW)) == RoomAt(NOW + 200.0, NOW + 50.0)
    for now in (NOW, NOW + 20.0, NOW + 49.0):
        assert room_seconds(node, two, leaving(now)) == NOW + 200.0 - now
    # At NOW + 50 ml/a is overdue: its GPU never frees as far as is known, so two GPUs empty when ml/c leaves.
    assert room_at(node, two, leaving(NOW + 50.0)) == RoomAt(NOW + 300.0, NOW + 200.0)
    assert room_seconds(node, two, leaving(NOW + 50.0)) == 250.0
    assert room_at(node, PodRequest(gpus=4), leaving(NOW + 50.0)) == RoomAt(math.inf, NOW + 200.0)
    assert room_at(node, PodRequest(gpus=4), leaving(NOW + 1000.0)) == RoomAt(math.inf, math.inf)


def test_the_routes_room_now_agrees_with_room_seconds() -> None:
    nodes = [
        gpu_node("free", gpus=2),
        gpu_node("half", gpus=2, held={0: (resident("ml/a"),)}),
        gpu_node("full", gpus=2, held={0: (resident("ml/a"),), 1: (resident("ml/b"),)}),
        gpu_node("sick", gpus=2, held={1: (resident("ml/a"),)}, unhealthy=(0,)),
        gpu_node("shared", gpus=1, held={0: (resident("ml/a", milli=700),)}),
        gpu_node("packed", gpus=1, held={0: (resident("ml/a", milli=1000),)}),
    ]
    pods = [
        PodRequest(gpus=1),
        PodRequest(gpus=2),
        PodRequest(gpu_milli=300),
        PodRequest(gpu_milli=500),
        PodRequest(gpu_memory_bytes=1 << 30),
    ]
    unknown = ends({})
    for node in nodes:
        for pod in pods:
            assert has_room_now(node, pod) == (room_seconds(node, pod, unknown) == 0.0), (node.name, pod)


# --------------------------------------------------------------------------------------------------------------------
# wait_verdicts


def test_a_slow_candidate_fails_when_the_fast_model_frees_soon_enough() -> None:
    slow = gpu_node("slow", SLOW)
    failed = verdicts([full_fast(), slow], {"ml/a": 100.0, "ml/b": 5000.0})
    assert set(failed) == {"slow"}
    assert failed["slow"] == (
        f"passed over to wait for room on {FAST} in ~2 min: done in ~18 min from now vs ~67 min on this {SLOW}"
    )


def test_a_slow_candidate_passes_when_the_fast_model_frees_too_late() -> None:
    assert verdicts([full_fast(), gpu_node("slow", SLOW)], {"ml/a": 10_000.0, "ml/b": 20_000.0}) == {}


def test_the_slack_sets_how_much_sooner_waiting_must_finish() -> None:
    nodes = [full_fast(), gpu_node("slow", SLOW)]
    remaining = {"ml/a": 1700.0}  # done on the fast model in 2700 s; 4000 s on the slow one
    assert set(verdicts(nodes, remaining, config=ScoringConfig(wait_slack=1.0))) == {"slow"}
    assert verdicts(nodes, remaining, config=ScoringConfig(wait_slack=1.5)) == {}  # 4000 < 1.5 × 2700


def test_a_fast_candidate_is_never_passed_over() -> None:
    nodes = [full_fast(), gpu_node("slow", SLOW), gpu_node("fast-free", FAST)]
    failed = verdicts(nodes, {"ml/a": 100.0}, names=["slow", "fast-free"])
    assert set(failed) == {"slow"}
    assert failed["slow"].startswith(f"passed over: {FAST} has room now and finishes it in ~")  # no "waiting"


@pytest.mark.parametrize(
    ("case", "pod", "config", "predictors"),
    [
        ("no JCT estimate (heuristics)", POD, CONFIG, Predictors.heuristic()),
        ("no workload", PodRequest(gpus=1), CONFIG, PREDICTORS),
        ("gang member", PodRequest(gpus=1, workload="bert", gang="job-1"), CONFIG, PREDICTORS),
        ("waiting turned off", POD, ScoringConfig(wait_slack=None), PREDICTORS),
    ],
)
def test_nobody_waits_without_an_estimate_in_a_gang_or_when_off(
    case: str, pod: PodRequest, config: ScoringConfig, predictors: Predictors
) -> None:
    assert isinstance(Predictors.heuristic().jct, HeuristicJct)
    nodes = [full_fast(), gpu_node("slow", SLOW)]
    assert verdicts(nodes, {"ml/a": 100.0}, pod=pod, config=config, predictors=predictors) == {}, case


def test_a_fast_node_the_pod_may_not_use_is_not_waited_for() -> None:
    nodes = {n.name: n for n in (full_fast(), gpu_node("slow", SLOW))}
    leaving = ends({"ml/a": 100.0, "ml/b": 5000.0})

    def wait(usable: Callable[[str], bool] | None) -> dict[str, str]:
        return wait_verdicts(POD, ["slow"], nodes, config=CONFIG, predictors=PREDICTORS, leaving=leaving, usable=usable)

    assert set(wait(None)) == {"slow"}
    assert wait(lambda name: name != "fast") == {}  # e.g. a node selector that picks the slow model
    assert set(wait(lambda name: name != "slow")) == {
        "slow"
    }  # offered by the scheduler: a candidate is never ruled out


def test_nobody_waits_in_a_cluster_of_one_gpu_model() -> None:
    busy = gpu_node("busy", SLOW, held={0: (resident("ml/a"),), 1: (resident("ml/b"),)})
    assert verdicts([busy, gpu_node("slow", SLOW)], {"ml/a": 1.0, "ml/b": 1.0}) == {}


def test_stale_nodes_are_neither_waited_for_nor_passed_over() -> None:
    stale_fast = gpu_node("fast", held={0: (resident("ml/a"),), 1: (resident("ml/b"),)}, observed_at=NOW - 3600)
    assert verdicts([stale_fast, gpu_node("slow", SLOW)], {"ml/a": 1.0}) == {}
    stale_slow = gpu_node("slow", SLOW, observed_at=NOW - 3600)
    assert verdicts([full_fast(), stale_slow], {"ml/a": 1.0}) == {}


def test_a_resident_whose_end_is_unknown_never_frees_its_gpu() -> None:
    assert verdicts([full_fast(), gpu_node("slow", SLOW)], {"ml/a": None, "ml/b": None}) == {}


def test_the_filter_gives_the_wait_reason_only_with_predictors_and_leave_times() -> None:
    nodes = {n.name: n for n in (full_fast(), gpu_node("slow", SLOW), gpu_node("tiny", SLOW, gpus=1))}
    pod = PodRequest(gpus=2, workload="bert")
    leaving = ends({"ml/a": 100.0, "ml/b": 150.0})
    candidates = ["slow", "tiny", "unknown"]
    passed, failed = filter_nodes(
        FilterRequest(pod, candidates, nodes, CONFIG, now_seconds=NOW, predictors=PREDICTORS, leaving=leaving)
    )
    assert passed == ["unknown"]
    assert failed["slow"].startswith(f"passed over to wait for room on {FAST} in ~2 min:")
    assert failed["tiny"] == "needs 2 free GPUs, has 1"  # too small anyway: that reason comes first
    passed, failed = filter_nodes(FilterRequest(pod, candidates, nodes, CONFIG, now_seconds=NOW))
    assert passed == ["slow", "unknown"]


# --------------------------------------------------------------------------------------------------------------------
# jct_leave_times, and its memo


def test_a_resident_leaves_at_its_start_plus_its_predicted_jct() -> None:
    one = resident("ml/a", started=NOW - 100)
    two = resident("ml/b", started=NOW - 100)
    node = gpu_node("n", gpus=3, held={0: (one,), 1: (two,), 2: (two,)})
    leaving = jct_leave_times(PREDICTORS, NOW)
    assert leaving.end(node, one) == pytest.approx(NOW - 100 + 500.0)
    assert leaving.end(node, two) == pytest.approx(NOW - 100 + 500.0 / 2)  # predicted on the two GPUs it holds here
    slow = gpu_node("s", SLOW, gpus=1, held={0: (one,)})
    assert leaving.end(slow, one) == pytest.approx(NOW - 100 + 2000.0)


@pytest.mark.parametrize(
    ("case", "who"),
    [
        ("not started", resident("ml/a", started=None)),
        ("no workload", resident("ml/a", started=NOW - 100, workload=None)),
        ("no estimate", resident("ml/a", started=NOW - 100, workload="never-seen")),
    ],
)
def test_a_resident_without_a_basis_for_its_end_has_none(case: str, who: Resident) -> None:
    node = gpu_node("n", gpus=1, held={0: (who,)})
    assert jct_leave_times(PREDICTORS, NOW).end(node, who) is None, case
    assert room_seconds(node, PodRequest(gpus=1), jct_leave_times(PREDICTORS, NOW)) == math.inf, case


def test_an_overdue_resident_never_frees_its_gpu_even_from_the_memo() -> None:
    node = gpu_node("n", gpus=2, held={0: (resident("ml/a", started=NOW - 100),), 1: (resident("ml/b", started=NOW),)})
    pod = PodRequest(gpus=1, workload="bert")
    assert room_seconds(node, pod, jct_leave_times(PREDICTORS, NOW)) == pytest.approx(
        400.0
    )  # ml/a: 500 s from NOW - 100
    later = jct_leave_times(PREDICTORS, NOW + 450)  # ml/a overdue by 50 s; ml/b 50 s left
    assert room_seconds(node, pod, later) == pytest.approx(50.0)
    assert room_seconds(node, PodRequest(gpus=2), later) == math.inf


class CountingJct(TableJct):
    def __init__(self) -> None:
        self.calls = 0

    def jct_seconds(self, workload: str | None, gpu_model: str, gpu_count: int) -> float | None:
        self.calls += 1
        return super().jct_seconds(workload, gpu_model, gpu_count)


def test_each_nodes_leave_times_are_predicted_once_per_jct_predictor() -> None:
    busy = gpu_node("fast", gpus=2, held={0: (resident("ml/a", started=NOW),), 1: (resident("ml/b", started=NOW),)})
    nodes = {n.name: n for n in (busy, gpu_node("slow", SLOW))}
    counting = CountingJct()
    predictors = replace(PREDICTORS, jct=counting)

    def wait(now: float, predictors: Predictors = predictors) -> dict[str, str]:
        leaving = jct_leave_times(predictors, now)
        return wait_verdicts(POD, ["slow"], nodes, config=CONFIG, predictors=predictors, leaving=leaving)

    assert f"room on {FAST} in ~8 min:" in wait(NOW)["slow"]
    residents_predicted = counting.calls - 2  # the rest: the pod itself on each GPU model
    assert residents_predicted == 2
    assert f"room on {FAST} in ~7 min:" in wait(NOW + 100)["slow"]  # the same memo, a later now
    assert counting.calls - 4 == residents_predicted
    reloaded = CountingJct()
    assert f"room on {FAST} in ~7 min:" in wait(NOW + 100, replace(PREDICTORS, jct=reloaded))["slow"]
    assert reloaded.calls == 4  # a new predictor (a model reload) predicts afresh


def test_leave_times_without_a_cache_key_are_not_memoised() -> None:
    node = gpu_node("n", gpus=1, held={0: (resident("ml/a"),)})
    left = {"ml/a": 100.0}
    assert room_seconds(node, PodRequest(gpus=1), ends(left)) == 100.0
    left["ml/a"] = 300.0
    assert room_seconds(node, PodRequest(gpus=1), ends(left)) == 300.0
    assert node not in LEAVE_ENDS


def reference_room(node: NodeState, pod: PodRequest, leaving: LeaveTimes) -> float:
    """The rule's room, written out plainly: every healthy GPU's time to empty (0 when it has room for the pod now;
    inf when a pod on it has no end or an end already passed), the k-th smallest."""
    times = []
    for g in node.gpus:
        if not g.healthy:
            continue
        if g.allocated_milli == 0 or (not pod.whole_gpus and g.allocated_milli + pod.share_milli <= WHOLE_GPU_MILLI):
            times.append(0.0)
            continue
        pods = [r for r in g.residents if r.gpu_milli or r.workload or r.started_seconds is not None]
        at = [leaving.end(node, r) for r in pods]
        if not pods or any(a is None or a <= leaving.now_seconds for a in at):
            times.append(math.inf)
        else:
            times.append(max(a for a in at if a is not None) - leaving.now_seconds)
    need = max(pod.whole_gpus, 1)
    return sorted(times)[need - 1] if len(times) >= need else math.inf


def test_room_from_the_memo_matches_the_rule_written_out() -> None:
    rng = random.Random(7)
    pods = [PodRequest(gpus=k, workload="bert") for k in (1, 2, 3, 4)] + [PodRequest(gpu_milli=m) for m in (300, 600)]
    for case in range(200):
        held: dict[int, tuple[Resident, ...]] = {}
        for g in range(4):
            if rng.random() < 0.75:
                kind = rng.random()
                started = None if kind < 0.1 else NOW - rng.uniform(0, 3000)
                workload = None if kind > 0.95 else rng.choice(["bert", "resnet", "never-seen"])
                milli = rng.choice([0, 0, 300, 500])
                held[g] = tuple(
                    resident(f"ml/{case}-{g}-{i}", milli=milli, started=started, workload=workload)
                    for i in range(2 if milli and milli <= 500 else 1)
                )
        node = gpu_node("n", rng.choice([FAST, SLOW]), gpus=4, held=held, unhealthy=(3,) if rng.random() < 0.2 else ())
        for now in (NOW, NOW + rng.uniform(0, 3000)):
            leaving = jct_leave_times(PREDICTORS, now)
            for pod in pods:
                assert room_seconds(node, pod, leaving) == pytest.approx(reference_room(node, pod, leaving)), (
                    case,
                    now,
                    pod,
                )


# --------------------------------------------------------------------------------------------------------------------
# Through the API: a served JCT model, start times from the watch


WORKLOAD = "ResNet-50 (batch size 64)"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A store whose promoted JCT model is small (fast to fit), trained on the bundled Gavel trace."""
    root = tmp_path_factory.mktemp("wait")
    url = f"sqlite:///{root}/store.db"
    engine = db.make_engine(url)
    db.upgrade(engine)
    gavel = load_gavel(bundled_gavel_dir() / GAVEL_THROUGHPUTS)
    executions = gavel_trace_executions(bundled_gavel_dir() / GAVEL_TRACES, gavel.throughputs).head(400)
    model = JctModel(num_boost_round=20, num_threads=1).fit(executions)
    save_trained(Trained(model=model, metrics={}, training_summary={}), root / "jct")
    register(db.session_factory(engine), "jct", root / "jct")
    engine.dispose()
    return url, root


@pytest.fixture
def clock() -> Clock:
    return Clock(1_800_000_000.0)


@pytest.fixture
def state(clock: Clock) -> ClusterState:
    return ClusterState(clock=clock)


@pytest.fixture
def client(store: tuple[str, Path], state: ClusterState) -> Iterator[TestClient]:
    settings = AdvisorSettings(
        db_url=store[0],
        no_kube=True,
        model_dir=store[1] / "trained",
        hold_for_blocked=True,
        allow_unauthenticated_writes=True,
    )
    with TestClient(create_app(settings, state=state)) as c:
        yield c


def fill_fast_node(client: TestClient, state: ClusterState, *, started: float | None) -> None:
    """`fast` (H100): every GPU held by a one-GPU pod of WORKLOAD that started at `started`; `slow` (T4): idle."""
    pods = [f"r{i}" for i in range(8)]
    state.replace_pods(
        [PodAllocation(pod=f"ml/{p}", node="fast", gpus=1, workload=WORKLOAD, started_seconds=started) for p in pods],
        [],
    )
    for raw in (
        snapshot("fast", busy={i: [process(p, workload=WORKLOAD)] for i, p in enumerate(pods)}),
        snapshot("slow", model=SLOW),
    ):
        assert client.post("/v1/telemetry", json=raw).status_code == 202


def filter_(client: TestClient, names: list[str], workload: str = WORKLOAD) -> dict[str, Any]:
    body = {"Pod": v1_pod(gpus=1, labels={"gpuadvisor.io/workload": workload}), "NodeNames": names}
    response = client.post("/extender/filter", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_the_extender_filter_keeps_a_pod_off_the_slow_node_while_the_fast_one_frees_soon(
    client: TestClient, state: ClusterState, clock: Clock
) -> None:
    assert client.get("/v1/models").json()["serving"]["jct"] == "jct v1"
    fill_fast_node(client, state, started=clock.now - 60)
    answer = filter_(client, ["slow", "never-seen"])
    assert answer["NodeNames"] == ["never-seen"]
    failed = answer["FailedNodes"]
    assert set(failed) == {"slow"}
    assert failed["slow"].startswith(f"passed over to wait for room on {FAST} in ~")
    assert failed["slow"].endswith(f"on this {SLOW}")


def test_the_extender_filter_passes_the_slow_node_when_the_fast_pods_ends_are_unknown(
    client: TestClient, state: ClusterState, clock: Clock
) -> None:
    fill_fast_node(client, state, started=None)  # not started per the API: no basis for when they leave
    answer = filter_(client, ["slow"])
    assert answer["NodeNames"] == ["slow"]
    fill_fast_node(client, state, started=clock.now - 365 * 86400)  # long overdue: no basis either
    assert filter_(client, ["slow"])["NodeNames"] == ["slow"]


def test_a_fast_node_with_room_that_the_scheduler_did_not_offer_is_not_waited_for(
    client: TestClient, state: ClusterState, clock: Clock
) -> None:
    fill_fast_node(client, state, started=None)  # `fast` never frees: only `fast-free` could be waited for
    assert client.post("/v1/telemetry", json=snapshot("fast-free")).status_code == 202
    # Not offered (a node selector, a taint, …): waiting for it could last for ever.
    assert filter_(client, ["slow"])["NodeNames"] == ["slow"]
    offered = filter_(client, ["slow", "fast-free"])
    assert offered["NodeNames"] == ["fast-free"]
    assert set(offered["FailedNodes"]) == {"slow"}


def test_a_pod_pinned_to_the_slow_model_by_its_node_selector_does_not_wait_for_the_fast_one(
    client: TestClient, state: ClusterState, clock: Clock
) -> None:
    fill_fast_node(client, state, started=clock.now - 60)
    pinned = v1_pod(gpus=1, labels={"gpuadvisor.io/workload": WORKLOAD})
    pinned["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "Tesla-T4"}
    body = {"Pod": pinned, "NodeNames": ["slow"]}
    # The node watch has not reported the fast node's labels: it may be one the pod can use, so the pod waits.
    assert set(client.post("/extender/filter", json=body).json()["FailedNodes"]) == {"slow"}
    state.set_node_labels("fast", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    state.set_node_labels("slow", {"nvidia.com/gpu.product": "Tesla-T4"})
    assert client.post("/extender/filter", json=body).json()["NodeNames"] == ["slow"]
    # The same through a required node affinity; and a pod not pinned still waits.
    del pinned["spec"]["nodeSelector"]
    pinned["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.product", "operator": "NotIn", "values": ["NVIDIA-H100-80GB-HBM3"]}
                        ]
                    }
                ]
            }
        }
    }
    assert client.post("/extender/filter", json=body).json()["NodeNames"] == ["slow"]
    assert set(filter_(client, ["slow"])["FailedNodes"]) == {"slow"}


def test_the_extender_filter_holds_the_nodes_where_a_blocked_pending_pod_starts_first(
    client: TestClient, state: ClusterState, clock: Clock
) -> None:
    """`fast` is full; `fast2` has 4 of 8 GPUs free and its pods started a second earlier, so it frees first; ml/big
    (8 GPUs, pinned to H100s) is pending and older than the pod filtered: `fast2` is held for it."""
    full = [f"r{i}" for i in range(8)]
    half = [f"h{i}" for i in range(4)]
    started = {"fast": clock.now, "fast2": clock.now - 1}
    state.replace_pods(
        [
            PodAllocation(pod=f"ml/{p}", node=node, gpus=1, workload=WORKLOAD, started_seconds=started[node])
            for node, pods in (("fast", full), ("fast2", half))
            for p in pods
        ],
        [],
    )
    for raw in (
        snapshot("fast", busy={i: [process(p, workload=WORKLOAD)] for i, p in enumerate(full)}),
        snapshot("fast2", busy={i: [process(p, workload=WORKLOAD)] for i, p in enumerate(half)}),
        snapshot("slow", model=SLOW),
    ):
        assert client.post("/v1/telemetry", json=raw).status_code == 202
    for node, product in (("fast", "H100"), ("fast2", "H100"), ("slow", "Tesla-T4")):
        state.set_node_labels(node, {"nvidia.com/gpu.product": product})
    big = PodRequest(name="ml/big", gpus=8, workload=WORKLOAD)
    h100 = NodePlacement({"nvidia.com/gpu.product": "H100"})
    pod = v1_pod("new", gpus=1, labels={"gpuadvisor.io/workload": WORKLOAD})
    scheduler = pod["spec"]["schedulerName"]
    queued = PendingPod(pod="ml/big", request=big, scheduler=scheduler, created_seconds=clock.now - 300, placement=h100)
    state.update_pending("ml/big", queued)
    pod["metadata"]["creationTimestamp"] = datetime.fromtimestamp(clock.now - 10, UTC).isoformat()
    answer = client.post("/extender/filter", json={"Pod": pod, "NodeNames": ["fast2"]}).json()
    assert answer["NodeNames"] == []
    assert answer["FailedNodes"]["fast2"].startswith("held for ml/big, pending and predicted to start here in ~")
    pod["spec"]["priority"] = 100  # ahead of ml/big in the queue: nothing is held for it
    assert client.post("/extender/filter", json={"Pod": pod, "NodeNames": ["fast2"]}).json()["NodeNames"] == ["fast2"]
    del pod["spec"]["priority"]
    pod["spec"]["schedulerName"] = "another-scheduler"  # ml/big is not in its queue
    assert client.post("/extender/filter", json={"Pod": pod, "NodeNames": ["fast2"]}).json()["NodeNames"] == ["fast2"]
    pod["spec"]["schedulerName"] = scheduler
    state.update_pending("ml/big", None)  # bound or deleted
    assert client.post("/extender/filter", json={"Pod": pod, "NodeNames": ["fast2"]}).json()["NodeNames"] == ["fast2"]


def test_the_extender_filter_answers_every_candidate_for_a_pod_without_a_workload(
    client: TestClient, state: ClusterState, clock: Clock
) -> None:
    fill_fast_node(client, state, started=clock.now - 60)
    pod = v1_pod(gpus=1)
    del pod["metadata"]["labels"]["gpuadvisor.io/workload"]
    response = client.post("/extender/filter", json={"Pod": pod, "NodeNames": ["slow", "fast", "never-seen"]})
    assert response.status_code == 200
    answer = response.json()
    assert answer["NodeNames"] == ["slow", "never-seen"]
    assert answer["FailedNodes"] == {"fast": "needs 1 free GPUs, has 0"}


@pytest.mark.parametrize("slack", [0.0, 0.5, 0.999])
def test_a_wait_slack_below_one_is_refused_naming_it(slack: float) -> None:
    with pytest.raises(ScoringInputError, match="wait_slack must be >= 1"):
        ScoringConfig(wait_slack=slack)


def test_with_shortest_first_the_filter_keeps_a_new_pod_off_room_an_older_pending_pod_takes(
    store: tuple[str, Path], state: ClusterState, clock: Clock
) -> None:
    """`fast` has one free GPU; ml/old (same workload, pending for an hour) has the higher response ratio: the pod
    filtered, 10 s old, yields it — until ml/old has been expected there for CLAIM_GRACE_SECONDS without binding."""
    settings = AdvisorSettings(
        db_url=store[0],
        no_kube=True,
        model_dir=store[1] / "trained",
        shortest_first=True,
        allow_unauthenticated_writes=True,
    )
    with TestClient(create_app(settings, state=state)) as client:
        busy = [f"r{i}" for i in range(7)]
        state.replace_pods(
            [
                PodAllocation(pod=f"ml/{p}", node="fast", gpus=1, workload=WORKLOAD, started_seconds=clock.now)
                for p in busy
            ],
            [],
        )
        raw = snapshot("fast", busy={i: [process(p, workload=WORKLOAD)] for i, p in enumerate(busy)})
        assert client.post("/v1/telemetry", json=raw).status_code == 202
        pod = v1_pod("new", gpus=1, labels={"gpuadvisor.io/workload": WORKLOAD})
        pod["metadata"]["creationTimestamp"] = datetime.fromtimestamp(clock.now - 10, UTC).isoformat()
        old = PodRequest(name="ml/old", gpus=1, workload=WORKLOAD)
        scheduler = pod["spec"]["schedulerName"]
        state.update_pending("ml/old", PendingPod("ml/old", old, scheduler=scheduler, created_seconds=clock.now - 3600))
        answer = client.post("/extender/filter", json={"Pod": pod, "NodeNames": ["fast"]}).json()
        assert answer["NodeNames"] == []
        assert answer["FailedNodes"]["fast"].startswith("room kept for ml/old, pending ~3600 s for a ~")
        assert answer["FailedNodes"]["fast"].endswith("(shortest first)")
        pod["spec"]["schedulerName"] = "another-scheduler"  # ml/old is not in its queue
        assert client.post("/extender/filter", json={"Pod": pod, "NodeNames": ["fast"]}).json()["NodeNames"] == ["fast"]
        pod["spec"]["schedulerName"] = scheduler
        clock.now += CLAIM_GRACE_SECONDS + 1  # ml/old never bound: something unseen keeps it off `fast`
        raw = snapshot("fast", busy={i: [process(p, workload=WORKLOAD)] for i, p in enumerate(busy)})
        assert client.post("/v1/telemetry", json=raw).status_code == 202
        assert client.post("/extender/filter", json={"Pod": pod, "NodeNames": ["fast"]}).json()["NodeNames"] == ["fast"]
        state.update_pending("ml/old", None)
        assert state.claimed_since("ml/old") is None
