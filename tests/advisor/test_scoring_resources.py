"""Node CPU and memory in the scorer's packing (FGD counts free GPUs as fragments for task types whose CPU or memory
no longer fits), and that without them the scorer gives exactly the scores it gave before they existed."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from advisor.placement.config import ScoringConfig
from advisor.placement.extender import extender_scores, first_of_equals
from advisor.placement.filter import FilterRequest, filter_nodes
from advisor.placement.fragmentation import TaskMix
from advisor.placement.gpuset import packing_of
from advisor.placement.scorer import extender_node_scores, extender_priorities, score_candidates, score_nodes
from advisor.placement.types import GpuState, NodeState, PodRequest, Resident, ScoringInputError, Topology
from collector.snapshot import LINK_RANK, LinkLevel

H100 = "NVIDIA H100 80GB HBM3"
GPU_ONLY_MIX: TaskMix = ((1, 250, 0.1), (1, 500, 0.3), (1, 1000, 0.3), (2, 1000, 0.2), (4, 1000, 0.1))
# The same GPU requests with CPU (milli) and memory (MiB), plus pods without GPU.
CPU_MIX: TaskMix = (
    (1, 250, 0.1, 2000.0, 8192.0),
    (1, 500, 0.3, 4000.0, 16384.0),
    (1, 1000, 0.3, 8000.0, 65536.0),
    (2, 1000, 0.2, 16000.0, 131072.0),
    (4, 1000, 0.1, 32000.0, 262144.0),
    (0, 0, 0.2, 4000.0, 8192.0),
)


def two_socket(gpus: int) -> Topology:
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


def node(
    name: str,
    gpus: int,
    allocated: dict[int, int],
    topology: Topology,
    *,
    cpu_free: int | None = None,
    memory_free: int | None = None,
) -> NodeState:
    return NodeState(
        name=name,
        gpus=tuple(
            GpuState(
                index=i,
                model=H100,
                memory_total_bytes=80 << 30,
                allocated_milli=allocated.get(i, 0),
                residents=(
                    (Resident(pod=f"r{i}", gpu_milli=allocated[i], sm_utilization_ratio=allocated[i] / 1000),)
                    if 0 < allocated.get(i, 0) < 1000
                    else ()
                ),
            )
            for i in range(gpus)
        ),
        topology=topology,
        observed_at_seconds=1000.0,
        cpu_allocatable_milli=None if cpu_free is None else 128000,
        cpu_free_milli=cpu_free,
        memory_allocatable_mib=None if memory_free is None else 1048576,
        memory_free_mib=memory_free,
    )


def golden_nodes() -> list[NodeState]:
    return [
        node("a", 8, {}, two_socket(8)),
        node("b", 8, {0: 1000, 1: 1000, 2: 500, 5: 250}, two_socket(8)),
        node("c", 4, {0: 700, 3: 1000}, Topology.uniform(4, LinkLevel.PCIE_HOSTBRIDGE)),
        node("d", 2, {1: 400}, Topology.uniform(2, LinkLevel.PCIE_HOSTBRIDGE)),
        node("e", 8, dict.fromkeys(range(6), 1000), Topology.uniform(8, LinkLevel.NVLINK)),
    ]


# Scores of golden_nodes() under GPU_ONLY_MIX from the scorer before node CPU/memory existed (git c92fdcc),
# per request: (node, score, GPUs).
BEFORE = {
    PodRequest(gpus=1): [
        ("a", 85.625, (0,)),
        ("b", 87.8433337495788, (3,)),
        ("c", 87.8754162504212, (1,)),
        ("d", 89.98885033623318, (0,)),
        ("e", 88.8754162504212, (6,)),
    ],
    PodRequest(gpus=2): [
        ("a", 86.25, (0, 1)),
        ("b", 86.97207005375046, (4, 6)),
        ("c", 78.12167994624957, (1, 2)),
        ("d", 0.0, ()),
        ("e", 90.99667994624956, (6, 7)),
    ],
    PodRequest(gpus=4): [
        ("a", 87.5, (0, 1, 2, 3)),
        ("b", 81.81750320224904, (3, 4, 6, 7)),
        ("c", 0.0, ()),
        ("d", 0.0, ()),
        ("e", 0.0, ()),
    ],
    PodRequest(gpu_milli=300): [
        ("a", 83.11783500270548, (0,)),
        ("b", 85.02488136862642, (2,)),
        ("c", 86.46090571835671, (0,)),
        ("d", 86.15071896470856, (0,)),
        ("e", 86.39454467373608, (6,)),
    ],
    PodRequest(gpu_milli=600): [
        ("a", 83.5941913188267, (0,)),
        ("b", 86.2016479552808, (5,)),
        ("c", 85.61471647721329, (1,)),
        ("d", 86.89985630022092, (1,)),
        ("e", 86.86471647721329, (6,)),
    ],
}


@pytest.mark.parametrize("mix", [GPU_ONLY_MIX, CPU_MIX], ids=["gpu-only mix", "mix with cpu/memory"])
@pytest.mark.parametrize("pod", list(BEFORE), ids=str)
def test_without_node_cpu_or_memory_the_scores_are_exactly_those_from_before(mix: TaskMix, pod: PodRequest) -> None:
    config = ScoringConfig(task_mix=mix)
    with_request = PodRequest(gpus=pod.gpus, gpu_milli=pod.gpu_milli, cpu_milli=6000, memory_mib=4096)
    for request in (pod, with_request):
        got = [(s.node, s.score, s.gpus) for s in score_nodes(request, golden_nodes(), config=config)]
        assert got == BEFORE[pod]


def test_cpu_and_memory_are_optional_and_checked() -> None:
    bare = node("n", 2, {}, Topology.uniform(2, LinkLevel.PCIE_HOSTBRIDGE))
    assert (bare.cpu_free_milli, bare.memory_free_mib, bare.cpu_allocatable_milli) == (None, None, None)
    known = node("n", 2, {}, Topology.uniform(2, LinkLevel.PCIE_HOSTBRIDGE), cpu_free=64000, memory_free=4096)
    assert (known.cpu_free_milli, known.memory_free_mib) == (64000, 4096)
    gpus, topology = bare.gpus, bare.topology
    with pytest.raises(ScoringInputError, match="node n: cpu_free_milli 9000 exceeds cpu_allocatable_milli 8000"):
        NodeState("n", gpus, topology, cpu_allocatable_milli=8000, cpu_free_milli=9000)
    with pytest.raises(ScoringInputError, match="node n: memory_free_mib must be >= 0"):
        NodeState("n", gpus, topology, memory_free_mib=-1)
    with pytest.raises(ScoringInputError, match="cpu_milli must be >= 0"):
        PodRequest(gpus=1, cpu_milli=-1)


def test_a_pod_that_would_strand_free_gpus_by_cpu_goes_where_cpu_is_left() -> None:
    # Two nodes with 4 free GPUs each; a 1-GPU pod asking for 4 CPUs. Packing = 0.8 / (1 + e^ΔF in GPUs) + 0.2 × 1/4.
    # "tight" (10 CPUs free): before, the 2- and 4-GPU types (p 0.3) do not fit by CPU → F = 0.3 × 4000; after, 6 CPUs
    # are left and the 1-GPU type (p 0.3, 8 CPUs) does not fit either → F = 0.6 × 3000; ΔF = 0.6 GPU.
    # "roomy" (100 CPUs): F = 0 before; after, 3 free GPUs cannot run the 4-GPU type → F = 0.1 × 3000; ΔF = 0.3 GPU.
    config = ScoringConfig(task_mix=CPU_MIX, weight_interference=0, weight_jct=0, weight_affinity=0)
    topology = Topology.uniform(4, LinkLevel.PCIE_HOSTBRIDGE)
    tight = node("tight", 4, {}, topology, cpu_free=10000, memory_free=1 << 20)
    roomy = node("roomy", 4, {}, topology, cpu_free=100000, memory_free=1 << 20)
    pod = PodRequest(gpus=1, cpu_milli=4000, memory_mib=8192)
    scores = {s.node: s for s in score_nodes(pod, [tight, roomy], config=config)}
    assert scores["tight"].packing == pytest.approx(0.8 / (1 + math.exp(0.6)) + 0.05)
    assert scores["roomy"].packing == pytest.approx(0.8 / (1 + math.exp(0.3)) + 0.05)
    # The same nodes with CPU unknown are scored on their GPUs alone: equal (ΔF = 0.1 × 3000 on both).
    blind = score_nodes(pod, [node("tight", 4, {}, topology), node("roomy", 4, {}, topology)], config=config)
    assert blind[0].packing == blind[1].packing == pytest.approx(scores["roomy"].packing)


def test_a_pod_whose_cpu_or_memory_does_not_fit_is_infeasible_there() -> None:
    config = ScoringConfig(task_mix=CPU_MIX)
    topology = Topology.uniform(2, LinkLevel.PCIE_HOSTBRIDGE)
    nodes = {
        "low-cpu": node("low-cpu", 2, {}, topology, cpu_free=2000, memory_free=1 << 20),
        "low-memory": node("low-memory", 2, {}, topology, cpu_free=64000, memory_free=1024),
        "ok": node("ok", 2, {}, topology, cpu_free=64000, memory_free=1 << 20),
        "unknown": node("unknown", 2, {}, topology),
    }
    pod = PodRequest(gpus=1, cpu_milli=4000, memory_mib=8192)
    scores = {s.node: s for s in score_nodes(pod, list(nodes.values()), config=config)}
    assert not scores["low-cpu"].feasible
    assert "needs 4000 milli-CPU, has 2000 free" in scores["low-cpu"].reason
    assert not scores["low-memory"].feasible
    assert "needs 8192 MiB of memory" in scores["low-memory"].reason
    assert scores["ok"].feasible
    assert scores["unknown"].feasible
    passed, failed = filter_nodes(FilterRequest(pod, list(nodes), nodes, config, now_seconds=1001))
    assert passed == ["ok", "unknown"]
    assert set(failed) == {"low-cpu", "low-memory"}


def test_a_pod_without_gpu_is_scored_by_the_gpus_its_cpu_would_strand() -> None:
    config = ScoringConfig(task_mix=CPU_MIX, weight_interference=0, weight_jct=0, weight_affinity=0)
    topology = Topology.uniform(4, LinkLevel.PCIE_HOSTBRIDGE)
    nodes = {
        # 10 CPUs and 4 free GPUs: taking 4 CPUs leaves 6, too few for the 1-GPU pods → strands GPUs
        "gpus-free": node("gpus-free", 4, {}, topology, cpu_free=10000, memory_free=1 << 20),
        # no free GPU: its CPU strands nothing
        "gpus-full": node("gpus-full", 4, dict.fromkeys(range(4), 1000), topology, cpu_free=10000, memory_free=1 << 20),
        "unknown": node("unknown", 4, {}, topology),
    }
    pod = PodRequest(cpu_milli=4000, memory_mib=4096)
    scores = {s.node: s for s in score_nodes(pod, list(nodes.values()), config=config)}
    assert scores["gpus-full"].score > scores["gpus-free"].score
    assert scores["gpus-full"].known
    assert scores["gpus-full"].gpus == ()
    assert not scores["unknown"].known
    assert scores["unknown"].score == 50.0
    names = list(nodes)
    fast = extender_priorities(pod, names, nodes, config=config)
    assert fast.scores == extender_scores(score_candidates(pod, names, nodes, config=config))
    assert fast.scores[1] == 10
    # Without CPU/memory in the task mix (or in the pod's request) a pod without GPU stays neutral everywhere.
    for plain_config, plain_pod in ((ScoringConfig(task_mix=GPU_ONLY_MIX), pod), (config, PodRequest())):
        neutral = score_nodes(plain_pod, list(nodes.values()), config=plain_config)
        assert {(s.score, s.known) for s in neutral} == {(50.0, False)}


@pytest.mark.parametrize("cpu_free", [None, 12000, 40000])
def test_extender_node_scores_are_the_integers_of_the_full_verdicts(cpu_free: int | None) -> None:
    config = ScoringConfig(task_mix=CPU_MIX)
    nodes = [
        node(n.name, len(n.gpus), {g.index: g.allocated_milli for g in n.gpus}, n.topology, cpu_free=cpu_free)
        for n in golden_nodes()
    ]
    pods = [*BEFORE, PodRequest(gpus=1, cpu_milli=8000, memory_mib=4096), PodRequest(cpu_milli=4000)]
    for pod in pods:
        full = extender_scores(score_nodes(pod, nodes, config=config))
        assert extender_node_scores(pod, nodes, config=config) == full, pod


def test_a_new_cpu_memory_request_reuses_the_gpu_verdict_but_is_still_refused_where_it_does_not_fit() -> None:
    """The memo keys on what the GPU choice depends on: pods that differ only in CPU/memory get the same verdicts
    where those do not move a node's fit index, and a node short of CPU refuses the pod whatever is memoised for its
    shape."""
    config = ScoringConfig(task_mix=CPU_MIX)
    roomy = node("roomy", 8, {0: 1000}, two_socket(8), cpu_free=64_000, memory_free=512 * 1024)
    tight = node("tight", 8, {0: 1000}, two_socket(8), cpu_free=3_500, memory_free=512 * 1024)
    plain = PodRequest(gpus=2)
    small = PodRequest(gpus=2, cpu_milli=1000, memory_mib=1024)
    other = PodRequest(gpus=2, cpu_milli=1001, memory_mib=1025)  # same fit index after it on both nodes
    big = PodRequest(gpus=2, cpu_milli=8000, memory_mib=1024)
    first = score_nodes(small, [roomy, tight], config=config)
    again = score_nodes(other, [roomy, tight], config=config)
    assert first == again
    assert all(s.feasible for s in first)
    assert score_nodes(plain, [roomy], config=config)[0].gpus == first[0].gpus
    refused = score_nodes(big, [roomy, tight], config=config)
    assert refused[0].feasible
    assert not refused[1].feasible
    assert refused[1].detail == "needs 8000 milli-CPU, has 3500 free"
    # and back: the smaller request fits the tight node again (the refusal was not memoised as its verdict)
    assert score_nodes(small, [roomy, tight], config=config) == first


def test_nodes_of_a_gpu_model_are_scored_with_that_models_task_mix() -> None:
    # Half the typical requests cannot use T4 (CPU 1e12: they fit no T4 node), so a T4 node's free GPUs are all
    # fragment for them: F = 0.5 × 4000 before a 1-GPU pod, 0.5 × 3000 after, ΔF = −0.5 GPU. The other node is scored
    # with the cluster-wide mix, where the 1-GPU request still fits: ΔF = 0. "Tesla-T4" is the T4 of the mix.
    base: TaskMix = ((1, 1000, 1.0, 1000.0, 1024.0),)
    on_t4: TaskMix = ((1, 1000, 0.5, 1000.0, 1024.0), (1, 1000, 0.5, 1e12, 1024.0))
    config = ScoringConfig(
        task_mix=base, model_task_mix={"T4": on_t4}, weight_interference=0, weight_jct=0, weight_affinity=0
    )
    topology = Topology.uniform(4, LinkLevel.PCIE_HOSTBRIDGE)
    h100 = node("h100", 4, {}, topology, cpu_free=64000, memory_free=1 << 20)
    t4 = node("t4", 4, {}, topology, cpu_free=64000, memory_free=1 << 20)
    t4 = replace(t4, gpus=tuple(replace(g, model="Tesla-T4") for g in t4.gpus))
    pod = PodRequest(gpus=1, cpu_milli=1000, memory_mib=1024)
    scores = {s.node: s for s in score_nodes(pod, [h100, t4], config=config)}
    assert scores["h100"].packing == pytest.approx(0.8 * 0.5 + 0.2 * 0.25)
    assert scores["t4"].packing == pytest.approx(0.8 / (1 + math.exp(-0.5)) + 0.2 * 0.25)
    assert config.for_model("NVIDIA H100 80GB HBM3") is config
    plain = ScoringConfig(task_mix=base, weight_interference=0, weight_jct=0, weight_affinity=0)
    assert [s.packing for s in score_nodes(pod, [h100, t4], config=plain)] == [pytest.approx(0.45)] * 2


def test_a_bad_model_task_mix_names_the_model() -> None:
    with pytest.raises(ScoringInputError, match=r"model_task_mix\[T4\]: task_mix\[0\]: milli"):
        ScoringConfig(model_task_mix={"T4": ((1, 5000, 1.0),)})


def test_first_of_equals_keeps_the_top_integer_for_one_node_by_name() -> None:
    # Three idle nodes the advisor rates equal, one it rates lower, one it does not know: with first_of_equals only
    # "a" keeps 10 (kube-scheduler then has no tie to draw); the rest of the top drops to 9, the others keep theirs.
    topology = Topology.uniform(4, LinkLevel.PCIE_HOSTBRIDGE)
    nodes = {n: node(n, 4, {}, topology) for n in ("c", "a", "b")}
    nodes["busy"] = node("busy", 4, {0: 1000, 1: 1000, 2: 1000}, topology)
    names = ["c", "a", "b", "busy", "ghost"]
    pod = PodRequest(gpus=2)
    plain = extender_priorities(pod, names, nodes, config=ScoringConfig(task_mix=GPU_ONLY_MIX)).scores
    assert plain[:3] == [10, 10, 10]
    config = ScoringConfig(task_mix=GPU_ONLY_MIX, extender_first_of_equals=True)
    scores = extender_priorities(pod, names, nodes, config=config).scores
    assert scores == [9, 10, 9, plain[3], plain[4]]
    assert first_of_equals([3, 7, 7, 7], ["d", "c", "b", "a"], [True, True, True, False]) == [3, 6, 7, 7]


def test_the_best_fit_share_of_packing_is_configurable() -> None:
    # One idle 4-GPU node, a 1-GPU pod, a mix of 1-GPU requests only: ΔF = 0, 3 of 4 GPUs left free.
    topology = Topology.uniform(4, LinkLevel.PCIE_HOSTBRIDGE)
    idle = node("idle", 4, {}, topology)
    pod = PodRequest(gpus=1)
    weights = {"weight_interference": 0.0, "weight_jct": 0.0, "weight_affinity": 0.0}
    for share in (0.2, 0.1, 0.0):
        config = ScoringConfig(task_mix=((1, 1000, 1.0),), packing_best_fit_share=share, **weights)
        (verdict,) = score_nodes(pod, [idle], config=config)
        assert verdict.packing == pytest.approx((1 - share) * 0.5 + share * 0.25)
    with pytest.raises(ScoringInputError, match="packing_best_fit_share"):
        ScoringConfig(packing_best_fit_share=1.5)


def test_a_stepped_gradient_ties_nearly_equal_fragmentation_changes_and_best_fit_orders_them() -> None:
    # Changes of -10 and -30 milli-GPU: sigmoids 0.5025 and 0.5075, one step of a hundred (0.50); a change of exactly
    # 0 stays in that step despite float noise, and +20 milli (0.495) falls one step below.
    emptier, fuller = (1000, 1000, 1000, 0), (1000, 0, 0, 0)
    stepped = ScoringConfig(packing_gradient_steps=100, packing_best_fit_share=0.0)
    continuous = ScoringConfig(packing_best_fit_share=0.0)
    assert packing_of(-10.0, emptier, stepped) == packing_of(-30.0, emptier, stepped) == 0.5
    assert packing_of(-10.0, emptier, continuous) < packing_of(-30.0, emptier, continuous)
    assert packing_of(1e-12, emptier, stepped) == 0.5
    assert packing_of(20.0, emptier, stepped) == 0.49
    # Best fit within a step: the fuller node wins a tie and never outweighs a step.
    profile = ScoringConfig(packing_gradient_steps=100, packing_best_fit_share=0.005)
    assert packing_of(-10.0, fuller, profile) > packing_of(-30.0, emptier, profile)
    assert packing_of(20.0, (0, 0, 0, 0), profile) < packing_of(-10.0, (1000,) * 4, profile)
    # A residual share of what the step floored off: within a step the smaller change counts a little again.
    residual = ScoringConfig(packing_gradient_steps=100, packing_best_fit_share=0.0, packing_gradient_residual=0.05)
    gain = packing_of(-30.0, emptier, residual) - packing_of(-10.0, emptier, residual)
    assert gain == pytest.approx(0.05 * 0.005, rel=1e-3)
    with pytest.raises(ScoringInputError, match="packing_gradient_steps"):
        ScoringConfig(packing_gradient_steps=-1)
    with pytest.raises(ScoringInputError, match="packing_gradient_residual"):
        ScoringConfig(packing_gradient_residual=2.0)


def test_cpu_balance_takes_cpu_left_unmatched_by_gpus_left_off_best_fit() -> None:
    # 8000 milli-CPU per GPU in the mix. A 1-GPU pod with 8000 milli-CPU on an idle 4-GPU node: F stays 0 (both
    # task types still fit), so the gradient is 0.5; 3 GPUs left need 24000 milli-CPU.
    mix: TaskMix = ((1, 1000, 0.5, 8000, None), (2, 1000, 0.5, 16000, None))
    topology = Topology.uniform(4, LinkLevel.PCIE_HOSTBRIDGE)
    pod = PodRequest(gpus=1, cpu_milli=8000)
    weights = {"weight_interference": 0.0, "weight_jct": 0.0, "weight_affinity": 0.0}
    balanced = ScoringConfig(
        task_mix=mix, packing_gradient_steps=100, packing_best_fit_share=0.005, packing_cpu_balance=0.1, **weights
    )
    assert balanced.cpu_per_gpu_milli == 8000
    # 40000 free: 32000 left, read at the mix's grain as 16000 (its largest request that fits); |16000 − 24000| over
    # the 32000 four GPUs would need = 0.25, × 0.1 taken off best fit's 1 − 3/4.
    (verdict,) = score_nodes(pod, [node("n", 4, {}, topology, cpu_free=40000)], config=balanced)
    assert verdict.packing == pytest.approx(0.995 * 0.5 + 0.005 * (0.25 - 0.1 * 0.25))
    # Unknown free CPU, or the balance off (the default): best fit alone.
    (unknown,) = score_nodes(pod, [node("u", 4, {}, topology)], config=balanced)
    off = replace(balanced, packing_cpu_balance=0.0)
    (plain,) = score_nodes(pod, [node("n", 4, {}, topology, cpu_free=40000)], config=off)
    assert unknown.packing == plain.packing == pytest.approx(0.995 * 0.5 + 0.005 * 0.25)
    # Per-model views keep the whole workload's CPU per GPU (their unusable requests say nothing about it).
    per_model = replace(balanced, model_task_mix={H100: ((1, 1000, 1.0, 1e12, None),)})
    assert per_model.for_model(H100).cpu_per_gpu_milli == 8000
    with pytest.raises(ScoringInputError, match="packing_cpu_balance"):
        ScoringConfig(packing_cpu_balance=-0.1)
