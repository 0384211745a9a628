"""The vectorised share evaluation (`advisor.placement.columnar`) gives exactly the scalar scorer's verdicts: the same
scores, components, GPU choices and explanations, bit for bit, on random nodes and pod shapes (shares of any size,
memory-only shares, whole and multi-GPU pods, gangs, GPU-model constraints, CPU/memory, NVLink topologies, unhealthy
GPUs, stale nodes); the simulator's figures depend on it."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from functools import partial

import numpy as np
import pytest

from advisor.placement.columnar import masks_fragmentation, whole_packing
from advisor.placement.config import ScoringConfig
from advisor.placement.fragmentation import TaskMix
from advisor.placement.gpuset import best_gpu_set, best_gpu_sets, whole_plan
from advisor.placement.scorer import COLUMNAR_MIN_NODES, MEMO_LIMIT, Scorer
from advisor.placement.scoring import RawVerdict
from advisor.placement.types import COLUMN_ROWS, GpuState, NodeScore, NodeState, PodRequest, Resident, Topology
from advisor.predictors import Predictors, ResidentLike, UsageProfile
from collector.snapshot import LinkLevel

GIB = 1 << 30
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB")
CPU_MIX: TaskMix = (
    (1, 250, 0.1, 2000.0, 8192.0),
    (1, 500, 0.3, 4000.0, 16384.0),
    (1, 1000, 0.3, 8000.0, 65536.0),
    (2, 1000, 0.2, 16000.0, 131072.0),
    (4, 1000, 0.1, 32000.0, 262144.0),
    (0, 0, 0.2, 4000.0, 8192.0),
)


def topology(rng: random.Random, gpus: int) -> Topology:
    kind = rng.randrange(4)
    if kind == 0:
        return Topology.uniform(gpus, LinkLevel.NVLINK)
    if kind == 1:
        half = gpus // 2
        links = [
            (a, b, LinkLevel.NVLINK if a // half == b // half else LinkLevel.NUMA)
            for a in range(gpus)
            for b in range(a + 1, gpus)
        ]
        return Topology.from_links(gpus, links)
    if kind == 2:
        return Topology.from_links(gpus, [(a, a + 1, LinkLevel.NVLINK) for a in range(0, gpus - 1, 2)])
    return Topology.uniform(gpus, LinkLevel.PCIE_HOSTBRIDGE)


def random_node(rng: random.Random, name: str, gpus: int, *, cpu: bool) -> NodeState:
    model = rng.choice(MODELS)
    states = []
    for i in range(gpus):
        kind = rng.random()
        residents: tuple[Resident, ...] = ()
        allocated = 0
        if kind < 0.35:
            pass  # free
        elif kind < 0.55:
            allocated = 1000
            residents = (Resident(f"w{i}", "bert", 1000, rng.random(), rng.random() * 0.8, 10 * GIB),)
        else:
            n = rng.randrange(1, 7)  # more than the columns hold (4): those GPUs are evaluated alone
            residents = tuple(
                Resident(f"s{i}-{j}", rng.choice(("bert", "gpt2", None)), 0, rng.random() * 0.6, rng.random() * 0.5)
                for j in range(n)
            )
            allocated = min(1000, rng.choice((50, 100, 250, 300, 500, 750, 900, 950)) * n // 2 + 50)
        states.append(
            GpuState(
                index=i if rng.random() > 0.1 else i + 10,
                model=model,
                healthy=rng.random() > 0.05,
                memory_total_bytes=rng.choice((80 * GIB, 40 * GIB, 0)),
                memory_used_bytes=rng.randrange(0, 60) * GIB,
                sm_utilization_ratio=rng.random(),
                memory_bandwidth_utilization_ratio=rng.random(),
                allocated_milli=allocated,
                residents=residents,
            )
        )
    cpu_free = rng.randrange(0, 64_000) if cpu and rng.random() > 0.3 else None
    memory_free = rng.randrange(0, 512 * 1024) if cpu and rng.random() > 0.3 else None
    return NodeState(
        name=name,
        gpus=tuple(states),
        topology=topology(rng, gpus),
        observed_at_seconds=1000.0 if rng.random() > 0.05 else 100.0,
        gangs=frozenset({"g1"}) if rng.random() < 0.2 else frozenset(),
        cpu_allocatable_milli=64_000 if cpu_free is not None else None,
        cpu_free_milli=cpu_free,
        memory_allocatable_mib=512 * 1024 if memory_free is not None else None,
        memory_free_mib=memory_free,
        # every sharing mode, without drawing from `rng` (the other draws stay as they were)
        sharing_mode=("", "time-slicing", "mps", "mig")[sum(map(ord, name)) % 4],
    )


def random_pod(rng: random.Random) -> PodRequest:
    kind = rng.random()
    common = {
        "workload": rng.choice(("bert", "gpt2", None)),
        "gang": "g1" if rng.random() < 0.2 else None,
        "cpu_milli": rng.choice((None, 500, 4000, 20_000)),
        "memory_mib": rng.choice((None, 1024, 65536)),
        "gpu_models": rng.choice(((), ("h100",), ("a100-80gb", "v100-32gb"))),
    }
    if kind < 0.6:
        memory = rng.choice((None, None, 5 * GIB, 30 * GIB))
        return PodRequest(gpu_milli=rng.randrange(1, 1000), gpu_memory_bytes=memory, **common)  # type: ignore[arg-type]
    if kind < 0.7:
        return PodRequest(gpu_memory_bytes=rng.randrange(1, 40) * GIB, **common)  # type: ignore[arg-type]
    return PodRequest(gpus=rng.choice((1, 2, 3, 4, 8)), **common)  # type: ignore[arg-type]


def fresh(config: ScoringConfig, predictors: Predictors | None = None, *, columnar: int = COLUMNAR_MIN_NODES) -> Scorer:
    """A scorer with cold caches at time 1010; shares through the columnar path from `columnar` nodes of a kind."""
    return Scorer(config, predictors, clock=lambda: 1010.0, columnar_min_nodes=columnar)


def verdicts(
    pod: PodRequest, nodes: list[NodeState], config: ScoringConfig, *, columnar: int = COLUMNAR_MIN_NODES
) -> tuple[list[NodeScore], list[int]]:
    scores = fresh(config, columnar=columnar).score_nodes(pod, nodes)
    return scores, fresh(config, columnar=columnar).extender_node_scores(pod, nodes)


def config_for(mix: str) -> ScoringConfig:
    if mix == "cpu-memory":
        return ScoringConfig(task_mix=CPU_MIX)
    if mix == "per-model":  # the H100 nodes scored with their own mix; best fit a tenth of packing
        h100_mix: TaskMix = ((1, 500, 0.4), (1, 1000, 0.3), (2, 1000, 0.3))
        return ScoringConfig(model_task_mix={MODELS[0]: h100_mix}, packing_best_fit_share=0.1)
    if mix == "stepped":  # the packing profile's gradient in a hundred steps, best fit only within a step
        return ScoringConfig(packing_gradient_steps=100, packing_best_fit_share=0.005)
    if mix == "cpu-balance":  # the packing profile's order with CPU and memory, CPU left balanced against GPUs left
        return ScoringConfig(
            task_mix=CPU_MIX,
            packing_gradient_steps=100,
            packing_best_fit_share=0.005,
            packing_cpu_balance=0.1,
            packing_gradient_residual=0.05,
        )
    return ScoringConfig()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mix", ["gpu-only", "cpu-memory", "per-model", "stepped", "cpu-balance"])
def test_vectorised_shares_match_the_scalar_scorer_exactly(seed: int, mix: str) -> None:
    rng = random.Random(seed)
    config = config_for(mix)
    nodes = [
        random_node(rng, f"n{i}", rng.choice((8, 8, 4)), cpu=mix in ("cpu-memory", "cpu-balance")) for i in range(60)
    ]
    pods = [random_pod(rng) for _ in range(25)]
    vectorised = [verdicts(pod, nodes, config) for pod in pods]
    scalar = [verdicts(pod, nodes, config, columnar=10**9) for pod in pods]  # every node through `evaluate_share`
    for pod, v, s in zip(pods, vectorised, scalar, strict=True):
        assert v == s, pod
    shares = [v for pod, v in zip(pods, vectorised, strict=True) if pod.is_share]
    assert shares
    # the test means something: shares were placed, on shared and on unshared GPUs, and some nodes refused
    placed = [score for scores, _ in shares for score in scores if score.feasible and score.known and score.gpus]
    assert any("unshared" in s.detail for s in placed)
    assert any("shares GPU" in s.detail for s in placed)
    assert any(not s.feasible for scores, _ in shares for s in scores)


def test_a_large_batch_of_shares_goes_through_the_vectorised_path() -> None:
    rng = random.Random(99)
    nodes = [random_node(rng, f"n{i}", 8, cpu=False) for i in range(40)]
    scorer = fresh(ScoringConfig())
    scorer.score_nodes(PodRequest(gpu_milli=333), nodes)
    assert scorer.columnar_verdicts > 30


@pytest.mark.parametrize("mix", ["gpu-only", "cpu-memory", "per-model", "stepped", "cpu-balance"])
def test_whole_gpu_packing_on_arrays_is_the_plans_packing_exactly(mix: str) -> None:
    """`whole_packing` (the prioritize verb's plans of node shapes it has not met) gives `gpuset.whole_plan`'s
    packing bit for bit: nodes of 8, 4 and 2 GPUs side by side in one array (zero past a node's GPUs), unhealthy
    and partly used GPUs, every NVLink layout, eligible GPUs all the free ones or fewer (a GPU-memory request)."""
    rng = random.Random(41)
    config = config_for(mix)
    nodes = [random_node(rng, f"n{i}", rng.choice((8, 4, 2)), cpu=False) for i in range(120)]
    columns = np.zeros((COLUMN_ROWS, len(nodes), 8))
    for i, node in enumerate(nodes):
        g = node.topology.gpu_count
        columns[:, i, :g] = np.frombuffer(node.columns, dtype=np.float64).reshape(COLUMN_ROWS, g)
    every: list[float] = []
    for k in (1, 2, 3, 4, 8):
        taken, expected, rows = [], [], []
        for i, node in enumerate(nodes):
            eligible = node.free_mask if rng.random() < 0.7 else node.free_mask & rng.getrandbits(8)
            plan = whole_plan(node.topology, node.free_milli, eligible, k, config)
            if plan is not None:
                taken.append(plan.mask)
                expected.append(plan.packing)
                rows.append(i)
        slot = np.array(rows, dtype=np.intp)
        got = whole_packing(
            columns,
            slot,
            np.array([nodes[i].topology.gpu_count for i in rows], dtype=np.intp),
            np.array([float(nodes[i].topology.largest_island) for i in rows]),
            np.array(taken, dtype=np.int64),
            config=config,
        )
        assert got.tolist() == expected, k
        every.extend(expected)
    assert len(every) > 150
    assert len({round(p, 6) for p in every}) > 20  # packings that differ: the case means something


@pytest.mark.parametrize("mix", ["gpu-only", "per-model"])
def test_gpu_sets_for_many_masks_at_once_are_the_sets_chosen_one_by_one(mix: str) -> None:
    """`best_gpu_sets` (the prioritize verb's GPU choice for node shapes it has not met) chooses what
    `best_gpu_set` does — the same GPUs, link ranks and fragmentation — for every eligible mask of nodes of 2, 4
    and 8 GPUs of every NVLink layout, and for nodes of 16 GPUs, where subsets too many to search go greedy."""
    rng = random.Random(43)
    config = config_for(mix).for_model(MODELS[0])
    for gpus in (2, 4, 8, 8, 8, 16):
        layout = topology(rng, gpus)
        masks = list(range(1 << gpus)) if gpus <= 8 else [rng.getrandbits(16) for _ in range(200)]
        on_arrays = partial(masks_fragmentation, layout, config=config)  # the tie-break's F_n(M), as vectors ask
        for k in range(1, gpus + 1) if gpus <= 8 else (1, 2, 8):
            one_by_one = [best_gpu_set(layout, m, k, config.task_mix) for m in masks]
            assert best_gpu_sets(layout, masks, k, config.task_mix) == one_by_one, (gpus, k)
            assert best_gpu_sets(layout, masks, k, config.task_mix, fragmentation=on_arrays) == one_by_one, (gpus, k)


@pytest.mark.parametrize("mix", ["gpu-only", "cpu-memory", "per-model", "stepped", "cpu-balance"])
def test_verdicts_from_a_warm_memo_are_the_verdicts_from_scratch(mix: str) -> None:
    """The memo keys on what the GPU choice depends on (not the pod's CPU/memory, and not its workload where no
    resident can interfere): pods that share a memo entry must get exactly what they would get from scratch."""
    rng = random.Random(7)
    config = config_for(mix)
    nodes = [random_node(rng, f"n{i}", 8, cpu=mix in ("cpu-memory", "cpu-balance")) for i in range(40)]
    base = [random_pod(rng) for _ in range(12)]
    # the same GPU requests again with other workloads and CPU/memory requests
    pods = base + [
        PodRequest(
            gpus=p.gpus,
            gpu_milli=p.gpu_milli,
            gpu_memory_bytes=p.gpu_memory_bytes,
            workload=rng.choice(("bert", "gpt2", "resnet", None)),
            gang=p.gang,
            cpu_milli=rng.choice((None, 100, 30_000)),
            memory_mib=rng.choice((None, 2048)),
            gpu_models=p.gpu_models,
        )
        for p in base
        for _ in range(2)
    ]
    scorer = fresh(config)
    warm = [scorer.score_nodes(pod, nodes) for pod in pods]
    assert warm == [verdicts(pod, nodes, config)[0] for pod in pods]


class WorkloadAwareInterference:
    """A stand-in for a trained interference model: its own answer per (GPU model, workload, residents)."""

    name = "test-model"

    def slowdowns(
        self,
        gpu_model: str,
        workload: str | None,
        usage: UsageProfile,
        residents: Sequence[ResidentLike],
        *,
        sharing: str = "",
    ) -> tuple[float, float]:
        pod = 1.0 + 0.3 * len(residents) + (0.2 if workload == "gpt2" else 0.0) + 0.1 * usage.sm_utilization_ratio
        worst = max(1.0 + r.sm_utilization_ratio + (0.5 if r.workload == workload else 0.0) for r in residents)
        return pod + (0.05 if "A100" in gpu_model else 0.0), worst


def test_any_interference_predictor_gives_the_scalar_verdicts() -> None:
    """Predictors other than the heuristic are asked per busy GPU by both paths: the same verdicts."""
    rng = random.Random(5)
    predictors = replace(Predictors.heuristic(), interference=WorkloadAwareInterference())
    config = ScoringConfig()
    nodes = [random_node(rng, f"n{i}", 8, cpu=False) for i in range(40)]
    pods = [PodRequest(gpu_milli=rng.randrange(1, 1000), workload=rng.choice(("bert", "gpt2"))) for _ in range(10)]

    def run(columnar: int) -> list[list[NodeScore]]:
        return [fresh(config, predictors, columnar=columnar).score_nodes(pod, nodes) for pod in pods]

    vectorised = run(COLUMNAR_MIN_NODES)
    assert vectorised == run(10**9)
    assert any(s.predicted_slowdown > 1.3 for scores in vectorised for s in scores if s.feasible and s.known)


def test_a_full_memo_forgets_only_its_oldest_shape() -> None:
    """Each new request shape on a full memo evicts the oldest one (no whole-memo clear on every node at once):
    the newest shapes are still answered from the memo, the oldest is computed again, to the same verdicts."""
    rng = random.Random(3)
    nodes = [random_node(rng, f"n{i}", 8, cpu=False) for i in range(12)]
    config = ScoringConfig()
    pods = [PodRequest(gpu_milli=100 + i) for i in range(MEMO_LIMIT + 1)]
    scorer = fresh(config)

    def evaluate(pod: PodRequest) -> list[object]:
        return list(scorer.evaluate(pod, nodes, 1010.0))

    first = [evaluate(pod) for pod in pods]
    memoised = [i for i, v in enumerate(first[0]) if isinstance(v, RawVerdict)]  # stale nodes: never
    assert len(memoised) > 6
    for i in (len(pods) - 1, 1):  # kept: the very objects memoised
        again = evaluate(pods[i])
        assert all(again[j] is first[i][j] for j in memoised)
    again = evaluate(pods[0])  # forgotten: computed afresh, the same verdicts
    assert all(again[j] is not first[0][j] for j in memoised)
    assert again == first[0]


def test_free_gpus_of_one_size_in_islands_of_different_fullness_each_get_their_own_packing() -> None:
    # GPU 0 (no residents) and GPU 4 (a host process, nothing allocated) are both whole and free, but GPU 0 is in the
    # fuller NVLink island: taking a share of it leaves no island with two full GPUs, taking one of GPU 4 does. The
    # same free share, a different packing: the vectorised path computes packing once per class of GPUs, and a
    # class is the free share and the island drop together (with the free share alone both would get one packing).
    links = [
        (a, b, LinkLevel.NVLINK if a // 4 == b // 4 else LinkLevel.NUMA) for a in range(8) for b in range(a + 1, 8)
    ]
    topology = Topology.from_links(8, links)
    nodes = []
    for n in range(12):
        host = Resident(f"host-{n}", None, 0, 0.05 + 0.02 * n, 0.1)
        allocated = (0, 0, 1000, 1000, 0, 1000, 1000, 1000)
        gpus = tuple(
            GpuState(
                index=i, model=MODELS[0], memory_total_bytes=80 * GIB, allocated_milli=a, residents=(host,) * (i == 4)
            )
            for i, a in enumerate(allocated)
        )
        mode = ("", "time-slicing")[n % 2]
        nodes.append(NodeState(f"n{n}", gpus, topology, observed_at_seconds=1000.0, sharing_mode=mode))
    config = ScoringConfig()
    for milli in (300, 700):
        pod = PodRequest(gpu_milli=milli)
        vectorised = verdicts(pod, nodes, config)
        assert vectorised == verdicts(pod, nodes, config, columnar=10**9)
        assert any(s.gpus == (0,) for s in vectorised[0])  # the GPU without residents wins somewhere
