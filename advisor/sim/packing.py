"""Fragmentation mode: pods arrive in random order (sampled with replacement, ATC'23 "workload inflation") and never
leave; how much of the cluster's GPU capacity does each policy manage to allocate before pods start failing?

The cluster is a (nodes × GPUs) array of free milli-GPU plus free CPU and memory per node. A policy sees the pod and
the state and names a node and the GPUs to use there; the engine checks and applies it. Policies:

* `random` — any node that fits, any GPU that fits;
* `spread` — Kubernetes' default `NodeResourcesLeastAllocated`: the node with the largest mean free ratio of GPU,
  CPU and memory after placement; a GPU share goes to the least-used GPU;
* `binpack` — `NodeResourcesMostAllocated`: the node with the largest mean used ratio; a share goes to the fullest GPU
  it fits (best fit);
* `fgd` — Fragmentation Gradient Descent: the (node, GPU) that increases the expected fragmentation least;
* `advisor` — the service's own `advisor.placement.scorer.Scorer` (see `advisor.sim.adapter`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from advisor.placement.config import ScoringConfig
from advisor.placement.fragmentation import (
    DEFAULT_TASK_MIX,
    FloatArray,
    IntArray,
    MixResources,
    NodeCache,
    TaskMix,
    Workload,
)
from advisor.placement.scorer import Scorer
from advisor.placement.types import NodeState, PodRequest
from advisor.predictors import Predictors
from advisor.sim.adapter import StateInterner, share_residents
from advisor.sim.model import GPU_MILLI, Cluster, Pod, best_index
from advisor.sim.target_workload import workload_of

BoolArray = NDArray[np.bool_]
CURVE_STEP_RATIO = 0.01
MAX_ARRIVED_RATIO = 1.3
FRAGMENTATION_EXTENDER_WEIGHT = 2.0
"""The extender's weight for fragmentation mode (an integer, as kube-scheduler's configuration needs): chosen with
`FRAGMENTATION_SPAN_POINTS` and the packing-only weights on openb seeds 1, 10 and 11 (validation);
docs/evaluation.md reports the other seeds with it."""
FRAGMENTATION_SPAN_POINTS = 0.001
"""`ScoringConfig.extender_span_points` of the packing profile: so small that only the nodes whose score equals the
best keep the top integer (one step per 0.0001 points), and the profile's score is a strict order: the gradient's step
(`PACKING_GRADIENT_STEPS`), then best fit (`PACKING_BEST_FIT_SHARE`), then the first by name
(`extender_first_of_equals`). It was 20 (one step per 2 points) before the gradient was stepped."""
PACKING_GRADIENT_STEPS = 100
"""`ScoringConfig.packing_gradient_steps` of the packing profile: the fragmentation gradient floored to a hundredth of
its sigmoid, as the FGD authors' integer score floors it, so that nodes whose fragmentation changes nearly equally tie
and fill one after another (chosen against 30 and 50 and a continuous gradient on openb's trace suite, seeds 4–9;
docs/evaluation.md)."""
PACKING_BEST_FIT_SHARE = 0.005
"""`ScoringConfig.packing_best_fit_share` of the packing profile: below one gradient step ((1 − 0.005) / 100), so best
fit (less free GPU left on the node) only orders the nodes within one step, before their names; chosen with
`PACKING_GRADIENT_STEPS` on openb's trace suite, seeds 4–9 (docs/evaluation.md)."""
PACKING_CPU_BALANCE = 0.1
"""`ScoringConfig.packing_cpu_balance` of the packing profile: of two equally full nodes, best fit prefers the one
whose CPU left matches what its GPUs left need (chosen among 0, 0.01, 0.1, 0.3 and 1 on openb's default and gpushare40
traces, seeds 4–6, and checked on the whole suite, seeds 4–9; docs/evaluation.md)."""
PACKING_GRADIENT_RESIDUAL = 0.05
"""`ScoringConfig.packing_gradient_residual` of the packing profile: a twentieth of what the gradient's steps floor off
is added back beside best fit, so that within a step a smaller fragmentation change still counts a little (chosen
among 0, 0.00005, 0.0002, 0.0005, 0.002, 0.005 and 0.05 on openb's default and gpushare40 traces, seeds 4–6, then
0.0005 and 0.05 against 0 on the whole suite, seeds 4–9; docs/evaluation.md)."""
PACKING_TARGET_COVERAGE_RATIO = 0.95
"""The packing profile's task mix in fragmentation mode: the trace's most popular requests covering 95 % of its pods
(`advisor.sim.target_workload.popular_pods`), the FGD authors' target workload, rather than every request. Chosen
against every request (1) and 0.98 on openb's five traces, seeds 4–9, and on generated gpushare/multigpu variants
(bench/openb_variants.py), seeds 4–6, then checked on 4–9 (docs/evaluation.md): with every request the profile lost
to FGD where shares are 60–80 % of the demand (more 8-GPU pods failed)."""
SIM_MEMO_LIMIT = 1024
"""`Scorer`'s memo_limit in the simulator: a node state is shared by every node in it and lives until they all change,
so it meets many of the trace's request shapes (its GPU shapes × the fit indices after the pod), more than the
service's 16; with 16, evicted verdicts were recomputed over and over, more often the larger the cluster."""
SCORE_PODS_WITHOUT_GPU = True
"""Whether the fragmentation-mode advisor scores pods without GPU too (by their CPU/memory; docs/evaluation.md)."""


PROFILES = ("default", "packing")
"""The scorer's profiles (docs/advisor.md, "Profiles"): the service's defaults, or packing alone."""


def scoring_profile(name: str, task_mix: TaskMix | None = None) -> ScoringConfig:
    """The scorer configured as profile `name` with `task_mix` as the requests packing keeps room for (None: the
    service's default mix). `packing` is what an admin whose goal is allocation would set (deploy/profiles/packing):
    packing alone (affinity, interference and JCT weights 0) as a strict order — the fragmentation gradient in
    `PACKING_GRADIENT_STEPS` steps, best fit within a step (CPU left balanced against GPUs left,
    `PACKING_CPU_BALANCE`; a little of the gradient below its step, `PACKING_GRADIENT_RESIDUAL`), the first node by
    name among equals — and no waiting for a faster GPU (it would leave
    GPUs idle); `default` the service's defaults."""
    mix = DEFAULT_TASK_MIX if task_mix is None else task_mix
    if name == "packing":
        return ScoringConfig(
            task_mix=mix,
            weight_affinity=0.0,
            weight_interference=0.0,
            weight_jct=0.0,
            extender_span_points=FRAGMENTATION_SPAN_POINTS,
            wait_slack=None,
            extender_first_of_equals=True,
            packing_best_fit_share=PACKING_BEST_FIT_SHARE,
            packing_gradient_steps=PACKING_GRADIENT_STEPS,
            packing_cpu_balance=PACKING_CPU_BALANCE,
            packing_gradient_residual=PACKING_GRADIENT_RESIDUAL,
        )
    if name == "default":
        return ScoringConfig(task_mix=mix)
    raise ValueError(f"unknown scoring profile {name!r}; choose from {', '.join(PROFILES)}")


class PackState:
    """Free GPU share per (node, GPU), free CPU and memory per node; capacities alongside."""

    def __init__(self, cluster: Cluster, workload: Workload, node_rank: IntArray | None = None) -> None:
        self.cluster = cluster
        n = len(cluster.nodes)
        g = max(cluster.max_gpus_per_node, 1)
        self.free = np.zeros((n, g))
        for i, node in enumerate(cluster.nodes):
            self.free[i, : node.gpus] = GPU_MILLI
        self.gpu_capacity = self.free.sum(axis=1)
        self.cpu_capacity = np.array([np.nan if x.cpu_milli is None else x.cpu_milli for x in cluster.nodes])
        self.memory_capacity = np.array([np.nan if x.memory_mib is None else x.memory_mib for x in cluster.nodes])
        self.cpu_free = np.where(np.isnan(self.cpu_capacity), np.inf, self.cpu_capacity)
        self.memory_free = np.where(np.isnan(self.memory_capacity), np.inf, self.memory_capacity)
        self.cache = NodeCache(self.free, self.cpu_free, self.memory_free, workload)
        self.version = np.zeros(n, dtype=np.int64)
        self.gpu_model = np.array([x.gpu_model for x in cluster.nodes])
        self.name_rank = (
            np.argsort(np.argsort(np.array([x.name for x in cluster.nodes]), kind="stable"))
            if node_rank is None
            else np.asarray(node_rank, dtype=np.int64)
        )
        """Each node's position in the order ties go by (the authors' scheduler takes the first of equal nodes by
        name): name order, or `node_rank` where the run gives one (the names the authors' simulator gives its nodes,
        `advisor.sim.baselines.authors_node_rank`)."""
        self._model_ok: dict[tuple[str, ...], BoolArray] = {}

    @property
    def allocated_milli(self) -> float:
        return float(self.gpu_capacity.sum() - self.free.sum())

    def feasible(self, pod: Pod) -> BoolArray:
        ok: BoolArray = (self.cpu_free >= pod.cpu_milli) & (self.memory_free >= pod.memory_mib)
        if pod.num_gpu == 0:
            return ok
        gpu_ok: BoolArray = (
            self.cache.max1 >= pod.gpu_milli if pod.gpu_milli < GPU_MILLI else self.cache.full >= pod.num_gpu
        )
        if pod.gpu_models:
            return ok & gpu_ok & self.model_ok(pod.gpu_models)
        return ok & gpu_ok

    def model_ok(self, models: tuple[str, ...]) -> BoolArray:
        """Nodes whose GPU model is one of `models` (all nodes when empty)."""
        found = self._model_ok.get(models)
        if found is None:
            found = self._model_ok[models] = (
                np.isin(self.gpu_model, list(models)) if models else np.ones(len(self.gpu_model), dtype=bool)
            )
        return found

    def place(self, node: int, gpus: Sequence[int], pod: Pod) -> None:
        if pod.num_gpu and len(gpus) != pod.num_gpu:
            raise ValueError(f"pod {pod.name} needs {pod.num_gpu} GPUs, policy gave {list(gpus)}")
        for g in gpus:
            if self.free[node, g] < pod.gpu_milli:
                raise ValueError(f"pod {pod.name}: GPU {g} of node {node} has only {self.free[node, g]:g} milli free")
            self.free[node, g] -= pod.gpu_milli
        self.cpu_free[node] -= pod.cpu_milli
        self.memory_free[node] -= pod.memory_mib
        self.cache.refresh(node, self.free[node], float(self.cpu_free[node]), float(self.memory_free[node]))
        self.version[node] += 1

    def whole_gpus(self, node: int, k: int) -> tuple[int, ...]:
        """The k lowest-index fully free GPUs of `node`."""
        free = np.flatnonzero(self.free[node] >= GPU_MILLI)
        return tuple(int(x) for x in free[:k])

    def usage_ratio_after(self, nodes: IntArray, pod: Pod) -> FloatArray:
        """Mean used ratio over GPU, CPU and memory (those the node declares) if `pod` went to each node."""
        gpu = (self.gpu_capacity[nodes] - self.free[nodes].sum(axis=1) + pod.num_gpu * pod.gpu_milli) / np.maximum(
            self.gpu_capacity[nodes], 1.0
        )
        ratios = [gpu]
        cpu_cap = self.cpu_capacity[nodes]
        if not np.isnan(cpu_cap).all():
            ratios.append(1.0 - (self.cpu_free[nodes] - pod.cpu_milli) / np.where(cpu_cap > 0, cpu_cap, np.nan))
        mem_cap = self.memory_capacity[nodes]
        if not np.isnan(mem_cap).all():
            ratios.append(1.0 - (self.memory_free[nodes] - pod.memory_mib) / np.where(mem_cap > 0, mem_cap, np.nan))
        stacked = np.vstack(ratios)
        mean: FloatArray = np.nanmean(np.where(np.isnan(stacked), np.nan, stacked), axis=0)
        return mean


class PackPolicy(Protocol):
    name: str

    def choose(self, pod: Pod, state: PackState, candidates: IntArray) -> tuple[int, tuple[int, ...]]:
        """Pick one of `candidates` (nodes where the pod fits, never empty) and the GPU indices to use there."""
        ...


def _share_gpu(state: PackState, node: int, milli: int, *, fullest: bool) -> tuple[int, ...]:
    free = state.free[node]
    fits = np.flatnonzero(free >= milli)
    pick = fits[np.argmin(free[fits])] if fullest else fits[np.argmax(free[fits])]
    return (int(pick),)


class RandomPolicy:
    name = "random"

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def choose(self, pod: Pod, state: PackState, candidates: IntArray) -> tuple[int, tuple[int, ...]]:
        node = int(self._rng.choice(candidates))
        if pod.num_gpu == 0:
            return node, ()
        if pod.gpu_milli < GPU_MILLI:
            fits = np.flatnonzero(state.free[node] >= pod.gpu_milli)
            return node, (int(self._rng.choice(fits)),)
        free = np.flatnonzero(state.free[node] >= GPU_MILLI)
        return node, tuple(sorted(int(x) for x in self._rng.choice(free, pod.num_gpu, replace=False)))


class AllocatedPolicy:
    """Kubernetes' LeastAllocated (`spread`) or MostAllocated (`binpack`) node scoring; equal nodes chosen among at
    random with `rng` (kube-scheduler's `selectHost`), else the first."""

    def __init__(self, *, most: bool, rng: np.random.Generator | None = None) -> None:
        self._most = most
        self._rng = rng
        self.name = "binpack" if most else "spread"

    def choose(self, pod: Pod, state: PackState, candidates: IntArray) -> tuple[int, tuple[int, ...]]:
        used = state.usage_ratio_after(candidates, pod)
        node = int(candidates[best_index(used if self._most else -used, self._rng)])
        if pod.num_gpu == 0:
            return node, ()
        if pod.gpu_milli < GPU_MILLI:
            return node, _share_gpu(state, node, pod.gpu_milli, fullest=self._most)
        return node, state.whole_gpus(node, pod.num_gpu)


class FgdPolicy:
    """Fragmentation Gradient Descent: least increase of the expected fragmentation F_n(M); equal increases chosen
    among at random with `rng`, else the first."""

    name = "fgd"

    def __init__(self, rng: np.random.Generator | None = None) -> None:
        self._rng = rng

    def choose(self, pod: Pod, state: PackState, candidates: IntArray) -> tuple[int, tuple[int, ...]]:
        cache = state.cache
        cpu_after = state.cpu_free[candidates] - pod.cpu_milli
        memory_after = state.memory_free[candidates] - pod.memory_mib
        if pod.num_gpu == 0 or pod.gpu_milli >= GPU_MILLI:
            delta = cache.delta_whole(candidates, pod.num_gpu, cpu_after, memory_after)
            node = int(candidates[best_index(-delta, self._rng)])
            return node, state.whole_gpus(node, pod.num_gpu)
        rows, cols = np.nonzero(state.free[candidates] >= pod.gpu_milli)
        nodes = candidates[rows]
        delta = cache.delta_share(
            nodes, state.free[nodes, cols], float(pod.gpu_milli), cpu_after[rows], memory_after[rows]
        )
        best = best_index(-delta, self._rng)
        return int(nodes[best]), (int(cols[best]),)


class AdvisorPackPolicy:
    """kube-scheduler with the advisor as its extender, scoring with the service's own `Scorer`.

    A node's total is what kube-scheduler computes: its default `NodeResourcesFit` score (LeastAllocated over GPU,
    CPU and memory, an integer 0..100; off with `kube_score` False — by default when the config breaks ties itself,
    `extender_first_of_equals`, as the packing profile's scheduler configuration has it) plus `extender_weight` × 10
    × the extender's integer 0..10 score (the service's own integers, `extender_node_scores`, with `first_of_equals`
    applied over the candidates by name where the config asks for it; kube-scheduler scales extender scores by
    MaxNodeScore / MaxExtenderPriority).
    The GPUs are the scorer's choice (what `/v1/allocate` tells the device plugin). The scorer is configured with the
    trace's requests as its `task_mix` (`task_mix_of`: what an admin sets from their own pod history; `fgd` gets the
    same trace) and, when that mix gives CPU/memory, sees each node's free CPU and memory and each pod's requests.
    Pods without a GPU get an extender score too when `score_pods_without_gpu` (the extender configured without
    `managedResources`, so kube-scheduler sends it every pod), else kube-scheduler's score alone.

    Node states are interned by GPU state (`StateInterner`) and, with CPU/memory, by the node's and the pod's fit
    indices (`MixResources.fit_index`), on which the score depends only: one scored state per distinct triple. The
    pod's CPU/memory are rounded to whole milli-CPU / MiB, as a `PodRequest` takes them, for both.
    """

    name = "advisor"

    def __init__(
        self,
        cluster: Cluster,
        config: ScoringConfig,
        predictors: Predictors | None = None,
        *,
        extender_weight: float = FRAGMENTATION_EXTENDER_WEIGHT,
        score_pods_without_gpu: bool = SCORE_PODS_WITHOUT_GPU,
        rng: np.random.Generator | None = None,
        kube_score: bool | None = None,
    ) -> None:
        self._kube_score = not config.extender_first_of_equals if kube_score is None else kube_score
        self._nodes = cluster.nodes
        self._interner = StateInterner(cluster.nodes)
        self._version = np.full(len(cluster.nodes), -1, dtype=np.int64)
        self._config = config
        self._scorer = Scorer(config, predictors or Predictors.heuristic(), memo_limit=SIM_MEMO_LIMIT)
        self._weight = extender_weight
        self._rng = rng
        self._resources = config.resources
        self._score_without_gpu = score_pods_without_gpu and config.resources is not None
        self._with_resources: dict[tuple[int, float, float], NodeState] = {}
        self._node_states: list[NodeState] = []

    def _sync(self, state: PackState) -> None:
        for i in np.flatnonzero(state.version != self._version):
            node = self._nodes[int(i)]
            allocated = [round(GPU_MILLI - float(state.free[i, g])) for g in range(node.gpus)]
            self._interner.update(int(i), [(a, share_residents(a)) for a in allocated])
            self._version[i] = state.version[i]
            if self._resources is not None:
                if not self._node_states:
                    self._node_states = [self._interner.states[0]] * len(self._nodes)
                self._node_states[i] = self._with_resources_state(state, int(i))

    def _with_resources_state(self, state: PackState, node: int) -> NodeState:
        """The node's interned GPU state with its CPU and memory, shared by nodes in the same state."""
        state_id = int(self._interner.node_state[node])
        key = (state_id, float(state.cpu_free[node]), float(state.memory_free[node]))
        found = self._with_resources.get(key)
        if found is None:
            found = self._with_resources[key] = replace(
                self._interner.states[state_id],
                cpu_allocatable_milli=_known(state.cpu_capacity[node]),
                cpu_free_milli=_known(state.cpu_free[node]),
                memory_allocatable_mib=_known(state.memory_capacity[node]),
                memory_free_mib=_known(state.memory_free[node]),
            )
        return found

    def _distinct_with_resources(
        self, state: PackState, candidates: IntArray, request: PodRequest, resources: MixResources
    ) -> tuple[list[NodeState], IntArray]:
        """Distinct (GPU state, fit index before, fit index after the pod) among `candidates`, one `NodeState` each
        (a real node's, so the scorer computes the same fit indices), and each candidate's position in that list."""
        cpu, memory = state.cpu_free[candidates], state.memory_free[candidates]
        grid_cpu, grid_memory = resources.workload.cpu_grid, resources.workload.memory_grid
        a = np.searchsorted(grid_cpu, cpu, side="right")
        b = np.searchsorted(grid_memory, memory, side="right")
        a2 = np.searchsorted(grid_cpu, cpu - (request.cpu_milli or 0), side="right")
        b2 = np.searchsorted(grid_memory, memory - (request.memory_mib or 0), side="right")
        n_a, n_b = len(grid_cpu) + 1, len(grid_memory) + 1
        key = (((self._interner.node_state[candidates] * n_a + a) * n_b + b) * n_a + a2) * n_b + b2
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        node_states = self._node_states
        return [node_states[i] for i in candidates[first].tolist()], inverse

    def choose(self, pod: Pod, state: PackState, candidates: IntArray) -> tuple[int, tuple[int, ...]]:
        if self._kube_score:
            kube = np.floor(100.0 * (1.0 - state.usage_ratio_after(candidates, pod)))
        else:
            kube = np.zeros(len(candidates))
        if pod.num_gpu == 0 and not self._score_without_gpu:
            return int(candidates[best_index(kube, self._rng)]), ()
        self._sync(state)
        resources = self._resources
        cpu = round(pod.cpu_milli) if resources is not None else None
        memory = round(pod.memory_mib) if resources is not None else None
        if pod.num_gpu == 0:
            request = PodRequest(name=pod.name, cpu_milli=cpu, memory_mib=memory)
        elif pod.gpu_milli < GPU_MILLI:
            request = PodRequest(name=pod.name, gpu_milli=pod.gpu_milli, cpu_milli=cpu, memory_mib=memory)
        else:
            request = PodRequest(name=pod.name, gpus=pod.num_gpu, cpu_milli=cpu, memory_mib=memory)
        if resources is None:
            states, inverse = self._interner.distinct(candidates)
        else:
            states, inverse = self._distinct_with_resources(state, candidates, request, resources)
        extender = np.array(self._scorer.extender_node_scores(request, states), dtype=np.float64)
        per_node = extender[inverse]
        infeasible = per_node == 0  # a feasible verdict scores at least 1
        if self._config.extender_first_of_equals:
            # `first_of_equals` as the service's extender applies it over every candidate node by name.
            top = per_node == per_node.max()
            first = np.flatnonzero(top)[np.argmin(state.name_rank[candidates[top]])]
            top[first] = False
            per_node[top] -= 1
        per_node[infeasible] = -np.inf
        best = best_index(kube + self._weight * 10.0 * per_node, self._rng)
        chosen = self._scorer.allocate(request, states[int(inverse[best])])
        if not chosen.feasible:
            raise RuntimeError(f"the scorer found no GPUs for {pod.name} on a node where it fits: {chosen.reason}")
        return int(candidates[best]), chosen.gpus


def _known(value: float) -> int | None:
    """A capacity or free amount as `NodeState` takes it: None where the cluster file does not say (nan / inf)."""
    return None if not math.isfinite(value) else round(value)


@dataclass
class FragmentationResult:
    """One policy's run. Curves are sampled every 1% of cluster GPU capacity of arrived demand."""

    policy: str
    gpu_allocation_ratio: float
    failed_pods: int
    fragmentation_ratio: float
    arrived_pods: int
    seconds: float
    arrived_ratio: list[float] = field(default_factory=list)
    allocation_ratio: list[float] = field(default_factory=list)
    failed_curve: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "gpu_allocation_ratio": self.gpu_allocation_ratio,
            "failed_pods": self.failed_pods,
            "fragmentation_ratio": self.fragmentation_ratio,
            "arrived_pods": self.arrived_pods,
            "seconds": self.seconds,
            "curve": {
                "arrived_demand_ratio": self.arrived_ratio,
                "gpu_allocation_ratio": self.allocation_ratio,
                "failed_pods": self.failed_curve,
            },
        }


def inflated_sequence(pods: Sequence[Pod], capacity_gpus: float, seed: int, max_ratio: float) -> list[Pod]:
    """Pods drawn with replacement until their GPU demand exceeds `max_ratio` × capacity (same for every policy)."""
    if not any(p.gpu_demand > 0 for p in pods):
        raise ValueError("the trace has no pod that requests a GPU")
    rng = np.random.default_rng(seed)
    out: list[Pod] = []
    demand = 0.0
    target = max_ratio * capacity_gpus
    while demand < target:
        for i in rng.integers(0, len(pods), size=1024):
            pod = pods[int(i)]
            out.append(pod)
            demand += pod.gpu_demand
            if demand >= target:
                break
    return out


def authors_sequence(pods: Sequence[Pod], capacity_gpus: float, seed: int, max_ratio: float) -> list[Pod]:
    """The FGD authors' inflation order: every pod of the trace once, shuffled, then pods drawn with replacement
    while the total GPU demand stays within `max_ratio` × capacity (a trace already beyond it loses pods drawn at
    random until it is within). Seeded; the same for every policy."""
    if not any(p.gpu_demand > 0 for p in pods):
        raise ValueError("the trace has no pod that requests a GPU")
    rng = np.random.default_rng(seed)
    out = [pods[int(i)] for i in rng.permutation(len(pods))]
    target = max_ratio * capacity_gpus
    demand = sum(p.gpu_demand for p in out)
    while demand > target:
        demand -= out.pop(int(rng.integers(len(out)))).gpu_demand
    while True:
        pod = pods[int(rng.integers(len(pods)))]
        if demand + pod.gpu_demand > target:
            return out
        out.append(pod)
        demand += pod.gpu_demand


SEQUENCES = {"authors": authors_sequence, "sampled": inflated_sequence}
"""How the trace is replayed: the authors' order (the default) or every pod drawn with replacement (before)."""


def run_fragmentation(
    cluster: Cluster,
    pods: Sequence[Pod],
    sequence: Sequence[Pod],
    policy: PackPolicy,
    fragmentation_milli: Callable[[PackState], float] | None = None,
    *,
    node_rank: IntArray | None = None,
) -> FragmentationResult:
    """Place `sequence` in order with `policy`; the target workload for fragmentation is the trace `pods`, the
    fragmentation reported at 100 % demand `fragmentation_milli(state)` (default: the advisor's definition), ties
    broken in `node_rank`'s order (default: by name; `PackState.name_rank`)."""
    started = time.perf_counter()
    measure = fragmentation_milli or (lambda s: float(s.cache.frag.sum()))
    workload = workload_of(pods)
    state = PackState(cluster, workload, node_rank)
    capacity_milli = float(state.gpu_capacity.sum())
    arrived_milli = 0.0
    failed = 0
    next_mark = 0.0
    arrived_ratio: list[float] = []
    allocation: list[float] = []
    failed_curve: list[int] = []
    at_full: tuple[float, int, float] | None = None
    for pod in sequence:
        demand = pod.gpu_demand * GPU_MILLI
        while arrived_milli + demand > next_mark * capacity_milli and next_mark <= MAX_ARRIVED_RATIO + 1e-9:
            arrived_ratio.append(round(next_mark, 4))
            allocation.append(state.allocated_milli / capacity_milli)
            failed_curve.append(failed)
            if at_full is None and next_mark >= 1.0 - 1e-9:
                at_full = (state.allocated_milli / capacity_milli, failed, measure(state))
            next_mark += CURVE_STEP_RATIO
        arrived_milli += demand
        candidates = np.flatnonzero(state.feasible(pod))
        if len(candidates) == 0:
            failed += pod.num_gpu > 0
            continue
        node, gpus = policy.choose(pod, state, candidates)
        state.place(node, gpus, pod)
    while next_mark <= MAX_ARRIVED_RATIO + 1e-9:
        arrived_ratio.append(round(next_mark, 4))
        allocation.append(state.allocated_milli / capacity_milli)
        failed_curve.append(failed)
        next_mark += CURVE_STEP_RATIO
    if at_full is None:
        at_full = (state.allocated_milli / capacity_milli, failed, measure(state))
    return FragmentationResult(
        policy=policy.name,
        gpu_allocation_ratio=at_full[0],
        failed_pods=at_full[1],
        fragmentation_ratio=at_full[2] / capacity_milli,
        arrived_pods=len(sequence),
        seconds=time.perf_counter() - started,
        arrived_ratio=arrived_ratio,
        allocation_ratio=allocation,
        failed_curve=failed_curve,
    )
