"""Fragmentation mode: FGD's definition on hand-checked nodes, and each policy's defining choice."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from advisor.placement.config import ScoringConfig
from advisor.placement.fragmentation import class_sums, expected_fragmentation
from advisor.sim.model import Cluster, Pod, SimNode
from advisor.sim.packing import (
    AdvisorPackPolicy,
    AllocatedPolicy,
    FgdPolicy,
    PackPolicy,
    PackState,
    RandomPolicy,
    inflated_sequence,
    run_fragmentation,
)
from advisor.sim.target_workload import UNUSABLE_CPU_MILLI, task_mix_of, workload_of


def _fragmentation(free: list[list[float]], cpu: list[float], pods: list[Pod]) -> list[float]:
    w = workload_of(pods)
    f = np.array(free, dtype=np.float64)
    return list(
        expected_fragmentation(
            class_sums(f, w),
            f.sum(axis=1),
            full=(f >= 1000).sum(axis=1).astype(np.float64),
            max_free=f.max(axis=1),
            cpu_free=np.array(cpu, dtype=np.float64),
            memory_free=np.full(len(free), np.inf),
            workload=w,
        )
    )


def test_fragmentation_follows_the_paper_definition() -> None:
    whole = Pod("w", 1, 1000, 4000)
    half = Pod("h", 1, 500, 4000)
    # Workload: half 1-GPU tasks, half 0.5-GPU shares, each needing 4 CPUs.
    frag = _fragmentation(
        [[1000, 1000], [1000, 300], [600, 300], [1000, 1000]],
        [8000, 8000, 8000, 2000],
        [whole, half],
    )
    assert frag[0] == pytest.approx(0.0)  # both tasks fit, no partial GPU
    assert frag[1] == pytest.approx(300.0)  # the 300 left is too small for either task
    # No whole GPU: the 1-GPU task cannot run → all 900 free is fragment for it; for the share only the 300.
    assert frag[2] == pytest.approx(0.5 * 900 + 0.5 * 300)
    assert frag[3] == pytest.approx(2000.0)  # too little CPU for either task: every free GPU is a fragment


def test_cache_deltas_match_recomputing_the_node() -> None:
    rng = np.random.default_rng(3)
    pods = [
        Pod(f"p{i}", int(k), int(m), float(c))
        for i, (k, m, c) in enumerate(
            [(1, 1000, 4000), (1, 300, 2000), (1, 700, 1000), (2, 1000, 8000), (0, 0, 16000), (4, 1000, 4000)]
        )
    ]
    nodes = tuple(SimNode(f"n{i}", "V100", 4, cpu_milli=32000) for i in range(6))
    state = PackState(Cluster(nodes), workload_of(pods))
    for _ in range(15):
        pod = pods[int(rng.integers(len(pods)))]
        candidates = np.flatnonzero(state.feasible(pod))
        if len(candidates):
            node, gpus = RandomPolicy(rng).choose(pod, state, candidates)
            state.place(node, gpus, pod)
    fresh = PackState(Cluster(nodes), workload_of(pods))
    fresh.free[:] = state.free
    fresh.cpu_free[:] = state.cpu_free
    for n in range(len(nodes)):
        fresh.cache.refresh(n, fresh.free[n], float(fresh.cpu_free[n]), float(fresh.memory_free[n]))
    np.testing.assert_allclose(state.cache.frag, fresh.cache.frag)
    share = pods[1]
    candidates = np.flatnonzero(state.feasible(share))
    rows, cols = np.nonzero(state.free[candidates] >= share.gpu_milli)
    nodes_idx = candidates[rows]
    delta = state.cache.delta_share(
        nodes_idx, state.free[nodes_idx, cols], 300.0, state.cpu_free[nodes_idx] - 2000, state.memory_free[nodes_idx]
    )
    for d, n, g in zip(delta, nodes_idx, cols, strict=True):
        row = state.free[n].copy()
        row[g] -= 300
        after = _fragmentation([list(row)], [state.cpu_free[n] - 2000], pods)[0]
        assert d == pytest.approx(after - state.cache.frag[n])


def _two_nodes(cpu_a: float, cpu_b: float) -> Cluster:
    return Cluster((SimNode("a", "T4", 2, cpu_milli=cpu_a), SimNode("b", "T4", 2, cpu_milli=cpu_b)))


def test_fgd_fills_the_gap_a_share_leaves() -> None:
    """Workload of whole 1-GPU tasks: a 0.5 share belongs on the GPU that is already half used."""
    cluster = Cluster((SimNode("a", "T4", 2), SimNode("b", "T4", 2)))
    pods = [Pod("w", 1, 1000)]
    state = PackState(cluster, workload_of(pods))
    state.place(1, (1,), Pod("x", 1, 500))
    share = Pod("s", 1, 500)
    assert FgdPolicy().choose(share, state, np.array([0, 1])) == (1, (1,))


def test_fgd_keeps_cpu_for_the_gpus_where_binpack_does_not() -> None:
    """A CPU-only pod on node a would leave a's two GPUs without CPU for 1-GPU tasks: FGD goes to b."""
    cluster = _two_nodes(8000, 16000)
    workload = [Pod("gpu-task", 1, 1000, 4000), Pod("cpu-task", 0, 0, 4000)]
    state = PackState(cluster, workload_of(workload))
    state.place(0, (), Pod("cpu-used", 0, 0, 4000))
    cpu_pod = Pod("c", 0, 0, 4000)
    both = np.array([0, 1])
    assert FgdPolicy().choose(cpu_pod, state, both)[0] == 1
    assert AllocatedPolicy(most=True).choose(cpu_pod, state, both)[0] == 0


def test_spread_and_binpack_choose_opposite_nodes() -> None:
    cluster = Cluster((SimNode("a", "V100", 4), SimNode("b", "V100", 4)))
    state = PackState(cluster, workload_of([Pod("w", 1, 1000)]))
    state.place(0, (0, 1), Pod("x", 2, 1000))
    pod = Pod("p", 1, 1000)
    both = np.array([0, 1])
    assert AllocatedPolicy(most=False).choose(pod, state, both) == (1, (0,))
    assert AllocatedPolicy(most=True).choose(pod, state, both) == (0, (2,))
    state.place(1, (0,), Pod("y", 1, 300))
    share = Pod("s", 1, 200)
    assert AllocatedPolicy(most=True).choose(share, state, np.array([1])) == (1, (0,))  # fullest GPU that fits
    assert AllocatedPolicy(most=False).choose(share, state, np.array([1])) == (1, (1,))  # an untouched GPU


def test_advisor_packs_small_pods_so_a_whole_node_stays_free() -> None:
    """With the extender weighted well above kube's LeastAllocated, 1-GPU pods fill one node and an 8-GPU pod fits."""
    cluster = Cluster((SimNode("a", "A100", 8), SimNode("b", "A100", 8)))
    sequence = [Pod(f"s{i}", 1, 1000) for i in range(8)] + [Pod("big", 8, 1000)]
    config = ScoringConfig(task_mix=task_mix_of(sequence))
    spread = run_fragmentation(cluster, sequence, sequence, AllocatedPolicy(most=False))
    advisor = run_fragmentation(cluster, sequence, sequence, AdvisorPackPolicy(cluster, config, extender_weight=10.0))
    assert spread.failed_pods == 1
    assert advisor.failed_pods == 0
    assert advisor.allocation_ratio[-1] == pytest.approx(1.0)


def test_inflated_sequence_reaches_the_target_demand_and_is_seeded() -> None:
    pods = [Pod("a", 1, 1000), Pod("b", 0, 0), Pod("c", 1, 250)]
    seq = inflated_sequence(pods, 100, seed=7, max_ratio=1.3)
    assert sum(p.gpu_demand for p in seq) >= 130
    assert sum(p.gpu_demand for p in seq[:-1]) < 130
    assert seq == inflated_sequence(pods, 100, seed=7, max_ratio=1.3)


def test_run_records_the_curve_and_failures_at_full_demand() -> None:
    """4 GPUs, six 1-GPU pods: a curve point at x counts the pods whose cumulative demand is within x × capacity."""
    cluster = Cluster((SimNode("a", "V100", 4),))
    pods = [Pod("one", 1, 1000)]
    result = run_fragmentation(cluster, pods, pods * 6, AllocatedPolicy(most=True))
    assert result.gpu_allocation_ratio == pytest.approx(1.0)
    assert result.failed_pods == 0  # the fifth pod arrives beyond 100% of capacity
    curve = dict(zip(result.arrived_ratio, zip(result.allocation_ratio, result.failed_curve, strict=True), strict=True))
    assert curve[0.0] == (0.0, 0)
    assert curve[0.5] == (0.5, 0)
    assert curve[0.74] == (0.5, 0)
    assert curve[1.0] == (1.0, 0)
    assert curve[1.25] == (1.0, 1)
    assert curve[1.3] == (1.0, 1)


def test_advisor_with_cpu_keeps_a_pod_without_gpu_off_the_node_whose_gpus_it_would_strand() -> None:
    """Node a: 4 free GPUs and 20 CPUs; node b: no free GPU and 100 CPUs. The trace's 1-GPU pods need 16 CPUs, so a
    6-CPU pod without GPU on a would leave 14: a's 4 GPUs could no longer take one. kube's LeastAllocated prefers a
    (emptier on average); the advisor, seeing CPU and memory and scoring pods without GPU, puts it on b."""
    cluster = Cluster((SimNode("a", "A100", 4, 20000, 65536), SimNode("b", "A100", 4, 100000, 65536)))
    gpu_pod, cpu_pod = Pod("g", 1, 1000, 16000, 1024), Pod("c", 0, 0, 6000, 1024)
    trace = [gpu_pod, cpu_pod]
    state = PackState(cluster, workload_of(trace))
    state.place(1, (0, 1, 2, 3), Pod("x", 4, 1000, 0, 0))
    both = np.array([0, 1])
    assert AllocatedPolicy(most=False).choose(cpu_pod, state, both) == (0, ())
    config = ScoringConfig(task_mix=task_mix_of(trace))
    assert config.resources is not None
    assert AdvisorPackPolicy(cluster, config, extender_weight=2.0).choose(cpu_pod, state, both) == (1, ())
    blind = AdvisorPackPolicy(cluster, config, extender_weight=2.0, score_pods_without_gpu=False)
    assert blind.choose(cpu_pod, state, both) == (0, ())
    gpu_only = ScoringConfig(task_mix=task_mix_of(trace, with_resources=False))
    assert gpu_only.resources is None
    assert gpu_only.task_mix == ((1, 1000, 1.0),)
    assert AdvisorPackPolicy(cluster, gpu_only, extender_weight=2.0).choose(cpu_pod, state, both) == (0, ())


def test_the_trace_task_mix_gives_every_request_with_cpu_and_memory() -> None:
    pods = [
        Pod("a", 1, 500, 4000, 8192),
        Pod("b", 1, 500, 4000, 8192),
        Pod("c", 2, 1000, 16000, 65536),
        Pod("d", 0, 0, 1000, 2048),
    ]
    # The pod without GPU can use no GPU: its CPU request is one no node has, so every free GPU is fragment for it.
    assert task_mix_of(pods) == (
        (0, 0, 0.25, UNUSABLE_CPU_MILLI, 2048.0),
        (1, 500, 0.5, 4000.0, 8192.0),
        (2, 1000, 0.25, 16000.0, 65536.0),
    )
    assert task_mix_of(pods, without_gpu_all_fragment=False)[0] == (0, 0, 0.25, 1000.0, 2048.0)
    assert task_mix_of(pods, with_resources=False) == ((1, 500, 2 / 3), (2, 1000, 1 / 3))


def test_equal_nodes_are_chosen_among_at_random_like_kube_and_a_seed_fixes_the_draws() -> None:
    cluster = Cluster(tuple(SimNode(f"n{i}", "V100", 8) for i in range(4)))
    pods = [Pod("p", 1, 1000), Pod("q", 8, 1000)]
    config = ScoringConfig(task_mix=task_mix_of(pods))
    makers: dict[str, Callable[[np.random.Generator | None], PackPolicy]] = {
        "spread": lambda rng: AllocatedPolicy(most=False, rng=rng),
        "binpack": lambda rng: AllocatedPolicy(most=True, rng=rng),
        "fgd": FgdPolicy,
        "advisor": lambda rng: AdvisorPackPolicy(cluster, config, rng=rng),
    }

    def first_pick(policy: PackPolicy) -> int:
        return policy.choose(pods[0], PackState(cluster, workload_of(pods)), np.arange(4))[0]

    for name, make in makers.items():
        picks = {first_pick(make(np.random.default_rng(seed))) for seed in range(12)}
        assert len(picks) > 1, name  # four empty nodes tie: not always the first
        assert len({first_pick(make(np.random.default_rng(5))) for _ in range(3)}) == 1, name  # a seed fixes it
        assert first_pick(make(None)) == 0, name  # without a generator: the first of equal nodes
