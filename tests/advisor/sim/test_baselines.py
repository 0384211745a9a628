"""The FGD paper's policies and target workload as its authors run them, GPU-model constraints, the authors' order."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from advisor.placement.config import ScoringConfig
from advisor.sim.baselines import (
    AuthorsFgd,
    BestFit,
    DotProd,
    GpuClustering,
    GpuPacking,
    RandomFit,
    TypicalFragmentation,
    authors_node_rank,
    typical_pods,
)
from advisor.sim.loaders import load_trace
from advisor.sim.model import Cluster, Pod, SimNode
from advisor.sim.packing import AdvisorPackPolicy, PackState, authors_sequence, run_fragmentation
from advisor.sim.run import (
    fragmentation_policy,
    fragmentation_scoring_config,
    run_fragmentation_mode,
    with_model_task_mixes,
)
from advisor.sim.target_workload import popular_pods, scarcity_weight, task_mix_for_model, workload_of
from tests.advisor.sim.conftest import write


def _state(cluster: Cluster, pods: list[Pod]) -> PackState:
    return PackState(cluster, workload_of(pods))


def test_the_openb_loader_reads_the_acceptable_gpu_models(tmp_path: Path) -> None:
    path = write(
        tmp_path / "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "a,1000,1024,1,1000,V100M16|V100M32\nb,1000,1024,1,500,\nc,1000,1024,0,0,T4\nd,1000,1024,2,1000, T4 ",
    )
    pods = load_trace(path)
    assert [p.gpu_models for p in pods if isinstance(p, Pod)] == [("V100M16", "V100M32"), (), (), ("T4",)]


def test_a_pod_only_fits_nodes_of_a_gpu_model_it_accepts() -> None:
    cluster = Cluster((SimNode("a", "T4", 2), SimNode("b", "P100", 2), SimNode("c", "G2", 2)))
    state = _state(cluster, [Pod("w", 1, 1000)])
    assert state.feasible(Pod("any", 1, 1000)).tolist() == [True, True, True]
    assert state.feasible(Pod("t4", 1, 1000, gpu_models=("T4",))).tolist() == [True, False, False]
    assert state.feasible(Pod("two", 1, 500, gpu_models=("P100", "G2"))).tolist() == [False, True, True]
    state.place(1, (0, 1), Pod("x", 2, 1000))
    assert state.feasible(Pod("two", 1, 500, gpu_models=("P100", "G2"))).tolist() == [False, False, True]


def test_the_target_workload_is_the_specs_covering_95_percent_of_pods() -> None:
    pods = [Pod(f"a{i}", 1, 1000, 4000) for i in range(60)]
    pods += [Pod(f"b{i}", 1, 500, 2000) for i in range(30)]
    pods += [Pod(f"c{i}", 0, 0, 8000) for i in range(6)]
    pods += [Pod(f"d{i}", 8, 1000, 32000) for i in range(4)]
    typical = typical_pods(pods)
    assert typical.gpus.tolist() == [1, 1, 0]  # 60 + 30 + 6 = 96 % of the pods: the 8-GPU spec is left out
    assert typical.popularity.tolist() == pytest.approx([60 / 96, 30 / 96, 6 / 96])
    assert typical_pods(pods, coverage_ratio=1.0).gpus.tolist() == [1, 1, 0, 8]
    assert typical_pods(pods, with_cpu_pods=False).gpus.tolist() == [1, 1]  # 90 of the 94 GPU pods
    constrained = typical_pods([Pod("t", 1, 1000, gpu_models=("T4",)), Pod("u", 1, 1000)])
    assert sorted(constrained.gpu_models) == [(), ("T4",)]  # a GPU-model constraint makes its own spec


def test_the_packing_profile_keeps_room_for_the_requests_of_the_authors_target_workload() -> None:
    pods = [Pod(f"a{i}", 1, 1000, 4000) for i in range(60)]
    pods += [Pod(f"b{i}", 1, 500, 2000) for i in range(30)]
    pods += [Pod(f"c{i}", 0, 0, 8000) for i in range(6)]
    pods += [Pod(f"d{i}", 8, 1000, 32000) for i in range(4)]
    assert popular_pods(pods, 0.95) == pods[:96]  # the rare 8-GPU spec is not what packing keeps room for
    packing = fragmentation_scoring_config(pods).task_mix
    assert [(e[0], e[1]) for e in packing] == [(0, 0), (1, 500), (1, 1000)]
    assert [e[2] for e in packing] == pytest.approx([6 / 96, 30 / 96, 60 / 96])
    # the default profile keeps room for every request, as before
    assert (8, 1000) in [(e[0], e[1]) for e in fragmentation_scoring_config(pods, "default").task_mix]


def test_a_node_a_task_cannot_use_is_all_fragment_for_it() -> None:
    cluster = Cluster((SimNode("t4", "T4", 2, cpu_milli=32000), SimNode("p100", "P100", 2, cpu_milli=32000)))
    free = np.array([[1000.0, 600.0], [1000.0, 600.0]])
    cpu = np.array([32000.0, 32000.0])
    t4_only = typical_pods([Pod("t", 1, 1000, 1000, gpu_models=("T4",))])
    frag = TypicalFragmentation(t4_only, cluster, free, cpu)
    assert frag.frag.tolist() == [600.0, 1600.0]  # T4: the 600 share is too small; P100: the task cannot go there
    cpu_task = typical_pods([Pod("c", 0, 0, 1000)])
    assert TypicalFragmentation(cpu_task, cluster, free, cpu).frag.tolist() == [1600.0, 1600.0]
    ours = TypicalFragmentation(cpu_task, cluster, free, cpu, cpu_only_all_fragment=False)
    assert ours.frag.tolist() == [0.0, 0.0]  # the ablation: a CPU-only task that fits leaves no fragment
    hungry = typical_pods([Pod("g", 1, 500, 40000)])
    assert TypicalFragmentation(hungry, cluster, free, cpu).frag.tolist() == [1600.0, 1600.0]  # lacks CPU


def test_incremental_fragmentation_matches_a_fresh_count() -> None:
    rng = np.random.default_rng(3)
    pods = [Pod("a", 1, 1000, 4000), Pod("b", 1, 300, 2000), Pod("c", 2, 1000, 8000), Pod("d", 0, 0, 16000)]
    pods += [Pod("e", 1, 700, 1000, gpu_models=("T4",))]
    cluster = Cluster(tuple(SimNode(f"n{i}", "T4" if i % 2 else "V100", 4, cpu_milli=32000) for i in range(6)))
    state = _state(cluster, pods)
    fgd = AuthorsFgd(cluster, typical_pods(pods, coverage_ratio=1.0))
    for _ in range(20):
        pod = pods[int(rng.integers(len(pods)))]
        candidates = np.flatnonzero(state.feasible(pod))
        if len(candidates):
            state.place(*fgd.choose(pod, state, candidates), pod)
    typical = typical_pods(pods, coverage_ratio=1.0)
    fresh = TypicalFragmentation(typical, cluster, state.free, state.cpu_free)
    tracked = TypicalFragmentation(typical, cluster, np.full_like(state.free, 1000.0), np.full(6, 32000.0))
    for n in range(6):
        tracked.refresh(n, state.free[n], float(state.cpu_free[n]))
    np.testing.assert_allclose(tracked.frag, fresh.frag)
    nodes = np.arange(6)
    gpu = np.argmax(state.free, axis=1)
    after = fresh.after_share(nodes, state.free[nodes, gpu], 300.0, state.cpu_free - 2000)
    for n in range(6):
        row = state.free[n].copy()
        row[gpu[n]] -= 300
        one = TypicalFragmentation(typical, cluster, np.array([row] * 6), np.full(6, state.cpu_free[n] - 2000))
        assert after[n] == pytest.approx(one.frag[n])


def test_fgd_takes_the_first_node_by_name_among_equal_integer_scores() -> None:
    """Both nodes are idle: equal scores. The authors' scheduler takes the first by name ('a'), not the first
    listed; a tiny fragmentation difference does not break the tie since the score is an integer."""
    cluster = Cluster((SimNode("b", "T4", 2), SimNode("a", "T4", 2)))
    pods = [Pod("w", 1, 1000)]
    state = _state(cluster, pods)
    assert AuthorsFgd(cluster, typical_pods(pods)).choose(Pod("p", 1, 1000), state, np.array([0, 1])) == (1, (0,))


def test_the_authors_node_order_is_a_permutation_drawn_per_seed() -> None:
    """The authors' simulator prefixes each node's name with its index in a seeded random permutation: ties go in
    an order fixed for a run, the same for every policy of one seed, and not the trace's name order."""
    cluster = Cluster(tuple(SimNode(f"n{i:02d}", "T4", 2) for i in range(12)))
    rank = authors_node_rank(cluster, 4)
    assert sorted(rank.tolist()) == list(range(12))
    assert rank.tolist() == authors_node_rank(cluster, 4).tolist()
    orders = {tuple(authors_node_rank(cluster, seed).tolist()) for seed in range(5)}
    assert len(orders) == 5
    assert tuple(range(12)) not in orders
    reversed_names = Cluster(tuple(reversed(cluster.nodes)))  # by name, not by position in the file
    assert authors_node_rank(reversed_names, 4).tolist() == rank.tolist()[::-1]


def test_ties_go_in_the_authors_node_order_for_every_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle identical nodes tie: fgd, the baselines and the advisor's packing profile take the node whose authors'
    name comes first (the smallest permutation prefix), not node 'n00', and the mode hands that order to every run."""
    cluster = Cluster(tuple(SimNode(f"n{i:02d}", "T4", 2, cpu_milli=32000) for i in range(8)))
    pods = [Pod("w", 1, 1000, 4000)]
    seed = next(s for s in range(20) if authors_node_rank(cluster, s)[0] != 0)
    rank = authors_node_rank(cluster, seed)
    first = int(np.argmin(rank))
    state = PackState(cluster, workload_of(pods), rank)
    everywhere = np.arange(8)
    typical = typical_pods(pods)
    assert AuthorsFgd(cluster, typical).choose(pods[0], state, everywhere)[0] == first
    assert BestFit().choose(pods[0], state, everywhere)[0] == first
    advisor = fragmentation_policy("advisor", cluster, fragmentation_scoring_config(pods), seed, typical)
    assert advisor.choose(pods[0], state, everywhere)[0] == first
    assert advisor.choose(pods[0], PackState(cluster, workload_of(pods)), everywhere)[0] == 0  # name order
    given: list[list[int]] = []

    def recording(*args: object, node_rank: np.ndarray | None = None, **kwargs: object) -> object:
        assert node_rank is not None
        given.append(node_rank.tolist())
        return run_fragmentation(*args, node_rank=node_rank, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("advisor.sim.run.run_fragmentation", recording)
    run_fragmentation_mode(cluster, pods, ["fgd", "bestfit", "advisor", "spread"], seed)
    assert given == [rank.tolist()] * 4


def test_fgd_fills_the_gap_a_share_leaves() -> None:
    cluster = Cluster((SimNode("a", "T4", 2), SimNode("b", "T4", 2)))
    pods = [Pod("w", 1, 1000), Pod("s", 1, 500)]
    state = _state(cluster, pods)
    state.place(1, (1,), Pod("x", 1, 500))
    assert AuthorsFgd(cluster, typical_pods(pods)).choose(Pod("s", 1, 500), state, np.array([0, 1])) == (1, (1,))


def test_fgd_keeps_constrained_pods_room_on_the_model_they_need() -> None:
    """Most tasks need a T4; a 1-GPU pod that accepts any model goes to the P100 node, not the T4 one."""
    cluster = Cluster((SimNode("a-t4", "T4", 1), SimNode("b-p100", "P100", 1)))
    workload = [Pod(f"t{i}", 1, 1000, gpu_models=("T4",)) for i in range(9)] + [Pod("any", 1, 1000)]
    state = _state(cluster, workload)
    fgd = AuthorsFgd(cluster, typical_pods(workload))
    assert fgd.choose(Pod("any", 1, 1000), state, np.array([0, 1]))[0] == 1


def test_the_baselines_choose_as_the_paper_describes() -> None:
    cluster = Cluster(
        (
            SimNode("a", "V100", 4, cpu_milli=64000),
            SimNode("b", "V100", 4, cpu_milli=64000),
            SimNode("c", "V100", 4, cpu_milli=64000),
        )
    )
    state = _state(cluster, [Pod("w", 1, 1000)])
    state.place(1, (0,), Pod("x", 1, 600, 8000))  # b: one GPU 400 free
    state.place(2, (0, 1, 2), Pod("y", 3, 1000, 8000))  # c: one GPU left
    everywhere = np.array([0, 1, 2])
    share = Pod("s", 1, 300, 1000)
    assert GpuPacking().choose(share, state, everywhere) == (1, (0,))  # an already shared GPU first
    assert GpuPacking().choose(Pod("one", 1, 1000), state, everywhere)[0] == 1  # a used node before an idle one
    assert BestFit().choose(Pod("one", 1, 1000), state, everywhere) == (2, (3,))  # the tightest node
    assert DotProd().choose(Pod("one", 1, 1000, 1000), state, everywhere)[0] == 2
    clustering = GpuClustering(3)
    first = clustering.choose(share, state, everywhere)
    state.place(*first, share)
    assert clustering.choose(share, state, everywhere)[0] == first[0]  # shares keep together
    assert clustering.choose(Pod("w2", 2, 1000), state, np.array([0, first[0]]))[0] == 0  # another kind elsewhere
    draws = {RandomFit(np.random.default_rng(s)).choose(share, state, everywhere)[0] for s in range(10)}
    assert len(draws) > 1


def test_the_authors_order_replays_every_pod_once_then_draws_up_to_the_target() -> None:
    pods = [Pod(f"p{i}", 1, 1000) for i in range(10)] + [Pod("c", 0, 0)]
    seq = authors_sequence(pods, capacity_gpus=10, seed=4, max_ratio=1.3)
    assert sorted(p.name for p in seq[:11]) == sorted(p.name for p in pods)
    assert sum(p.gpu_demand for p in seq) <= 13
    assert sum(p.gpu_demand for p in seq) >= 12
    assert seq == authors_sequence(pods, capacity_gpus=10, seed=4, max_ratio=1.3)
    trimmed = authors_sequence(pods, capacity_gpus=5, seed=4, max_ratio=1.3)  # the trace is beyond 1.3 × capacity
    assert sum(p.gpu_demand for p in trimmed) <= 6.5
    assert len(trimmed) < len(pods)


def test_fgd_allocates_more_than_random_on_a_share_heavy_run() -> None:
    rng = np.random.default_rng(0)
    kinds = [Pod("q", 1, 250, 2000), Pod("h", 1, 500, 4000), Pod("o", 1, 1000, 8000), Pod("t", 2, 1000, 16000)]
    pods = [kinds[int(i)] for i in rng.choice(4, size=120, p=[0.3, 0.3, 0.3, 0.1])]
    cluster = Cluster(tuple(SimNode(f"n{i:02d}", "T4", 4, cpu_milli=64000) for i in range(20)))
    seq = authors_sequence(pods, cluster.total_gpus, seed=1, max_ratio=1.3)
    typical = typical_pods(pods)
    fgd = run_fragmentation(cluster, pods, seq, AuthorsFgd(cluster, typical))
    random = run_fragmentation(cluster, pods, seq, RandomFit(np.random.default_rng(1)))
    assert fgd.gpu_allocation_ratio > random.gpu_allocation_ratio


def test_the_advisor_with_per_model_task_mixes_keeps_room_on_the_model_constrained_pods_need() -> None:
    """Most of the trace accepts only T4: an unconstrained pod goes to the equal P100 node once the advisor scores
    each model's nodes with that model's task mix; without it the two nodes tie and the first by name is taken."""
    cluster = Cluster((SimNode("a-t4", "T4", 2, 32000, 65536), SimNode("b-p100", "P100", 2, 32000, 65536)))
    trace = [Pod(f"t{i}", 1, 1000, 4000, 8192, gpu_models=("T4",)) for i in range(8)]
    trace += [Pod("any", 1, 1000, 4000, 8192)]
    config = fragmentation_scoring_config(trace)
    per_model = with_model_task_mixes(cluster, trace, config)
    assert per_model is not config
    assert per_model.model_task_mix is not None
    state = _state(cluster, trace)
    both = np.array([0, 1])

    def pick(scorer: ScoringConfig, seed: int) -> int:
        return AdvisorPackPolicy(cluster, scorer, rng=np.random.default_rng(seed)).choose(trace[-1], state, both)[0]

    assert {pick(per_model, s) for s in range(8)} == {1}
    assert {pick(config, s) for s in range(8)} == {0}


def test_the_advisor_keeps_a_scarce_gpu_model_for_the_pods_that_need_it() -> None:
    """Two pods need model A (4 GPUs in the cluster), four need model B (12 GPUs). Counted by pods alone, more
    requests cannot use A than B, so FGD's rule (a node a request cannot use is all fragment for it) sends a pod that
    may run anywhere to A; weighed by how much of the cluster each request may use, A's pods press twice as hard on
    their 4 GPUs as B's on their 12, and the pod goes to B."""
    cluster = Cluster(
        (
            SimNode("a", "A", 4, 32000, 65536),
            *(SimNode(f"b{i}", "B", 4, 32000, 65536) for i in range(3)),
        )
    )
    trace = [Pod(f"a{i}", 1, 1000, 4000, 8192, gpu_models=("A",)) for i in range(2)]
    trace += [Pod(f"b{i}", 1, 1000, 4000, 8192, gpu_models=("B",)) for i in range(4)]
    trace += [Pod("any", 1, 1000, 4000, 8192)]
    config = with_model_task_mixes(cluster, trace, fragmentation_scoring_config(trace))
    state = _state(cluster, trace)
    picked = {
        AdvisorPackPolicy(cluster, config, rng=np.random.default_rng(s)).choose(trace[-1], state, np.arange(4))[0]
        for s in range(8)
    }
    assert picked <= {1, 2, 3}
    counted = {m: task_mix_for_model(trace, m, {"A": 1.0, "B": 1.0}) for m in ("A", "B")}
    by_pods = replace(config, model_task_mix=counted)
    assert {
        AdvisorPackPolicy(cluster, by_pods, rng=np.random.default_rng(s)).choose(trace[-1], state, np.arange(4))[0]
        for s in range(8)
    } == {0}


def test_the_scarcity_weight_is_the_share_of_the_cluster_a_request_may_use() -> None:
    capacity = {"A": 4.0, "B": 12.0}
    assert scarcity_weight((), capacity) == 1.0
    assert scarcity_weight(("A",), capacity) == 4.0
    assert scarcity_weight(("B",), capacity) == pytest.approx(16 / 12)
    assert scarcity_weight(("A", "B", "B"), capacity) == 1.0
    assert scarcity_weight(("H100",), capacity) == 1.0


def test_the_packing_profile_fills_equal_nodes_one_after_another() -> None:
    """Four equal idle nodes: the packing profile's extender keeps its top integer for the first by name only, so
    every seed picks n0 and the next pod follows it there; with ties left to kube-scheduler any node is drawn."""
    cluster = Cluster(tuple(SimNode(f"n{i}", "T4", 4, 32000, 65536) for i in (3, 1, 0, 2)))
    trace = [Pod("p", 1, 1000, 4000, 8192), Pod("q", 1, 500, 2000, 4096)]
    config = fragmentation_scoring_config(trace)
    assert config.extender_first_of_equals
    everyone = np.arange(4)

    def picks(scorer: ScoringConfig) -> set[int]:
        return {
            AdvisorPackPolicy(cluster, scorer, rng=np.random.default_rng(s)).choose(
                trace[0], _state(cluster, trace), everyone
            )[0]
            for s in range(12)
        }

    assert picks(config) == {2}
    assert len(picks(replace(config, extender_first_of_equals=False))) > 1
    state = _state(cluster, trace)
    policy = AdvisorPackPolicy(cluster, config, rng=np.random.default_rng(0))
    node, gpus = policy.choose(trace[0], state, everyone)
    state.place(node, gpus, trace[0])
    assert policy.choose(trace[1], state, everyone)[0] == 2


@pytest.mark.parametrize("ties", ["first", "random"])
def test_fgd_with_kept_scores_chooses_what_scoring_every_node_afresh_chooses(ties: str) -> None:
    """FGD keeps each pod shape's scores per node until the node changes; on a run of shares, whole GPUs, CPU-only
    and model-constrained pods, nodes listed out of name order with different CPUs, every choice equals that of a
    policy built afresh for that pod (which scores every node of the state it sees)."""
    rng = np.random.default_rng(5)
    kinds = [
        Pod("q", 1, 250, 2000),
        Pod("h", 1, 500, 4000),
        Pod("h2", 1, 500, 6000),
        Pod("o", 1, 1000, 8000),
        Pod("t", 2, 1000, 16000),
        Pod("c", 0, 0, 12000),
        Pod("m", 1, 700, 1000, gpu_models=("T4",)),
    ]
    pods = [kinds[int(i)] for i in rng.integers(len(kinds), size=160)]
    cluster = Cluster(
        tuple(
            SimNode(f"n{(7 * i) % 12:02d}", "T4" if i % 3 else "V100", 4, cpu_milli=32000 + 16000 * (i % 2))
            for i in range(12)
        )
    )
    typical = typical_pods(pods)
    state = _state(cluster, pods)
    draws = np.random.default_rng(1) if ties == "random" else None
    kept = AuthorsFgd(cluster, typical, rng=draws)
    placed = 0
    for pod in pods:
        candidates = np.flatnonzero(state.feasible(pod))
        if not len(candidates):
            continue
        fresh_draws = copy.deepcopy(draws)
        choice = kept.choose(pod, state, candidates)
        assert choice == AuthorsFgd(cluster, typical, rng=fresh_draws).choose(pod, state, candidates), pod
        state.place(*choice, pod)
        placed += 1
    assert placed > 60  # the cluster fills: later pods see nodes changed since their shape was last scored
