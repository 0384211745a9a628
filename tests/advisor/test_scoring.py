"""Placement scoring as a scheduler engineer would check it (pure: no HTTP, no state)."""

from __future__ import annotations

import pytest

from advisor.placement.config import ScoringConfig
from advisor.placement.extender import extender_scores
from advisor.placement.filter import FilterRequest, filter_nodes
from advisor.placement.gpuset import best_gpu_set
from advisor.placement.scorer import Scorer, allocate, extender_priorities, score_candidates, score_nodes
from advisor.placement.scoring import unknown_score
from advisor.placement.types import PodRequest, Resident, ScoringInputError, Topology
from advisor.predictors import HEURISTIC, HeuristicInterference, HeuristicUsage, Predictors, SpecSpeed
from collector.snapshot import LINK_RANK, LinkLevel
from tests.advisor.factories import GIB, H100
from tests.advisor.factories import node_state as node

T4 = "Tesla T4"
CONFIG = ScoringConfig()


def two_socket(gpus: int = 8) -> Topology:
    half = gpus // 2
    return Topology(
        [
            [
                0 if a == b else LINK_RANK[LinkLevel.NVLINK if a // half == b // half else LinkLevel.NUMA]
                for b in range(gpus)
            ]
            for a in range(gpus)
        ]
    )


def busy(pod: str, sm: float = 0.6, bw: float = 0.4) -> tuple[Resident, ...]:
    return (Resident(pod=pod, sm_utilization_ratio=sm, memory_bandwidth_utilization_ratio=bw, memory_used_bytes=GIB),)


def whole(*indices: int) -> dict[int, int]:
    return dict.fromkeys(indices, 1000)


def by_node(scores: list) -> dict:  # type: ignore[type-arg]
    return {s.node: s for s in scores}


def test_four_gpu_pod_prefers_nvlinked_free_gpus_over_a_numa_spread() -> None:
    nvlinked = node("nvlinked", allocated=whole(4, 5, 6, 7), topology=two_socket())
    spread = node("spread", allocated=whole(0, 1, 4, 5), topology=two_socket())
    scores = by_node(score_nodes(PodRequest(gpus=4), [spread, nvlinked], config=CONFIG, now_seconds=1001))
    assert scores["nvlinked"].score > scores["spread"].score
    assert scores["nvlinked"].gpus == (0, 1, 2, 3)
    assert scores["nvlinked"].affinity == 1.0
    assert scores["spread"].affinity < 1.0
    assert "NUMA" in scores["spread"].reason
    assert "NVLINK" in scores["nvlinked"].reason


def test_four_gpu_pod_takes_one_whole_island_on_an_empty_two_socket_node() -> None:
    verdict = allocate(PodRequest(gpus=4), node("n", topology=two_socket()), config=CONFIG)
    assert verdict.gpus in {(0, 1, 2, 3), (4, 5, 6, 7)}


def test_one_gpu_pod_prefers_the_nearly_full_node_over_an_empty_one() -> None:
    empty = node("empty")
    nearly_full = node("nearly-full", allocated=whole(*range(7)))
    scores = by_node(score_nodes(PodRequest(gpus=1), [empty, nearly_full], config=CONFIG))
    assert scores["nearly-full"].score > scores["empty"].score
    assert scores["nearly-full"].packing > 0.5 > scores["empty"].packing
    assert scores["nearly-full"].gpus == (7,)


def test_one_gpu_pod_fills_a_broken_island_rather_than_breaking_a_whole_one() -> None:
    # Island 0-3 has three GPUs taken; island 4-7 is whole. The pod must not break the whole island.
    verdict = allocate(PodRequest(gpus=1), node("n", allocated=whole(0, 1, 2), topology=two_socket()), config=CONFIG)
    assert verdict.gpus == (3,)


def test_one_gpu_pod_prefers_the_node_it_fragments_least_not_merely_the_fullest() -> None:
    # Best-fit would pick "pair" (fewest free GPUs: an NVLinked pair) and break the pair. On "lone-plus-pair" the pod
    # fills the lone GPU that no multi-GPU job could use, keeping both pairs whole.
    pair = node("pair", allocated=whole(2, 3, 4, 5, 6, 7), topology=two_socket())
    lone_plus_pair = node("lone-plus-pair", allocated=whole(1, 2, 3, 6, 7), topology=two_socket())
    scores = by_node(score_nodes(PodRequest(gpus=1), [pair, lone_plus_pair], config=CONFIG))
    assert scores["lone-plus-pair"].packing > scores["pair"].packing
    assert scores["lone-plus-pair"].score > scores["pair"].score
    assert scores["lone-plus-pair"].gpus == (0,)


def test_gpu_share_avoids_the_gpu_whose_resident_saturates_sm_and_memory_bandwidth() -> None:
    state = node(
        "shared",
        allocated={0: 500, 1: 500, **whole(2, 3, 4, 5, 6, 7)},
        residents={0: busy("hog", sm=0.95, bw=0.9), 1: busy("light", sm=0.2, bw=0.1)},
    )
    verdict = allocate(PodRequest(gpu_milli=300), state, config=CONFIG)
    assert verdict.gpus == (1,)
    assert verdict.predicted_slowdown < 1.5


def test_gpu_share_scores_the_node_with_a_saturated_gpu_lower() -> None:
    hog = node("hog", allocated={0: 500, **whole(*range(1, 8))}, residents={0: busy("hog", sm=0.95, bw=0.9)})
    light = node("light", allocated={0: 500, **whole(*range(1, 8))}, residents={0: busy("light", sm=0.2, bw=0.1)})
    scores = by_node(score_nodes(PodRequest(gpu_milli=300), [hog, light], config=CONFIG))
    assert scores["light"].score > scores["hog"].score
    assert scores["hog"].predicted_slowdown > scores["light"].predicted_slowdown
    assert scores["hog"].interference < scores["light"].interference
    assert "residents slowed" in scores["hog"].reason


def test_gpu_share_joins_a_shared_gpu_before_breaking_a_free_one() -> None:
    state = node("n", allocated={0: 300}, residents={0: busy("small", sm=0.1, bw=0.05)})
    assert allocate(PodRequest(gpu_milli=300), state, config=CONFIG).gpus == (0,)


def test_a_stale_node_is_scored_as_unknown_with_that_reason() -> None:
    fresh = node("fresh", observed_at=1000.0)
    stale = node("stale", observed_at=900.0)
    scores = by_node(
        score_nodes(PodRequest(gpus=1), [fresh, stale], config=ScoringConfig(staleness_seconds=30), now_seconds=1010)
    )
    assert scores["fresh"].known
    assert not scores["stale"].known
    assert scores["stale"].score == ScoringConfig().unknown_node_score
    assert "stale" in scores["stale"].reason
    assert "110s" in scores["stale"].reason


def test_nodes_without_state_are_scored_unknown_in_place() -> None:
    scores = score_candidates(PodRequest(gpus=1), ["a", "ghost", "b"], {"a": node("a"), "b": node("b")}, config=CONFIG)
    assert [s.node for s in scores] == ["a", "ghost", "b"]
    assert not scores[1].known
    assert "no state" in scores[1].reason


def test_a_node_without_enough_free_gpus_scores_zero_and_fails_the_filter() -> None:
    full = node("full", allocated=whole(*range(7)))
    [verdict] = score_nodes(PodRequest(gpus=2), [full], config=CONFIG)
    assert (verdict.score, verdict.feasible, verdict.extender_score) == (0.0, False, 0)
    assert verdict.reason == "needs 2 free GPUs, has 1"
    passed, failed = filter_nodes(
        FilterRequest(PodRequest(gpus=2), ["full", "empty", "ghost"], {"full": full, "empty": node("empty")}, CONFIG)
    )
    assert passed == ["empty", "ghost"]
    assert failed == {"full": "needs 2 free GPUs, has 1"}


def test_filter_is_strict_about_stale_and_unknown_nodes_when_configured() -> None:
    strict = ScoringConfig(strict_staleness=True, staleness_seconds=10)
    nodes = {"fresh": node("fresh", observed_at=1000.0), "stale": node("stale", observed_at=100.0)}
    passed, failed = filter_nodes(
        FilterRequest(PodRequest(gpus=1), ["fresh", "stale", "ghost"], nodes, strict, now_seconds=1005)
    )
    assert passed == ["fresh"]
    assert set(failed) == {"stale", "ghost"}


def test_unhealthy_gpus_are_never_chosen() -> None:
    verdict = allocate(PodRequest(gpus=2), node("n", unhealthy=(0, 1, 2, 3, 4, 5)), config=CONFIG)
    assert verdict.gpus == (6, 7)
    [dead] = score_nodes(PodRequest(gpus=1), [node("dead", unhealthy=tuple(range(8)))], config=CONFIG)
    assert not dead.feasible
    assert dead.reason == "no healthy GPU"


def test_memory_request_excludes_gpus_without_enough_free_memory() -> None:
    state = node("n", allocated={0: 200}, residents={0: (Resident("big", memory_used_bytes=78 * GIB),)})
    verdict = allocate(PodRequest(gpu_milli=200, gpu_memory_bytes=8 * GIB), state, config=CONFIG)
    assert verdict.gpus != (0,)


def test_gang_members_prefer_the_node_running_their_gang() -> None:
    pod = PodRequest(gpus=2, gang="job-a")
    home = node("home", allocated=whole(0, 1), gangs=frozenset({"job-a"}))
    away = node("away", allocated=whole(0, 1))
    scores = by_node(score_nodes(pod, [home, away], config=CONFIG))
    assert scores["home"].score > scores["away"].score
    assert scores["home"].affinity > scores["away"].affinity


def test_jct_component_prefers_the_faster_gpu_model_without_a_model() -> None:
    fast = node("h100", model=H100)
    slow = node("t4", model=T4)
    scores = by_node(score_nodes(PodRequest(gpus=1), [fast, slow], config=CONFIG))
    assert scores["h100"].jct == 1.0
    assert scores["t4"].jct < 0.2
    assert scores["t4"].predicted_jct_seconds is None
    assert "heuristic" in scores["t4"].reason


class TableJct:
    """A JCT predictor that knows one workload."""

    name = "jct v7"

    def jct_seconds(self, workload: str | None, gpu_model: str, gpu_count: int) -> float | None:
        if workload != "resnet50":
            return None
        return {H100: 1000.0, T4: 8000.0}.get(gpu_model, 4000.0) / gpu_count


def test_a_jct_predictor_gives_predicted_completion_times_including_the_slowdown() -> None:
    predictors = Predictors(
        speed=SpecSpeed(), interference=HeuristicInterference(), jct=TableJct(), usage=HeuristicUsage()
    )
    shared = node("shared", allocated={0: 500, **whole(*range(1, 8))}, residents={0: busy("hog", sm=0.9, bw=0.9)})
    scores = by_node(
        score_nodes(
            PodRequest(gpu_milli=500, workload="resnet50"),
            [shared, node("t4", model=T4)],
            config=CONFIG,
            predictors=predictors,
        )
    )
    slowdown = scores["shared"].predicted_slowdown
    assert slowdown > 1.0
    assert scores["shared"].predicted_jct_seconds == pytest.approx(1000.0 * slowdown)
    assert scores["t4"].predicted_jct_seconds == pytest.approx(8000.0)
    assert scores["t4"].reason.endswith("of the fastest candidate's speed (jct model: ~2.2 h)")  # 8,000 s
    assert predictors.names()["jct"] == "jct v7"
    assert Predictors.heuristic().names()["jct"] == HEURISTIC


def test_weights_change_the_ranking() -> None:
    # Packing alone prefers the nearly full T4 node; JCT alone prefers the empty H100 node.
    t4_nearly_full = node("t4", model=T4, allocated=whole(*range(7)))
    h100_empty = node("h100", model=H100)
    pod = PodRequest(gpus=1)
    packing_only = by_node(
        score_nodes(
            pod,
            [t4_nearly_full, h100_empty],
            config=ScoringConfig(weight_affinity=0, weight_interference=0, weight_jct=0),
        )
    )
    jct_only = by_node(
        score_nodes(
            pod,
            [t4_nearly_full, h100_empty],
            config=ScoringConfig(weight_packing=0, weight_affinity=0, weight_interference=0),
        )
    )
    assert packing_only["t4"].score > packing_only["h100"].score
    assert jct_only["h100"].score > jct_only["t4"].score


def test_scores_stay_within_bounds_and_extender_scores_are_integers() -> None:
    nodes = [node(f"n{i}", allocated=whole(*range(i))) for i in range(9)]
    for pod in (PodRequest(gpus=1), PodRequest(gpus=3), PodRequest(gpu_milli=250)):
        for s in score_nodes(pod, nodes, config=CONFIG):
            assert 0.0 <= s.score <= 100.0
            assert isinstance(s.extender_score, int)
            assert 0 <= s.extender_score <= 10
            for c in (s.packing, s.affinity, s.interference, s.jct):
                assert 0.0 <= c <= 1.0


def test_large_nodes_fall_back_to_a_greedy_gpu_set_search() -> None:
    topology = two_socket(16)
    chosen = best_gpu_set(topology, (1 << 16) - 1, 8, CONFIG.task_mix)
    assert chosen is not None
    assert chosen.positions in {tuple(range(8)), tuple(range(8, 16))}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gpus": -1}, "gpus"),
        ({"gpu_milli": 1001}, "gpu_milli"),
        ({"gpu_memory_bytes": -5}, "gpu_memory_bytes"),
        ({"gpus": 2, "gpu_milli": 500}, "gpu_milli"),
    ],
)
def test_bad_requests_name_the_field(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(ScoringInputError, match=field):
        PodRequest(**kwargs)  # type: ignore[arg-type]


def test_a_pod_without_gpu_needs_gets_neutral_scores() -> None:
    [s] = score_nodes(PodRequest(), [node("n")], config=CONFIG)
    assert s.score == 50.0
    assert "no GPU" in s.reason


def test_extender_scores_keep_the_ranking_on_the_integer_scale() -> None:
    nodes = [
        node("nearly-full", allocated=whole(*range(7))),
        node("seven-free", allocated=whole(0)),
        node("empty"),
        node("full", allocated=whole(*range(8))),
    ]
    scores = score_nodes(PodRequest(gpus=1), nodes, config=CONFIG)
    scores.append(unknown_score("ghost", "unknown", CONFIG))
    ints = dict(zip([s.node for s in scores], extender_scores(scores), strict=True))
    assert ints["nearly-full"] == 10
    assert 1 <= ints["empty"] < ints["nearly-full"]
    assert ints["full"] == 0
    assert ints["ghost"] == 5
    assert scores[0].extender_score == scores[1].extender_score  # rounding score / 10 alone would tie them
    assert ints["seven-free"] < ints["nearly-full"]


def test_extender_priorities_match_extender_scores_of_the_full_verdicts() -> None:
    nodes = {
        "nearly-full": node("nearly-full", allocated=whole(*range(7))),
        "t4": node("t4", model=T4),
        "numa": node("numa", allocated=whole(0, 1, 4, 5), topology=two_socket()),
        "full": node("full", allocated=whole(*range(8))),
        "stale": node("stale", observed_at=10.0),
        "shared": node("shared", allocated={0: 500}, residents={0: busy("hog", sm=0.9, bw=0.9)}),
    }
    names = [*nodes, "ghost"]
    for pod in (PodRequest(gpus=1), PodRequest(gpus=2), PodRequest(gpu_milli=400), PodRequest()):
        full = score_candidates(pod, names, nodes, config=CONFIG, now_seconds=1001)
        fast = extender_priorities(pod, names, nodes, config=CONFIG, now_seconds=1001)
        assert fast.scores == extender_scores(full), pod
        assert fast.unknown == sum(1 for s in full if not s.known)
        assert fast.infeasible == sum(1 for s in full if s.known and not s.feasible)


def test_gpu_share_keeps_room_for_the_workloads_half_gpu_shares_rather_than_best_fitting() -> None:
    # Workload: half of the pods are half-GPU shares, half are 1-GPU pods. GPU 0 has 600 milli free, GPU 1 800.
    # Best fit would put a 300-milli share on GPU 0 and leave 300 that no half share can use (Δfragmentation 0);
    # on GPU 1 it leaves 500, exactly a half share, and fragmentation drops by 0.5 × 300 (see test_fragmentation).
    config = ScoringConfig(task_mix=((1, 500, 0.5), (1, 1000, 0.5)), weight_interference=0)
    verdict = allocate(PodRequest(gpu_milli=300), node("n", gpus=2, allocated={0: 400, 1: 200}), config=config)
    assert verdict.gpus == (1,)
    best_fit = node("best-fit", gpus=2, allocated={0: 400, 1: 1000})  # only GPU 0 (600 free) can take it
    room = node("room", gpus=2, allocated={0: 200, 1: 1000})  # only GPU 0 (800 free)
    scores = by_node(score_nodes(PodRequest(gpu_milli=300), [best_fit, room], config=config))
    assert scores["room"].packing > scores["best-fit"].packing


def test_task_sizes_is_a_whole_gpu_shorthand_for_task_mix() -> None:
    assert ScoringConfig(task_sizes=((1, 0.5), (4, 0.5))).task_mix == ((1, 1000, 0.5), (4, 1000, 0.5))
    with pytest.raises(ScoringInputError, match=r"task_mix\[0\]: gpus"):
        ScoringConfig(task_mix=((0, 1000, 1.0),))


def test_a_smaller_extender_span_spreads_the_same_ranking_over_more_integers() -> None:
    nodes = [
        node("nearly-full", allocated=whole(*range(7))),
        node("half", allocated=whole(*range(4))),
        node("seven-free", allocated=whole(0)),
        node("empty"),
    ]
    scores = score_nodes(PodRequest(gpus=1), nodes, config=CONFIG)
    wide = extender_scores(scores)
    narrow = extender_scores(scores, span_points=10.0)
    order = sorted(range(len(scores)), key=lambda i: -scores[i].score)
    assert [wide[i] for i in order] == sorted(wide, reverse=True)
    assert [narrow[i] for i in order] == sorted(narrow, reverse=True)
    assert all(n <= w for n, w in zip(narrow, wide, strict=True))
    assert len(set(narrow)) > len(set(wide))  # 1 step per point instead of per 4: fewer ties
    fine = ScoringConfig(extender_span_points=10.0)
    named = {n.name: n for n in nodes}
    verdict = extender_priorities(PodRequest(gpus=1), list(named), named, config=fine)
    assert verdict.scores == extender_scores(score_nodes(PodRequest(gpus=1), nodes, config=fine), span_points=10.0)


@pytest.mark.parametrize("span", [0.0, -5.0, float("nan")])
def test_the_extender_span_must_be_positive(span: float) -> None:
    with pytest.raises(ScoringInputError, match="extender_span_points must be > 0"):
        ScoringConfig(extender_span_points=span)


@pytest.mark.parametrize(
    "pod",
    [
        PodRequest(gpus=1),
        PodRequest(gpus=4),
        PodRequest(gpus=9),  # fits nowhere
        PodRequest(gpu_milli=300, workload="w"),
        PodRequest(gpus=0),  # no GPU: the neutral answer
        PodRequest(gpus=1, cpu_milli=500, memory_mib=1024),
    ],
    ids=["1 GPU", "4 GPUs", "9 GPUs", "share", "no GPU", "CPU and memory"],
)
def test_brief_candidates_are_score_candidates_without_the_explanations(pod: PodRequest) -> None:
    """The plugin's `detail: brief` path scores without building each `NodeScore`: the same node, score, feasible,
    known and GPU model, in the same order, stale and unknown nodes included, and the reason wherever the brief
    answer writes one (a node the pod does not fit, an unknown one); cold and warm."""
    nodes = {
        "empty": node("empty"),
        "half": node("half", allocated=dict.fromkeys(range(4), 1000)),
        "full": node("full", allocated=dict.fromkeys(range(8), 1000)),
        "stale": node("stale", observed_at=900.0),
        "shared": node("shared", allocated={0: 500}),
    }
    names = ["half", "ghost", "empty", "stale", "full", "shared"]
    scorer = Scorer(ScoringConfig(staleness_seconds=30), clock=lambda: 1010.0)
    full = [
        (s.node, s.score, s.feasible, s.known, "" if s.feasible and s.known else s.reason, s.gpu_model)
        for s in scorer.score_candidates(pod, names, nodes)
    ]
    assert [tuple(b) for b in scorer.brief_candidates(pod, names, nodes)] == full
    assert [
        tuple(b)
        for b in Scorer(ScoringConfig(staleness_seconds=30), clock=lambda: 1010.0).brief_candidates(pod, names, nodes)
    ] == full
