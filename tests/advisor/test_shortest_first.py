"""Shortest first: pending pods are served by response ratio ((waited + run) / run, highest first). Where the pods
ahead are expected to go (`claims`), which candidates the filtered pod yields (`yield_verdicts`), the claimants drawn
from the pending queue (`advisor.placement.shortest.queue_claims`), and the filter with both."""

from __future__ import annotations

import pytest

from advisor.placement.config import ScoringConfig
from advisor.placement.filter import FilterRequest, QueueRules, filter_nodes
from advisor.placement.queue import NodePlacement, PendingPod
from advisor.placement.shortest import CLAIM_SCAN, Claim, Claimant, claims, queue_claims, response_ratio, yield_verdicts
from advisor.placement.types import NodeState, PodRequest
from tests.advisor.test_wait import FAST, NOW, PREDICTORS, SLOW, gpu_node, resident

CONFIG = ScoringConfig(shortest_first=True)


def claimant(pod: str, waited: float, runs: dict[str, float], *, gpus: int = 1, milli: int = 0) -> Claimant:
    request = PodRequest(name=pod, gpus=0 if milli else gpus, gpu_milli=milli)
    return Claimant(pod, request, waited_seconds=waited, runs=runs)


def nodes_of(*states: NodeState) -> dict[str, NodeState]:
    return {n.name: n for n in states}


def test_the_response_ratio_is_the_slowdown_if_started_now_and_grows_with_the_wait() -> None:
    assert response_ratio(0.0, 100.0) == 1.0
    assert response_ratio(300.0, 100.0) == 4.0
    assert response_ratio(-5.0, 100.0) == 1.0  # a creation time in the future (clock skew) counts as no wait
    c = claimant("ml/a", 50.0, {FAST: 100.0, SLOW: 400.0})
    assert (c.run_seconds, c.ratio) == (100.0, 1.5)  # on its quickest model


def test_pods_claim_room_in_ratio_order_on_their_fastest_model_fitting_tightly() -> None:
    nodes = nodes_of(
        gpu_node("fast-a", gpus=2),  # both GPUs free
        gpu_node("fast-b", gpus=2, held={0: (resident("ml/x"),)}),  # one free: the tighter fit
        gpu_node("slow", SLOW, gpus=2),
    )
    runs = {FAST: 100.0, SLOW: 120.0}
    low, high, mid = claimant("ml/low", 10.0, runs), claimant("ml/high", 500.0, runs), claimant("ml/mid", 50.0, runs)
    log = claims([low, high, mid], nodes, config=CONFIG)
    # ml/high first, onto fast-b's last GPU (tightest); then ml/mid and ml/low share fast-a.
    assert log == [Claim(high, "fast-b"), Claim(mid, "fast-a"), Claim(low, "fast-a")]
    pair = claimant("ml/pair", 900.0, runs, gpus=2)
    assert claims([pair, high], nodes, config=CONFIG) == [Claim(pair, "fast-a"), Claim(high, "fast-b")]


def test_a_pod_claims_no_room_on_a_model_it_would_pass_over_waiting() -> None:
    nodes = nodes_of(gpu_node("slow", SLOW, gpus=1))
    patient = claimant("ml/p", 500.0, {FAST: 100.0, SLOW: 400.0})  # the slow model is 4x: beyond wait_slack 1.5
    assert claims([patient], nodes, config=CONFIG) == []
    assert claims([patient], nodes, config=ScoringConfig(shortest_first=True, wait_slack=None)) == [
        Claim(patient, "slow")
    ]
    unmeasured = claimant("ml/u", 500.0, {FAST: 100.0})  # no estimate on the slow model: it claims none there
    assert claims([unmeasured], nodes, config=CONFIG) == []


def test_a_pod_claims_only_nodes_its_placement_allows_and_shares_go_to_the_fullest_gpu() -> None:
    nodes = nodes_of(gpu_node("fast-a", gpus=1), gpu_node("fast-b", gpus=2, allocated={0: 500}))
    pinned = Claimant(
        "ml/pinned", PodRequest(name="ml/pinned", gpus=1), 100.0, {FAST: 10.0}, usable=lambda n: n == "fast-a"
    )
    share = claimant("ml/share", 50.0, {FAST: 10.0}, milli=500)
    again = claimant("ml/again", 40.0, {FAST: 10.0}, milli=500)
    log = claims([pinned, share, again], nodes, config=CONFIG)
    assert log == [Claim(pinned, "fast-a"), Claim(share, "fast-b"), Claim(again, "fast-b")]
    # ml/share filled fast-b's half-used GPU, ml/again its free one: no whole GPU is left for another pod.
    whole = PodRequest(name="ml/whole", gpus=1)
    assert set(yield_verdicts(whole, ["fast-a", "fast-b"], nodes, log, rank=(0, 1.0))) == {"fast-a", "fast-b"}
    # Alone, a share goes to the node it fills most: fast-a's free GPU leaves less than fast-b's half GPU and a whole.
    assert claims([share], nodes, config=CONFIG) == [Claim(share, "fast-a")]


def test_claims_stop_after_claim_scan_pods_and_stale_nodes_are_not_claimed() -> None:
    many = [claimant(f"ml/{i}", 1000.0 - i, {FAST: 10.0}) for i in range(CLAIM_SCAN + 5)]
    big = gpu_node("fast", gpus=CLAIM_SCAN + 5)
    assert len(claims(many, nodes_of(big), config=CONFIG)) == CLAIM_SCAN
    stale = gpu_node("fast", gpus=4, observed_at=NOW - 3600)
    assert claims(many, nodes_of(stale), config=CONFIG, now_seconds=NOW) == []


def test_a_pod_yields_the_room_pods_with_a_higher_ratio_take_and_keeps_the_rest() -> None:
    nodes = nodes_of(
        gpu_node("fast-a", gpus=1), gpu_node("fast-b", gpus=1), gpu_node("full", gpus=1, held={0: (resident("x"),)})
    )
    runs = {FAST: 100.0}
    older = claimant("ml/older", 400.0, runs)  # ratio 5
    log = claims([older], nodes, config=CONFIG)
    pod = PodRequest(name="ml/new", gpus=1)
    verdicts = yield_verdicts(pod, ["fast-a", "fast-b", "full"], nodes, log, rank=(0, 1.0))
    # ml/older takes fast-a (first of two equal fits); fast-b stays free for ml/new; `full` has no room anyway.
    assert list(verdicts) == ["fast-a"]
    assert verdicts["fast-a"] == (
        "room kept for ml/older, pending ~400 s for a ~100 s run: "
        "response ratio 5.00 vs this pod's 1.00 (shortest first)"
    )
    assert yield_verdicts(pod, ["fast-a"], nodes, log, rank=(0, 5.0)) == {}  # an equal ratio does not yield
    assert yield_verdicts(PodRequest(name="ml/g", gpus=1, gang="g"), ["fast-a"], nodes, log, rank=(0, 1.0)) == {}
    own = claims([claimant("ml/new", 400.0, runs)], nodes, config=CONFIG)
    assert yield_verdicts(pod, ["fast-a"], nodes, own, rank=(0, 1.0)) == {}  # its own claim is not another's


def test_a_long_pod_stops_yielding_once_it_has_waited_long_enough() -> None:
    """Highest response ratio next cannot starve a long pod: its ratio grows with its wait until it passes a short
    pod's that has just arrived."""
    nodes = nodes_of(gpu_node("fast", gpus=1))
    long_run, short = 10_000.0, claimant("ml/short", 60.0, {FAST: 100.0})  # ratio 1.6
    log = claims([short], nodes, config=CONFIG)
    pod = PodRequest(name="ml/long", gpus=1)
    assert set(yield_verdicts(pod, ["fast"], nodes, log, rank=(0, response_ratio(1_000.0, long_run)))) == {"fast"}
    assert yield_verdicts(pod, ["fast"], nodes, log, rank=(0, response_ratio(7_000.0, long_run))) == {}


def test_queue_claims_takes_the_pods_ahead_by_ratio_of_the_same_scheduler_and_not_gangs() -> None:
    nodes = nodes_of(gpu_node("fast", gpus=4), gpu_node("slow", SLOW, gpus=4))
    bert = PodRequest(name="ml/new", gpus=1, workload="bert")  # 1000 s on FAST

    def queued(
        pod: str,
        waited: float,
        *,
        workload: str = "bert",
        gang: str | None = None,
        scheduler: str = "default-scheduler",
        placement: NodePlacement | None = None,
    ) -> PendingPod:
        request = PodRequest(name=pod, gpus=1, workload=workload, gang=gang)
        return PendingPod(pod, request, scheduler=scheduler, created_seconds=NOW - waited, placement=placement)

    pending = [
        queued("ml/a", 5000.0),  # ratio 6: ahead
        queued("ml/b", 10.0),  # ratio 1.01: behind ml/new (1.1)
        queued("ml/c", 5000.0, scheduler="other"),
        queued("ml/d", 5000.0, gang="g"),
        queued("ml/e", 5000.0, workload="unknown"),  # no JCT estimate
        # 500 s on FAST, ratio 2; pinned to the slow zone, where it would run 2000 s: it waits rather than claim.
        queued("ml/f", 500.0, workload="resnet", placement=NodePlacement({"zone": "b"})),
        queued("ml/new", 5000.0),  # the filtered pod itself, as the watch lists it
    ]
    labels = {"fast": {"zone": "a"}, "slow": {"zone": "b"}}
    log, rank = queue_claims(
        bert, (0, NOW - 100.0, "ml/new"), "default-scheduler", pending, nodes,
        labels=labels.get, config=CONFIG, predictors=PREDICTORS, now_seconds=NOW,
    )  # fmt: skip
    assert rank == (0, pytest.approx(1.1))
    assert [(c.claimant.pod, c.node) for c in log] == [("ml/a", "fast")]
    assert log[0].claimant.runs == {FAST: 1000.0, SLOW: 4000.0}
    patient = ScoringConfig(shortest_first=True, wait_slack=None)  # never waits: ml/f takes the slow node it may use
    log, _ = queue_claims(
        bert, (0, NOW - 100.0, "ml/new"), "default-scheduler", pending, nodes,
        labels=labels.get, config=patient, predictors=PREDICTORS, now_seconds=NOW,
    )  # fmt: skip
    assert [(c.claimant.pod, c.node) for c in log] == [("ml/a", "fast"), ("ml/f", "slow")]
    off = queue_claims(
        bert, (0, NOW, "ml/new"), "default-scheduler", pending, nodes,
        labels=labels.get, config=ScoringConfig(), predictors=PREDICTORS, now_seconds=NOW,
    )  # fmt: skip
    assert off == ([], None)
    anon = queue_claims(
        PodRequest(name="ml/anon", gpus=1), (0, NOW, "ml/anon"), "default-scheduler", pending, nodes,
        labels=labels.get, config=CONFIG, predictors=PREDICTORS, now_seconds=NOW,
    )  # fmt: skip
    assert anon == ([], None)  # no estimate for the filtered pod: it yields to nobody


def test_the_filter_fails_yielded_nodes_with_the_reason_and_passes_others() -> None:
    nodes = nodes_of(gpu_node("fast", gpus=1), gpu_node("fast2", gpus=1))
    log = claims([claimant("ml/old", 900.0, {FAST: 100.0})], nodes, config=CONFIG)
    pod = PodRequest(name="ml/new", gpus=1)
    queue = QueueRules(claim_log=log, rank=(0, 1.0))
    passed, failed = filter_nodes(FilterRequest(pod, ["fast", "fast2"], nodes, CONFIG, queue=queue))
    assert passed == ["fast2"]
    assert failed["fast"].startswith("room kept for ml/old, pending ~900 s")
    passed, failed = filter_nodes(FilterRequest(pod, ["fast", "fast2"], nodes, CONFIG))  # no claims: nothing yields
    assert (passed, failed) == (["fast", "fast2"], {})


def test_priority_comes_before_the_response_ratio() -> None:
    nodes = nodes_of(gpu_node("fast", gpus=1))
    urgent = Claimant("ml/urgent", PodRequest(name="ml/urgent", gpus=1), 0.0, {FAST: 100.0}, priority=10)  # ratio 1
    starved = claimant("ml/starved", 9_000.0, {FAST: 100.0})  # ratio 91, priority 0
    log = claims([starved, urgent], nodes, config=CONFIG)
    assert log == [Claim(urgent, "fast")]  # the one GPU goes to the higher priority
    pod = PodRequest(name="ml/new", gpus=1)
    verdicts = yield_verdicts(pod, ["fast"], nodes, log, rank=(0, 50.0))
    assert verdicts["fast"].endswith("~100 s run: priority 10 vs this pod's 0 (shortest first)")
    assert yield_verdicts(pod, ["fast"], nodes, log, rank=(10, 1.5)) == {}  # same priority, higher ratio
    # Through the queue: a lower-priority pod however starved takes no room ahead of the filtered one.
    queued = [PendingPod("ml/starved", PodRequest(name="ml/starved", gpus=1, workload="bert"), created_seconds=0.0)]
    bert = PodRequest(name="ml/new", gpus=1, workload="bert")
    log, rank = queue_claims(
        bert, (-10, NOW, "ml/new"), "default-scheduler", queued, nodes,
        labels=lambda _: None, config=CONFIG, predictors=PREDICTORS, now_seconds=NOW,
    )  # fmt: skip
    assert (log, rank) == ([], (10, 1.0))
