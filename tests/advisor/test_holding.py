"""Holding nodes for a blocked pending pod (EASY backfilling): where and when the head is predicted to start
(`reserve`), which pods may still use the held nodes (`reserved_verdicts`), which pending pod is the head
(`advisor.placement.holding.head_reservation`), and the same through `/extender/filter` with pending pods in the
state."""

from __future__ import annotations

import math

import pytest

from advisor.placement.config import ScoringConfig
from advisor.placement.filter import FilterRequest, QueueRules, filter_nodes
from advisor.placement.holding import (
    HEAD_SCAN,
    Reservation,
    _slots_in,
    fits_now,
    head_reservation,
    reserve,
    reserved_verdicts,
)
from advisor.placement.queue import NodePlacement, PendingPod
from advisor.placement.types import NodeState, PodRequest
from advisor.placement.waiting import jct_leave_times
from tests.advisor.test_wait import FAST, NOW, PREDICTORS, SLOW, ends, gpu_node, resident

CONFIG = ScoringConfig(hold_for_blocked=True)
BIG = PodRequest(name="ml/big", gpus=2, workload="bert")  # 1000 s on FAST, 4000 s on SLOW (per GPU count: / 2)


def busy(name: str, model: str = FAST, *, gpus: int = 2, held: dict[int, str] | None = None) -> NodeState:
    return gpu_node(name, model, gpus=gpus, held={g: (resident(p),) for g, p in (held or {}).items()})


def cluster() -> dict[str, NodeState]:
    """fast-a: both GPUs busy (ml/a 100 s, ml/b 300 s left); fast-b: one (ml/c 50 s); slow: one (ml/d 10 s)."""
    nodes = [
        busy("fast-a", held={0: "ml/a", 1: "ml/b"}),
        busy("fast-b", held={0: "ml/c"}),
        busy("slow", SLOW, held={0: "ml/d"}),
    ]
    return {n.name: n for n in nodes}


LEFT = {"ml/a": 100.0, "ml/b": 300.0, "ml/c": 50.0, "ml/d": 10.0}


def test_slots_are_the_times_a_node_fits_one_two_pods_like_this_one() -> None:
    node = gpu_node("n", gpus=4, held={1: (resident("ml/a"),), 2: (resident("ml/b"),), 3: (resident("ml/c"),)})
    leaving = ends({"ml/a": 50.0, "ml/b": 200.0, "ml/c": None})
    assert _slots_in(node, PodRequest(gpus=1), leaving) == [0.0, 50.0, 200.0, math.inf]
    assert _slots_in(node, PodRequest(gpus=2), leaving) == [50.0, math.inf]
    assert _slots_in(node, PodRequest(gpu_milli=500), leaving) == [0.0]


def test_the_head_is_held_where_it_finishes_first() -> None:
    nodes = cluster()
    held = reserve(BIG, nodes, config=CONFIG, predictors=PREDICTORS, leaving=ends(LEFT))
    # fast-b fits it in 50 s (done at 50 + 500), slow in 10 s (done at 10 + 2000): fast-b.
    assert held == Reservation(pod="ml/big", gpu_model=FAST, nodes=frozenset({"fast-b"}), start_seconds=50.0)


def test_a_gang_is_held_on_as_many_nodes_as_it_has_members() -> None:
    nodes = cluster()
    held = reserve(BIG, nodes, members=2, config=CONFIG, predictors=PREDICTORS, leaving=ends(LEFT))
    assert held is not None
    assert (held.gpu_model, held.nodes, held.start_seconds) == (FAST, frozenset({"fast-a", "fast-b"}), 300.0)


def test_nothing_is_held_when_no_start_can_be_predicted() -> None:
    unknown = dict.fromkeys(LEFT)
    assert reserve(BIG, cluster(), config=CONFIG, predictors=PREDICTORS, leaving=ends(unknown)) is None


def test_without_a_jct_estimate_for_the_head_it_is_held_where_it_starts_first() -> None:
    anon = PodRequest(name="ml/anon", gpus=2)
    held = reserve(anon, cluster(), config=CONFIG, predictors=PREDICTORS, leaving=ends(LEFT))
    assert held is not None
    assert (held.nodes, held.start_seconds) == (frozenset({"slow"}), 10.0)


def test_a_held_node_takes_only_pods_that_finish_before_the_head_starts() -> None:
    nodes = cluster()
    held = Reservation(pod="ml/big", gpu_model=FAST, nodes=frozenset({"fast-b"}), start_seconds=600.0)
    short = PodRequest(name="ml/s", gpus=1, workload="resnet")  # 500 s on FAST: done before 600 s
    long = PodRequest(name="ml/l", gpus=1, workload="bert")  # 1000 s
    anon = PodRequest(name="ml/x", gpus=1)
    names = ["fast-b", "slow"]
    assert reserved_verdicts(short, names, nodes, held, predictors=PREDICTORS) == {}
    failed = reserved_verdicts(long, names, nodes, held, predictors=PREDICTORS)
    assert failed == {
        "fast-b": "held for ml/big, pending and predicted to start here in ~600 s; this pod would run ~1000 s"
    }
    assert set(reserved_verdicts(anon, names, nodes, held, predictors=PREDICTORS)) == {"fast-b"}


def test_the_filter_gives_the_held_reason_after_the_resource_reasons() -> None:
    nodes = cluster()
    held = Reservation(pod="ml/big", gpu_model=FAST, nodes=frozenset({"fast-a", "fast-b"}), start_seconds=600.0)
    long = PodRequest(name="ml/l", gpus=1, workload="bert")
    passed, failed = filter_nodes(
        FilterRequest(
            long, ["fast-a", "fast-b", "slow"], nodes, ScoringConfig(wait_slack=None), now_seconds=NOW,
            predictors=PREDICTORS, queue=QueueRules(reservation=held),
        )
    )  # fmt: skip
    assert passed == ["slow"]
    assert failed["fast-a"] == "needs 1 free GPUs, has 0"
    assert failed["fast-b"].startswith("held for ml/big")


def test_fits_now_counts_room_for_every_member() -> None:
    nodes = cluster()
    one = PodRequest(gpus=1)
    assert fits_now(one, nodes, members=2, config=CONFIG)
    assert not fits_now(one, nodes, members=3, config=CONFIG)
    assert not fits_now(BIG, nodes, config=CONFIG)
    assert fits_now(one, nodes, config=CONFIG, usable=lambda name: name == "slow")
    assert not fits_now(one, nodes, config=CONFIG, usable=lambda name: name == "fast-a")


# --------------------------------------------------------------------------------------------------------------------
# head_reservation: which pending pod holds nodes


def pending(
    name: str, request: PodRequest, *, created: float, priority: int = 0, scheduler: str = "default-scheduler",
    placement: NodePlacement | None = None,
) -> PendingPod:  # fmt: skip
    return PendingPod(
        pod=name, request=request, scheduler=scheduler, priority=priority, created_seconds=created, placement=placement
    )


def head(
    queue: list[PendingPod],
    me: PodRequest,
    *,
    created: float = NOW,
    priority: int = 0,
    labels: dict[str, dict[str, str]] | None = None,
    config: ScoringConfig = CONFIG,
) -> Reservation | None:
    return head_reservation(
        me,
        (-priority, created, me.name),
        "default-scheduler",
        sorted(queue, key=PendingPod.queue_key),
        cluster(),
        labels=(labels or {}).get,
        config=config,
        predictors=PREDICTORS,
        leaving=ends(LEFT),
        now_seconds=NOW,
    )


ME = PodRequest(name="ml/me", gpus=1, workload="resnet")
BLOCKED = PodRequest(name="ml/big", gpus=2, workload="bert")


def test_the_first_blocked_pod_ahead_is_the_head() -> None:
    fits = PodRequest(name="ml/fits", gpus=1, workload="bert")
    queue = [pending("ml/fits", fits, created=NOW - 200), pending("ml/big", BLOCKED, created=NOW - 100)]
    held = head(queue, ME)
    assert held is not None
    assert held.pod == "ml/big"  # ml/fits is older but has room now: not blocked
    assert head(queue, ME, created=NOW - 150) is None  # ml/big is behind this pod: it holds nothing for it
    assert head(queue, ME, created=NOW - 150, priority=1) is None
    assert head([pending("ml/big", BLOCKED, created=NOW, priority=5)], ME, created=NOW - 999) is not None  # priority


def test_pods_of_another_scheduler_or_of_the_pods_own_gang_are_not_its_head() -> None:
    other = pending("ml/big", BLOCKED, created=NOW - 100, scheduler="volcano")
    assert head([other], ME) is None
    member = PodRequest(name="ml/g-1", gpus=2, workload="bert", gang="g")
    me = PodRequest(name="ml/g-0", gpus=1, workload="bert", gang="g")
    assert head([pending("ml/g-1", member, created=NOW - 100)], me) is None


def test_a_gang_head_is_blocked_until_all_its_pending_members_fit() -> None:
    one = PodRequest(name="ml/g-0", gpus=1, workload="bert", gang="g")
    members = [pending(f"ml/g-{i}", one, created=NOW - 100 + i) for i in range(3)]
    held = head(members, ME)  # room now for two one-GPU members (fast-b, slow), not three
    # FAST frees its third GPU at 100 s (fast-b now and at 50 s, fast-a at 100 s); SLOW has only two GPUs free ever.
    assert held == Reservation(pod="ml/g-0", gpu_model=FAST, nodes=frozenset({"fast-a", "fast-b"}), start_seconds=100.0)
    assert head(members[:2], ME) is None  # two members fit now: not blocked


def test_a_pinned_head_is_held_only_where_it_may_run() -> None:
    pinned = pending(
        "ml/big", BLOCKED, created=NOW - 100, placement=NodePlacement({"nvidia.com/gpu.product": "Tesla-T4"})
    )
    labels = {
        "fast-a": {"nvidia.com/gpu.product": "H100"},
        "fast-b": {"nvidia.com/gpu.product": "H100"},
        "slow": {"nvidia.com/gpu.product": "Tesla-T4"},
    }
    held = head([pinned], ME, labels=labels)
    assert held is not None
    assert held.nodes == frozenset({"slow"})


def test_holding_can_be_turned_off_and_the_scan_is_bounded() -> None:
    queue = [pending("ml/big", BLOCKED, created=NOW - 100)]
    assert head(queue, ME, config=ScoringConfig(hold_for_blocked=False)) is None
    fits = PodRequest(name="ml/fits", gpus=1, workload="bert")
    crowd = [pending(f"ml/fits-{i}", fits, created=NOW - 1000 + i) for i in range(HEAD_SCAN)]
    assert head([*crowd, *queue], ME) is None  # the blocked pod is past the first HEAD_SCAN pods ahead
    assert head([*crowd[1:], *queue], ME) is not None


def test_jct_leave_times_drive_the_service_reservation() -> None:
    started = NOW - 400.0  # resnet: 500 s on FAST, so 100 s left
    node = gpu_node(
        "fast", gpus=2, held={0: (resident("ml/r", started=started),), 1: (resident("ml/q", started=started),)}
    )
    held = reserve(BIG, {"fast": node}, config=CONFIG, predictors=PREDICTORS, leaving=jct_leave_times(PREDICTORS, NOW))
    assert held is not None
    assert held.start_seconds == pytest.approx(100.0)


def test_a_pod_does_not_wait_for_room_on_a_node_held_for_another() -> None:
    fast = gpu_node("fast", held={0: (resident("ml/a"),), 1: (resident("ml/b"),)})
    nodes = {n.name: n for n in (fast, gpu_node("slow", SLOW))}
    pod = PodRequest(name="ml/new", gpus=1, workload="bert")  # 1000 s on FAST, 4000 s on SLOW
    leaving = ends({"ml/a": 100.0, "ml/b": 5000.0})

    def filtered(reservation: Reservation | None) -> tuple[list[str], dict[str, str]]:
        return filter_nodes(
            FilterRequest(
                pod, ["slow"], nodes, CONFIG, now_seconds=NOW, predictors=PREDICTORS, leaving=leaving,
                queue=QueueRules(reservation=reservation),
            )
        )  # fmt: skip

    assert filtered(None)[0] == []  # waits for fast, which frees in 100 s
    held = Reservation(pod="ml/big", gpu_model=FAST, nodes=frozenset({"fast"}), start_seconds=100.0)
    assert filtered(held) == (["slow"], {})  # fast frees for ml/big, not for it


def test_a_blocked_pod_whose_start_cannot_be_predicted_holds_nothing_and_the_next_one_is_the_head() -> None:
    never = PodRequest(name="ml/never", gpus=3, workload="bert")  # no node has 3 GPUs: no start can be predicted
    queue = [pending("ml/never", never, created=NOW - 200), pending("ml/big", BLOCKED, created=NOW - 100)]
    held = head(queue, ME)
    assert held is not None
    assert held.pod == "ml/big"
    assert head(queue[:1], ME) is None
