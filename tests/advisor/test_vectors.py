"""The prioritize verb's score vectors (`advisor.placement.vectors`) give exactly the integers of the full verdicts
(`extender_scores(score_candidates(...))`) — cold, warm, after nodes send new snapshots or go stale, with unknown
and repeated names, CPU/memory shortfalls, GPU-model limits, other predictors and configurations — and compute only
the rows they lack."""

from __future__ import annotations

import random
import weakref
from collections.abc import Sequence
from dataclasses import replace

import pytest

from advisor.placement import vectors
from advisor.placement.config import ScoringConfig
from advisor.placement.extender import extender_scores, first_of_equals
from advisor.placement.scorer import Scorer, score_candidates
from advisor.placement.types import NodeState, NodeTable, PodRequest, Resident
from advisor.predictors import Predictors
from advisor.sharing import MPS, TIME_SLICING, UNKNOWN
from tests.advisor.test_columnar import CPU_MIX, GIB, MODELS, WorkloadAwareInterference, random_node, random_pod

NOW = 1010.0


def reference(
    pod: PodRequest,
    names: Sequence[str],
    nodes: dict[str, NodeState],
    config: ScoringConfig,
    *,
    predictors: Predictors | None = None,
    now: float = NOW,
) -> tuple[list[int], int, int]:
    """The integers from scratch (a fresh scorer) through the per-node path, and the scored / infeasible counts."""
    full = score_candidates(pod, names, nodes, config=config, predictors=predictors, now_seconds=now)
    scored = sum(1 for s in full if s.known and s.feasible)
    infeasible = sum(1 for s in full if s.known and not s.feasible)
    ints = extender_scores(full, span_points=config.extender_span_points)
    if config.extender_first_of_equals:
        ints = first_of_equals(ints, names, [s.known and s.feasible for s in full])
    return ints, scored, infeasible


def check(
    scorer: Scorer, pod: PodRequest, names: Sequence[str], nodes: dict[str, NodeState], *, now: float = NOW
) -> list[int]:
    """`scorer`'s integers (its caches warm from earlier calls) against the reference's."""
    scorer.clock = lambda: now
    got = scorer.extender_priorities(pod, names, nodes)
    ints, scored, infeasible = reference(pod, names, nodes, scorer.config, predictors=scorer.predictors, now=now)
    assert got.scores == ints, pod
    assert (got.scored, got.infeasible) == (scored, infeasible), pod
    assert got.unknown == len(names) - scored - infeasible
    return got.scores


def configs() -> dict[str, ScoringConfig]:
    h100_mix = ((1, 500, 0.4), (1, 1000, 0.3), (2, 1000, 0.3))
    return {
        "default": ScoringConfig(),
        "per-model": ScoringConfig(model_task_mix={MODELS[0]: h100_mix}, packing_best_fit_share=0.1),
        "first-of-equals": ScoringConfig(extender_first_of_equals=True, extender_span_points=10.0),
        "no-weights": ScoringConfig(weight_packing=0, weight_affinity=0, weight_interference=0, weight_jct=0),
        "stepped gradient (packing profile)": ScoringConfig(
            packing_gradient_steps=100,
            packing_gradient_residual=0.05,
            packing_best_fit_share=0.005,
            extender_first_of_equals=True,
            extender_span_points=0.001,
        ),
        "cpu-memory (per-node path)": ScoringConfig(task_mix=CPU_MIX),
    }


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("config_name", list(configs()))
def test_vectors_give_the_integers_of_the_full_verdicts_through_refreshes_and_staleness(
    seed: int, config_name: str
) -> None:
    rng = random.Random(seed)
    config = configs()[config_name]
    scorer = Scorer(config)
    nodes = {f"n{i}": random_node(rng, f"n{i}", rng.choice((8, 8, 4)), cpu=rng.random() < 0.5) for i in range(50)}
    names = [*nodes, "ghost", "n3"]  # a node the advisor does not know, and a name sent twice
    pods = [random_pod(rng) for _ in range(10)]
    pods += [replace(p, workload="other", cpu_milli=rng.choice((None, 100, 60_000))) for p in pods]  # same shapes
    pods += [PodRequest(gpus=rng.choice((1, 2, 4)), gpu_memory_bytes=rng.choice((10, 50)) * GIB) for _ in range(3)]
    covered = 0
    for round_ in range(3):
        for pod in pods:
            covered += vectors.covers(pod, config)
            check(scorer, pod, names, nodes)
        # some nodes send a new snapshot (a new state), one leaves, one arrives; then time passes
        for name in rng.sample(sorted(nodes), 8):
            nodes[name] = random_node(rng, name, nodes[name].topology.gpu_count, cpu=False)
        nodes.pop(rng.choice(sorted(nodes)))
        nodes[f"new{round_}"] = random_node(rng, f"new{round_}", 8, cpu=False)
        names = [*nodes, "ghost"]
    assert covered > 0 if config_name != "cpu-memory (per-node path)" else covered == 0
    for pod in pods[:5]:  # much later: every node stale
        check(scorer, pod, names, nodes, now=NOW + 3600)


@pytest.mark.parametrize("seed", range(3))
def test_a_node_table_whose_log_names_the_changes_gives_the_integers_of_the_full_verdicts(seed: int) -> None:
    # The cluster state's nodes (a `NodeTable`): the index re-reads only the nodes its log names — new snapshots,
    # a node that left, one that arrived, a name sent before the cluster knew it that now has a node.
    rng = random.Random(seed)
    scorer = Scorer(ScoringConfig())
    nodes = NodeTable((f"n{i}", random_node(rng, f"n{i}", rng.choice((8, 4)), cpu=False)) for i in range(40))
    names = [*nodes, "ghost", "n3"]
    pods = [random_pod(rng) for _ in range(8)] + [PodRequest(gpus=1, gpu_memory_bytes=50 * GIB)]
    for round_ in range(3):
        for pod in pods:
            check(scorer, pod, names, nodes)
        for name in rng.sample(sorted(nodes), 6):
            nodes.put(name, random_node(rng, name, nodes[name].topology.gpu_count, cpu=False))
        nodes.drop(rng.choice(sorted(nodes)))
        nodes.put(f"new{round_}", random_node(rng, f"new{round_}", 8, cpu=False))
        if round_ == 1:
            nodes.put("ghost", random_node(rng, "ghost", 8, cpu=False))
        names = [*nodes, "ghost", "gone"]


def test_the_index_reads_again_only_the_nodes_the_tables_log_names() -> None:
    rng = random.Random(6)
    pod = PodRequest(gpus=1, workload="bert")
    nodes = NodeTable((f"n{i}", random_node(rng, f"n{i}", 8, cpu=False)) for i in range(30))
    scorer = Scorer(ScoringConfig(), clock=lambda: NOW)
    first = check(scorer, pod, list(nodes), nodes)
    computed = scorer.vectors.computed_rows
    swapped = random_node(rng, "n7", 8, cpu=False)
    dict.__setitem__(nodes, "n7", swapped)  # replaced without the log: the index does not look
    assert scorer.extender_priorities(pod, list(nodes), nodes).scores == first
    assert scorer.vectors.computed_rows == computed
    nodes.put("n7", swapped)  # the log names it: read again, and only it
    check(scorer, pod, list(nodes), nodes)
    assert scorer.vectors.computed_rows == computed + 1
    another = NodeTable(nodes.items())  # another table (nodes expired): every candidate read again
    dict.__setitem__(another, "n0", random_node(rng, "n0", 8, cpu=False))
    check(scorer, pod, list(another), another)


def test_the_same_names_again_after_an_unknown_one_gets_a_node_score_it() -> None:
    # The last call's names and slots are reused for the same names; a name the cluster did not know that now has
    # a node takes a slot of its own, and the next call with those names scores it.
    rng = random.Random(9)
    pod = PodRequest(gpu_milli=300)
    nodes = NodeTable((f"n{i}", random_node(rng, f"n{i}", 8, cpu=False)) for i in range(12))
    names = [*nodes, "late"]
    scorer = Scorer(ScoringConfig())
    for _ in range(2):
        assert check(scorer, pod, list(names), nodes)[-1] == check(scorer, pod, list(names), nodes)[-1]
    nodes.put("late", random_node(rng, "late", 8, cpu=False))
    check(scorer, pod, list(names), nodes)
    check(scorer, pod, list(names), nodes)


def test_a_tables_log_is_bounded_and_answers_only_for_its_own_positions() -> None:
    rng = random.Random(2)
    table = NodeTable([("a", random_node(rng, "a", 8, cpu=False))])
    start = table.mark()
    table.put("b", random_node(rng, "b", 8, cpu=False))
    table.drop("a")
    assert table.changed_since(table.token, start) == (["b", "a"], start + 2)
    assert table.changed_since(NodeTable().token, start) is None
    state = table["b"]
    for _ in range(5000):
        table.put("b", state)
    assert table.changed_since(table.token, start) is None  # the log no longer reaches back
    recent = table.mark() - 3
    assert table.changed_since(table.token, recent) == (["b", "b", "b"], recent + 3)
    assert table.changed_since(table.token, table.mark() + 1) is None


def test_other_predictors_and_no_staleness_check_give_the_same_integers() -> None:
    rng = random.Random(11)
    predictors = replace(Predictors.heuristic(), interference=WorkloadAwareInterference())
    nodes = {f"n{i}": random_node(rng, f"n{i}", 8, cpu=False) for i in range(40)}
    scorer, without_clock = Scorer(ScoringConfig(), predictors), Scorer(ScoringConfig(), predictors)
    for _ in range(2):
        for gpus, milli in ((0, 300), (0, 700), (1, 0), (2, 0)):
            pod = PodRequest(gpus=gpus, gpu_milli=milli, workload=rng.choice(("bert", "gpt2")))
            check(scorer, pod, list(nodes), nodes)
            got = without_clock.extender_priorities(pod, list(nodes), nodes)
            full = score_candidates(pod, list(nodes), nodes, config=ScoringConfig(), predictors=predictors)
            assert got.scores == extender_scores(full)


@pytest.mark.parametrize("pod", [PodRequest(gpu_milli=250, workload="bert"), PodRequest(gpus=2, workload="bert")])
def test_a_warm_call_computes_nothing_and_a_new_snapshot_only_its_node(pod: PodRequest) -> None:
    rng = random.Random(4)
    nodes = {f"n{i}": random_node(rng, f"n{i}", 8, cpu=False) for i in range(30)}
    for node in nodes.values():
        object.__setattr__(node, "observed_at_seconds", 1000.0)
    scorer = Scorer(ScoringConfig(), clock=lambda: NOW)
    first = scorer.extender_priorities(pod, list(nodes), nodes).scores
    assert scorer.vectors.computed_rows == 30
    assert scorer.extender_priorities(pod, list(nodes), nodes).scores == first
    assert scorer.vectors.computed_rows == 30  # warm: a gather
    nodes["n7"] = random_node(rng, "n7", 8, cpu=False)
    object.__setattr__(nodes["n7"], "observed_at_seconds", 1000.0)
    check(scorer, pod, list(nodes), nodes)
    assert scorer.vectors.computed_rows == 31  # only the node with a new snapshot


def test_the_index_makes_room_for_the_whole_cluster_when_it_first_grows() -> None:
    """Growing the index copies every per-slot array: at 10,000 nodes tens of MB, a stall when they are full. The
    first call that needs more slots than the index holds makes room for the whole cluster; later calls about the
    other nodes grow nothing (and still give the per-node integers)."""
    rng = random.Random(39)
    nodes = {f"n{i}": random_node(rng, f"n{i}", 8, cpu=False) for i in range(400)}
    scorer = Scorer(ScoringConfig(), clock=lambda: NOW)
    names = list(nodes)
    before = scorer.vectors.capacity
    check(scorer, PodRequest(gpus=1, workload="bert"), names[:100], nodes)
    room = scorer.vectors.capacity
    assert before < 100 < len(nodes) < room
    for start in range(100, 400, 100):
        check(scorer, PodRequest(gpus=2, workload="bert"), names[start : start + 100], nodes)
    assert scorer.vectors.capacity == room


def test_gangs_and_pods_without_gpus_take_the_per_node_path() -> None:
    config = ScoringConfig()
    assert vectors.covers(PodRequest(gpus=1), config)
    assert vectors.covers(PodRequest(gpu_milli=100), config)
    assert not vectors.covers(PodRequest(gpus=1, gang="g"), config)
    assert not vectors.covers(PodRequest(cpu_milli=100), ScoringConfig(task_mix=CPU_MIX))
    assert not vectors.covers(PodRequest(gpus=1), ScoringConfig(task_mix=CPU_MIX))
    per_model_cpu = ScoringConfig(model_task_mix={MODELS[1]: CPU_MIX})
    assert not vectors.covers(PodRequest(gpus=1), per_model_cpu)


def test_shapes_kept_are_bounded_and_nodes_that_left_free_their_slots() -> None:
    rng = random.Random(8)
    kept = vectors.ScoreVectors()
    config = ScoringConfig()
    nodes = {f"n{i}": random_node(rng, f"n{i}", 8, cpu=False) for i in range(10)}
    for milli in range(100, 100 + vectors.MAX_TABLES + 10):
        kept.priorities(PodRequest(gpu_milli=milli), list(nodes), nodes, scorer=Scorer(config), now_seconds=None)
    assert len(kept._tables) == vectors.MAX_TABLES
    # a cluster whose nodes are all replaced by others, many times over: the index starts afresh
    for generation in range(4):
        nodes = {f"g{generation}-{i}": random_node(rng, f"g{generation}-{i}", 8, cpu=False) for i in range(600)}
        got = kept.priorities(PodRequest(gpus=1), list(nodes), nodes, scorer=Scorer(config), now_seconds=None)
        assert len(got.scores) == 600
    assert len(kept._slot_of) <= 2 * 600 + vectors._SPARE_SLOTS


def test_the_index_keeps_no_node_state_alive_and_tells_states_apart_by_serial() -> None:
    rng = random.Random(12)
    kept = vectors.ScoreVectors()
    nodes = {f"n{i}": random_node(rng, f"n{i}", 8, cpu=False) for i in range(12)}
    pod = PodRequest(gpu_milli=300)
    scorer = Scorer(ScoringConfig())
    kept.priorities(pod, list(nodes), nodes, scorer=scorer, now_seconds=None)
    gone = weakref.ref(nodes["n5"])
    slot = kept._slot_of["n5"]
    assert kept._serial[slot] == nodes["n5"].serial
    nodes["n5"] = random_node(rng, "n5", 8, cpu=False)  # a new snapshot; the old state has no other holder
    assert gone() is None
    assert nodes["n5"].serial > kept._serial[slot]  # serials are never reused: the old rows cannot match
    got = kept.priorities(pod, list(nodes), nodes, scorer=scorer, now_seconds=None)
    assert kept._serial[slot] == nodes["n5"].serial
    assert got.scores == extender_scores(
        score_candidates(pod, list(nodes), nodes, config=ScoringConfig(), now_seconds=None)
    )


def with_host_processes(rng: random.Random, node: NodeState) -> NodeState:
    """The node with an unallocated process (a host job, a pod the watch has not listed) on some of its free GPUs:
    whole GPUs chosen there are shared, so the workload and the predictor matter."""
    gpus = tuple(
        replace(g, residents=(Resident("host", rng.choice(("bert", None)), 0, rng.random(), rng.random() * 0.5),))
        if g.allocated_milli == 0 and rng.random() < 0.4
        else g
        for g in node.gpus
    )
    return NodeState(
        name=node.name,
        gpus=gpus,
        topology=node.topology,
        observed_at_seconds=node.observed_at_seconds,
        gangs=node.gangs,
    )


@pytest.mark.parametrize("predictors", [Predictors.heuristic(), None])
def test_whole_gpus_chosen_beside_unallocated_processes_give_the_same_integers(predictors: Predictors | None) -> None:
    rng = random.Random(21)
    chosen = predictors or replace(Predictors.heuristic(), interference=WorkloadAwareInterference())
    nodes = {f"n{i}": with_host_processes(rng, random_node(rng, f"n{i}", 8, cpu=False)) for i in range(40)}
    assert any(n.free_residents for n in nodes.values())
    scorer = Scorer(ScoringConfig(), chosen)
    for _ in range(2):  # cold, then warm
        for gpus in (1, 2, 4, 8):
            for workload in ("bert", "gpt2", None):
                pod = PodRequest(gpus=gpus, workload=workload, gpu_memory_bytes=rng.choice((None, 20 * GIB)))
                check(scorer, pod, list(nodes), nodes)


def test_whole_gpus_beside_residents_on_time_sliced_nodes_give_the_per_node_integers() -> None:
    """The interference with residents on the chosen whole GPUs depends on how the node shares them: the vectors ask
    the predictor with the node's sharing mode, as the per-node path does (they once asked without it)."""
    rng = random.Random(23)
    nodes = {
        f"n{i}": replace(with_host_processes(rng, random_node(rng, f"n{i}", 8, cpu=False)), sharing_mode=TIME_SLICING)
        for i in range(40)
    }
    assert any(n.free_residents for n in nodes.values())
    scorer = Scorer(ScoringConfig())
    for gpus in (1, 2, 4):
        check(scorer, PodRequest(gpus=gpus, workload="bert"), list(nodes), nodes)


def test_whole_gpus_beside_residents_on_nodes_of_mixed_sharing_modes_give_the_per_node_integers() -> None:
    """One call over time-sliced nodes and nodes whose kernels run at once (MPS, unknown): the residents' bandwidth
    is gathered for the second kind's (node, GPU) pairs alone, and every node still gets the per-node integers."""
    rng = random.Random(25)
    modes = (TIME_SLICING, MPS, UNKNOWN, TIME_SLICING)
    nodes = {
        f"n{i}": replace(with_host_processes(rng, random_node(rng, f"n{i}", 8, cpu=False)), sharing_mode=modes[i % 4])
        for i in range(48)
    }
    assert any(n.free_residents for n in nodes.values() if n.sharing_mode == MPS)
    assert any(n.free_residents for n in nodes.values() if n.sharing_mode == TIME_SLICING)
    scorer = Scorer(ScoringConfig())
    for gpus in (1, 2, 4):
        for workload in ("bert", "gpt2"):
            check(scorer, PodRequest(gpus=gpus, workload=workload), list(nodes), nodes)


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_a_new_workload_recomputes_only_the_nodes_whose_chosen_gpus_have_residents(gpus: int) -> None:
    """A whole-GPU plan (the GPUs chosen, packing, affinity) holds for any workload; only the interference with
    residents on the chosen GPUs depends on it. A new workload's call computes the rows of those nodes alone — not
    of every node with residents on some free GPU — and gives the per-node integers."""
    rng = random.Random(31)
    nodes = {f"n{i}": with_host_processes(rng, random_node(rng, f"n{i}", 8, cpu=False)) for i in range(60)}
    scorer = Scorer(ScoringConfig(), clock=lambda: NOW)
    check(scorer, PodRequest(gpus=gpus, workload="bert"), list(nodes), nodes)
    pod = PodRequest(gpus=gpus, workload="gpt2")
    full = score_candidates(pod, list(nodes), nodes, config=ScoringConfig(), now_seconds=NOW)
    sharing = sum(1 for s in full if s.feasible and any(g.residents for g in nodes[s.node].gpus if g.index in s.gpus))
    free_residents = sum(1 for s in full if s.feasible and nodes[s.node].free_residents)
    assert 0 < sharing < free_residents  # the case: some nodes have residents on free GPUs the plan leaves alone
    before = scorer.vectors.computed_rows
    check(scorer, pod, list(nodes), nodes)
    assert scorer.vectors.computed_rows - before == sharing


def test_gpu_memory_requests_below_between_and_above_a_nodes_gpu_sizes_give_the_per_node_integers() -> None:
    # Nodes whose GPUs have 40 GiB, 80 GiB or unknown memory (eligible for any request), mixed on one node or not;
    # requests at, below, between and above those sizes.
    rng = random.Random(33)
    nodes = {f"n{i}": random_node(rng, f"n{i}", rng.choice((8, 4, 2)), cpu=False) for i in range(60)}
    for i in range(10):  # every GPU of one size: the request is met by all of its GPUs or by none
        node = nodes[f"n{i}"]
        size = (40, 80)[i % 2] * GIB
        nodes[node.name] = replace(node, gpus=tuple(replace(g, memory_total_bytes=size) for g in node.gpus))
    scorer = Scorer(ScoringConfig(), clock=lambda: NOW)
    for gib in (1, 40, 41, 80, 81, 1 << 40):
        for gpus in (1, 2):
            check(scorer, PodRequest(gpus=gpus, gpu_memory_bytes=gib * GIB, workload="bert"), list(nodes), nodes)


@pytest.mark.parametrize("predictors", [Predictors.heuristic(), None])
def test_a_gpu_memory_request_reads_the_rows_of_the_pod_without_it_where_every_gpu_meets_it(
    predictors: Predictors | None,
) -> None:
    """Where every GPU of known memory has what a whole-GPU pod asks for, its eligible GPUs are the free ones: the
    rows are those of the same pod without the request, computed once for any such request. Only nodes whose GPUs
    fall short compute rows of the request's own (and the integers are the per-node ones, with a predictor that
    reads each node's residents too)."""
    rng = random.Random(37)
    nodes: dict[str, NodeState] = {}
    for i in range(40):
        node = with_host_processes(rng, random_node(rng, f"n{i}", 8, cpu=False))
        sizes = [40 * GIB if i % 4 == 0 else 80 * GIB] * 8
        if i == 1:
            sizes[3] = 0  # memory unknown: eligible for any request
        gpus = tuple(replace(g, memory_total_bytes=size) for g, size in zip(node.gpus, sizes, strict=True))
        nodes[node.name] = replace(node, gpus=gpus, observed_at_seconds=1000.0)
    small = sum(1 for i in range(40) if i % 4 == 0)
    chosen = predictors or replace(Predictors.heuristic(), interference=WorkloadAwareInterference())
    scorer = Scorer(ScoringConfig(), chosen, clock=lambda: NOW)
    check(scorer, PodRequest(gpus=2, workload="bert"), list(nodes), nodes)
    before = scorer.vectors.computed_rows
    for gib in (20, 30, 40):  # every GPU has it: nothing computed
        check(scorer, PodRequest(gpus=2, gpu_memory_bytes=gib * GIB, workload="bert"), list(nodes), nodes)
    assert scorer.vectors.computed_rows == before
    check(scorer, PodRequest(gpus=2, gpu_memory_bytes=60 * GIB, workload="bert"), list(nodes), nodes)
    assert scorer.vectors.computed_rows - before == small  # the 40 GiB nodes' rows alone (infeasible there)
    before = scorer.vectors.computed_rows
    check(scorer, PodRequest(gpus=2, gpu_memory_bytes=70 * GIB, workload="gpt2"), list(nodes), nodes)
    check(scorer, PodRequest(gpus=2, workload="gpt2"), list(nodes), nodes)  # the 80 GiB nodes' rows: already there
    sharing = scorer.vectors.computed_rows - before - small
    assert 0 < sharing < len(nodes) - small  # a new workload: the nodes whose chosen GPUs have residents


def test_nodes_with_more_gpus_than_a_mask_holds_give_the_per_node_integers_for_every_workload() -> None:
    # 64 GPUs: no int64 mask of them, so their rows come from the per-node verdicts, a new workload's call included
    rng = random.Random(35)
    nodes = {f"n{i}": with_host_processes(rng, random_node(rng, f"n{i}", 8, cpu=False)) for i in range(10)}
    nodes["wide"] = with_host_processes(rng, random_node(rng, "wide", vectors._MASK_BITS + 2, cpu=False))
    scorer = Scorer(ScoringConfig(), clock=lambda: NOW)
    for workload in ("bert", "gpt2", None):
        for gpus in (1, 2):
            before = scorer.vectors.computed_rows
            check(scorer, PodRequest(gpus=gpus, workload=workload), list(nodes), nodes)
            assert scorer.vectors.computed_rows > before  # the wide node's row, at least, for every new workload
