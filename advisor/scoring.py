"""Placement scoring: how good each candidate node is for one GPU pod, and which GPUs it should get there.

Pure and batched: `score_nodes` takes the pod's request and the state of all candidate nodes and returns one
`NodeScore` per node (0..100, with its components, the chosen GPU indices, the predicted slowdown/JCT and a one-line
reason). No HTTP, no pydantic, no I/O — the service, `/v1/allocate`, the extender filter and the simulator all call
these functions directly.

Components (each a ratio 0..1; the score is their weighted mean × 100):

* packing — fragmentation gradient (FGD, ATC'23; the math is `advisor.fragmentation`): Δ = how much placing the pod
  increases the node's expected fragmentation, i.e. the free GPU capacity (fractional shares included) that a task
  drawn from the target workload `ScoringConfig.task_mix` could not use. A task of 1 < k ≤ largest NVLink island
  GPUs only counts as runnable inside one island. `packing = 0.8 / (1 + exp(Δ in GPUs)) + 0.2 × (1 − free GPU
  capacity left / capacity)`: a pod that fills a gap scores high, one that breaks up a whole node, island or GPU low,
  and the best-fit fifth breaks ties between equal fragmentation changes toward the fuller node. A GPU share is
  scored on every GPU it fits on (the GPU with the best packing + interference wins). Where a node's free CPU /
  memory is known and the task mix gives CPU / memory, task types that no longer fit there count all its free GPUs
  as fragments (FGD's full definition; the pod's own CPU/memory is taken off first), and a pod without GPU is scored
  by this component alone; otherwise the scores are exactly the GPU-only ones.
* affinity — for k ≥ 2 GPUs the best free k-set by link level (NVLINK > PCIE_SWITCH > PCIE_HOSTBRIDGE > NUMA >
  SYSTEM): `1 − mean pairwise link rank / 4`. For members of a gang, half of it is gang locality: 1 on a node that
  already runs a member, 0 on another node when members run elsewhere.
* interference — 0.5 / pod slowdown + 0.5 / worst resident slowdown on the chosen GPUs (1 when they are unshared).
* jct — predicted completion time on this node's GPU model, slowdown included, relative to the best candidate
  (`best / this`). Without a JCT estimate the ratio of `slowdown / relative GPU speed` is used (heterogeneity only).

Waiting for a faster GPU (`wait_verdicts`, the extender filter): a pod that would finish sooner by waiting for room on
a faster GPU model than by starting now on a slower one is kept off the slower nodes. From the JCT predictor: `run[m]`,
the pod's predicted run time on model m; `room[m]`, the least time until some node of model m has room for it (each
resident's predicted end, `LeaveTimes`; a GPU whose residents' ends are unknown never frees as far as the advisor
knows). A node of model m fails when `run[m] > ScoringConfig.wait_slack × min over m' of (room[m'] + run[m'])`. No JCT
estimate, a gang member, or a single GPU model in the cluster: nobody waits.

Nodes whose last snapshot is older than `ScoringConfig.staleness_seconds` are scored as unknown
(`unknown_node_score`, neutral by default) with that reason; so are nodes the advisor never heard of.
kube-scheduler's integer 0..10 comes from `extender_scores` (or, without building verdicts, `extender_priorities`).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import combinations, count
from typing import NamedTuple

from advisor.fragmentation import (
    DEFAULT_TASK_MIX,
    MixResources,
    TaskMix,
    TaskMixError,
    mix_resources,
    node_fragmentation_fit_milli,
    node_fragmentation_milli,
    validate_task_mix,
    whole_gpu_mix,
)
from advisor.gpus import normalize_gpu_model
from advisor.predictors import Predictors, UsageProfile, default_usage
from collector.snapshot import LINK_RANK, LinkLevel

WHOLE_GPU_MILLI = 1000
WORST_LINK_RANK = LINK_RANK[LinkLevel.SYSTEM]
DEFAULT_WAIT_SLACK = 1.5
"""`ScoringConfig.wait_slack` of the service: pass a node over when the pod would finish there more than 1.5x later
than by waiting for a faster GPU model (chosen among off, 1, 1.5 and 2 on the Gavel validation run,
`bench/sim_gavel.py --validate --validate-slacks`; docs/evaluation.md, experiment 2)."""
_EXHAUSTIVE_SET_LIMIT = 4096
_GREEDY_STARTS = 8
_MEMO_LIMIT = 64
_SHAPE_LIMIT = 4096
_HEURISTIC = Predictors.heuristic()


class ScoringInputError(ValueError):
    """A pod request or node state that cannot be scored; the message names the field."""


# --------------------------------------------------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What one pod asks for.

    `gpus` whole GPUs, or a share of one GPU: `gpu_milli` in 1..999 (thousandths of a GPU) and/or `gpu_memory_bytes`.
    `workload` is the `gpuadvisor.io/workload` label (the key for profiles and models); `gang` the pod group.
    `cpu_milli` / `memory_mib` are the pod's CPU and memory requests (None: unknown, taken as 0); they matter only
    on nodes whose free CPU / memory is known and with a task mix that gives CPU / memory. `gpu_models` are the GPU
    models the pod accepts, normalised (`advisor.gpus.normalize_gpu_model`; from its node selector or required
    affinity on `nvidia.com/gpu.product`); empty: any. A node of another model cannot run it.
    """

    name: str = ""
    gpus: int = 0
    gpu_milli: int = 0
    gpu_memory_bytes: int | None = None
    workload: str | None = None
    gang: str | None = None
    cpu_milli: int | None = None
    memory_mib: int | None = None
    gpu_models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise ScoringInputError(f"gpus must be >= 0, got {self.gpus}")
        if not 0 <= self.gpu_milli <= WHOLE_GPU_MILLI:
            raise ScoringInputError(f"gpu_milli must be within 0..1000, got {self.gpu_milli}")
        if self.gpu_memory_bytes is not None and self.gpu_memory_bytes < 0:
            raise ScoringInputError(f"gpu_memory_bytes must be >= 0, got {self.gpu_memory_bytes}")
        if self.gpus > 0 and self.gpu_milli not in (0, WHOLE_GPU_MILLI):
            raise ScoringInputError("gpu_milli (a GPU share) cannot be combined with whole gpus")
        if self.cpu_milli is not None and self.cpu_milli < 0:
            raise ScoringInputError(f"cpu_milli must be >= 0, got {self.cpu_milli}")
        if self.memory_mib is not None and self.memory_mib < 0:
            raise ScoringInputError(f"memory_mib must be >= 0, got {self.memory_mib}")

    @property
    def is_share(self) -> bool:
        """True for a fraction of one GPU (shared with other pods)."""
        return self.gpus == 0 and (0 < self.gpu_milli < WHOLE_GPU_MILLI or self.gpu_memory_bytes is not None)

    @property
    def whole_gpus(self) -> int:
        """Whole GPUs needed (a share of 1000 milli is one whole GPU)."""
        if self.gpus:
            return self.gpus
        return 1 if self.gpu_milli == WHOLE_GPU_MILLI else 0

    @property
    def share_milli(self) -> int:
        """Thousandths of a GPU that a share takes (a memory-only share counts as 0: no SM reservation)."""
        return self.gpu_milli if self.is_share else 0


@dataclass(frozen=True, slots=True)
class Resident:
    """A process (usually a pod) on a GPU, as the last snapshot saw it; `started_seconds` is when its pod started
    (the advisor's clock, None when unknown)."""

    pod: str
    workload: str | None = None
    gpu_milli: int = WHOLE_GPU_MILLI
    sm_utilization_ratio: float = 0.0
    memory_bandwidth_utilization_ratio: float = 0.0
    memory_used_bytes: int = 0
    started_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class GpuState:
    """One GPU of a node. `allocated_milli` is how much of it pods hold (1000 = a whole-GPU pod or full shares)."""

    index: int
    model: str = ""
    healthy: bool = True
    memory_total_bytes: int = 0
    memory_used_bytes: int = 0
    sm_utilization_ratio: float = 0.0
    memory_bandwidth_utilization_ratio: float = 0.0
    allocated_milli: int = 0
    residents: tuple[Resident, ...] = ()

    @property
    def memory_free_bytes(self) -> int | None:
        """Free memory, or None when the total is unknown."""
        if self.memory_total_bytes <= 0:
            return None
        return max(0, self.memory_total_bytes - self.memory_used_bytes)


class Topology:
    """Pairwise link ranks of a node's GPUs (`LINK_RANK`, 0 = NVLINK … 4 = SYSTEM), by position in `NodeState.gpus`.

    Hashed by identity so that per-topology caches stay cheap: build one per distinct topology and share it (the
    cluster state does, per distinct link list).
    """

    __slots__ = ("gpu_count", "islands", "known", "largest_island", "ranks")

    def __init__(self, ranks: Sequence[Sequence[int]], *, known: bool = True) -> None:
        n = len(ranks)
        for i, row in enumerate(ranks):
            if len(row) != n:
                raise ScoringInputError(f"topology row {i} has {len(row)} entries, expected {n}")
        self.gpu_count = n
        self.ranks: tuple[tuple[int, ...], ...] = tuple(tuple(int(r) for r in row) for row in ranks)
        self.known = known
        self.islands = _nvlink_islands(self.ranks)
        self.largest_island = max((m.bit_count() for m in self.islands), default=0)

    @classmethod
    def from_links(cls, gpu_count: int, links: Iterable[tuple[int, int, LinkLevel]]) -> Topology:
        """From (position a, position b, level) pairs; pairs not listed are assumed SYSTEM (the worst)."""
        ranks = [[0 if i == j else WORST_LINK_RANK for j in range(gpu_count)] for i in range(gpu_count)]
        seen = False
        for a, b, level in links:
            if a >= gpu_count or b >= gpu_count:
                raise ScoringInputError(f"link {a}-{b} names a GPU outside 0..{gpu_count - 1}")
            if a != b:
                ranks[a][b] = ranks[b][a] = LINK_RANK[level]
                seen = True
        return cls(ranks, known=seen or gpu_count <= 1)

    @classmethod
    def uniform(cls, gpu_count: int, level: LinkLevel) -> Topology:
        """Every pair connected at `level` (e.g. an NVSwitch node is uniform NVLINK)."""
        return cls([[0 if i == j else LINK_RANK[level] for j in range(gpu_count)] for i in range(gpu_count)])


def _nvlink_islands(ranks: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """Connected components (as bit masks) of the NVLINK graph; a lone GPU is its own island."""
    n = len(ranks)
    seen = 0
    islands: list[int] = []
    nvlink = LINK_RANK[LinkLevel.NVLINK]
    for start in range(n):
        if seen >> start & 1:
            continue
        mask, stack = 0, [start]
        while stack:
            i = stack.pop()
            if mask >> i & 1:
                continue
            mask |= 1 << i
            stack.extend(j for j in range(n) if j != i and ranks[i][j] == nvlink and not mask >> j & 1)
        seen |= mask
        islands.append(mask)
    return tuple(islands)


@dataclass(frozen=True, slots=True, eq=False)
class NodeState:
    """One node as the advisor sees it. Derived masks are computed once here, not per scoring call.

    `observed_at_seconds` is the Unix time of the node's last snapshot (None: never observed, e.g. only known from
    the Kubernetes API). `gangs` names the pod groups with members allocated on this node.

    CPU (milli-CPU) and memory (MiB), allocatable and free (allocatable minus what pods request), are optional: None
    when unknown. With free CPU or memory known (and a task mix that gives CPU / memory), packing counts a node's free
    GPUs as fragments for the task types whose CPU or memory no longer fits (FGD's definition), and a pod whose own
    request exceeds them is infeasible; without, the node is scored on its GPUs alone.

    `memo` caches this node's verdict per request shape (the node is immutable, so a verdict never goes stale; a new
    snapshot makes a new `NodeState`). Compared and hashed by identity.
    """

    name: str
    gpus: tuple[GpuState, ...]
    topology: Topology
    observed_at_seconds: float | None = None
    gangs: frozenset[str] = frozenset()
    cpu_allocatable_milli: int | None = None
    cpu_free_milli: int | None = None
    memory_allocatable_mib: int | None = None
    memory_free_mib: int | None = None
    gpu_model: str = field(init=False)
    free_mask: int = field(init=False)
    free_milli: tuple[int, ...] = field(init=False)
    healthy_count: int = field(init=False)
    share_positions: tuple[int, ...] = field(init=False)
    natural_indices: bool = field(init=False)
    memo: dict[int, _Raw] = field(init=False, repr=False)
    leave_memo: dict[int, tuple[object, _GpuEnds]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.topology.gpu_count != len(self.gpus):
            raise ScoringInputError(
                f"node {self.name}: topology covers {self.topology.gpu_count} GPUs, node has {len(self.gpus)}"
            )
        for what, allocatable, free in (
            ("cpu", self.cpu_allocatable_milli, self.cpu_free_milli),
            ("memory", self.memory_allocatable_mib, self.memory_free_mib),
        ):
            unit = "milli" if what == "cpu" else "mib"
            if allocatable is not None and allocatable < 0:
                raise ScoringInputError(f"node {self.name}: {what}_allocatable_{unit} must be >= 0, got {allocatable}")
            if free is not None and free < 0:
                raise ScoringInputError(f"node {self.name}: {what}_free_{unit} must be >= 0, got {free}")
            if allocatable is not None and free is not None and free > allocatable:
                raise ScoringInputError(
                    f"node {self.name}: {what}_free_{unit} {free} exceeds {what}_allocatable_{unit} {allocatable}"
                )
        free = 0
        healthy = 0
        models: dict[str, int] = {}
        share: list[int] = []
        clean_free_seen = False
        for pos, g in enumerate(self.gpus):
            if g.healthy:
                healthy += 1
                if g.allocated_milli == 0:
                    free |= 1 << pos
                if g.allocated_milli < WHOLE_GPU_MILLI and (g.allocated_milli or g.residents or not clean_free_seen):
                    # Shared or busy GPUs each differ; unshared free GPUs are interchangeable, the first stands in.
                    share.append(pos)
                    clean_free_seen = clean_free_seen or not (g.allocated_milli or g.residents)
            models[g.model] = models.get(g.model, 0) + 1
        object.__setattr__(self, "share_positions", tuple(share))
        object.__setattr__(self, "natural_indices", all(g.index == pos for pos, g in enumerate(self.gpus)))
        object.__setattr__(self, "memo", {})
        object.__setattr__(self, "leave_memo", {})
        object.__setattr__(self, "free_mask", free)
        object.__setattr__(
            self,
            "free_milli",
            tuple(max(0, WHOLE_GPU_MILLI - g.allocated_milli) if g.healthy else 0 for g in self.gpus),
        )
        object.__setattr__(self, "healthy_count", healthy)
        object.__setattr__(self, "gpu_model", max(models, key=lambda m: models[m]) if models else "")

    @property
    def free_gpus(self) -> int:
        return self.free_mask.bit_count()


DEFAULT_EXTENDER_SPAN_POINTS = 40.0
"""The extender's integer drops one step per this / 10 points a node is behind the batch's best (`extender_scores`)."""


@dataclass(frozen=True, slots=True, eq=False)
class ScoringConfig:
    """Weights and policy.

    `task_mix` is the target workload the packing component keeps room for: (GPUs, milli-GPU per GPU, probability)
    per request shape, GPU shares included (default `advisor.fragmentation.DEFAULT_TASK_MIX`; the simulator passes
    the trace's own mix). `task_sizes`, whole-GPU (GPUs, probability) pairs, is the older shorthand: when given it
    replaces `task_mix` with whole-GPU requests of those sizes. Entries of `task_mix` may give the task's CPU
    (milli) and memory (MiB) request, and tasks without GPU (0, 0, p, cpu, memory): then `resources` is their
    CPU/memory side and nodes with known free CPU/memory are scored with it. `wait_slack` is the filter's patience
    (`wait_verdicts`): a node is passed over when the pod's predicted run time there exceeds `wait_slack` × the
    soonest predicted finish after waiting for room on any GPU model; None never waits. `hold_for_blocked` (off by
    default): the filter keeps pods off the nodes held for the first pending pod that has no room (`reserve`,
    `reserved_verdicts`) unless they are predicted to finish before it starts. `shortest_first` (off by default): the
    filter keeps a pod off room that pending pods with a higher response ratio are expected to take (`claims`,
    `yield_verdicts`).

    Compared and hashed by identity (it keys the per-shape caches): build one per service or simulation run.
    """

    weight_packing: float = 1.0
    weight_affinity: float = 1.0
    weight_interference: float = 1.0
    weight_jct: float = 1.0
    staleness_seconds: float = 30.0
    strict_staleness: bool = False
    unknown_node_score: float = 50.0
    task_mix: TaskMix = DEFAULT_TASK_MIX
    task_sizes: tuple[tuple[int, float], ...] | None = None
    extender_span_points: float = DEFAULT_EXTENDER_SPAN_POINTS
    wait_slack: float | None = DEFAULT_WAIT_SLACK
    hold_for_blocked: bool = False
    shortest_first: bool = False
    resources: MixResources | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.task_sizes is not None:
            object.__setattr__(self, "task_mix", whole_gpu_mix(self.task_sizes))
        try:
            validate_task_mix(self.task_mix)
        except TaskMixError as exc:
            raise ScoringInputError(str(exc)) from None
        object.__setattr__(self, "resources", mix_resources(self.task_mix))
        for name in ("weight_packing", "weight_affinity", "weight_interference", "weight_jct"):
            if getattr(self, name) < 0:
                raise ScoringInputError(f"{name} must be >= 0")
        if self.staleness_seconds <= 0:
            raise ScoringInputError("staleness_seconds must be > 0")
        if not self.extender_span_points > 0:
            raise ScoringInputError("extender_span_points must be > 0")
        if not 0 <= self.unknown_node_score <= 100:
            raise ScoringInputError("unknown_node_score must be within 0..100")
        if self.wait_slack is not None and not self.wait_slack >= 1:
            # Below 1 even the node with the soonest finish would be passed over.
            raise ScoringInputError("wait_slack must be >= 1 (None turns waiting for a faster GPU off)")


# --------------------------------------------------------------------------------------------------------------------
# Outputs


class NodeScore(NamedTuple):
    """The verdict on one node. `score` 0..100; components are ratios 0..1; `gpus` are GPU indices (NVML order).

    A NamedTuple rather than a frozen dataclass: one is built per candidate node per call, and that is 3x cheaper.
    """

    node: str
    score: float
    feasible: bool
    known: bool
    packing: float
    affinity: float
    interference: float
    jct: float
    gpus: tuple[int, ...]
    predicted_slowdown: float
    predicted_jct_seconds: float | None
    detail: str
    gpu_model: str = ""
    jct_basis: str = ""

    @property
    def reason(self) -> str:
        """One line explaining the score (built on demand: the extender path never needs it)."""
        if not self.feasible or not self.known:
            return self.detail
        run = f": ~{duration_text(self.predicted_jct_seconds)}" if self.predicted_jct_seconds is not None else ""
        return (
            f"GPUs {list(self.gpus)}{self.detail}; packing {self.packing:.2f}, affinity {self.affinity:.2f}, "
            f"slowdown x{self.predicted_slowdown:.2f}; on {self.gpu_model or 'an unknown GPU model'} it runs at "
            f"{self.jct:.2f} of the fastest candidate's speed ({self.jct_basis}{run})"
        )

    @property
    def extender_score(self) -> int:
        """This score alone on the extender's integer scale 0..10 (see `extender_scores` for a whole batch)."""
        return min(10, max(0, round(self.score / 10.0)))


def extender_scores(scores: Sequence[NodeScore], *, span_points: float = DEFAULT_EXTENDER_SPAN_POINTS) -> list[int]:
    """kube-scheduler's integer 0..10 for a batch, keeping the ranking that rounding `score / 10` would flatten.

    The best feasible known node gets 10 and every other one loses 1 per `span_points` / 10 points (the config's
    `extender_span_points`, 4 by default) it is behind, down to 1; infeasible nodes get 0 and unknown ones their own
    (neutral) score / 10. Components that are equal on every node compress raw scores into a narrow band, and a
    float does not decode in the scheduler.
    """
    best = max((s.score for s in scores if s.known and s.feasible), default=None)
    out: list[int] = []
    for s in scores:
        if not s.known:
            out.append(min(10, max(0, round(s.score / 10.0))))
        elif not s.feasible or best is None:
            out.append(0)
        else:
            out.append(max(1, round(10.0 - 10.0 * (best - s.score) / span_points)))
    return out


# --------------------------------------------------------------------------------------------------------------------
# Fragmentation and GPU-set search (cached per topology and free mask: many nodes share both)


def fragmentation_milli(topology: Topology, free_milli: tuple[int, ...], task_mix: TaskMix) -> float:
    """The node's expected fragmentation F_n(M) in milli-GPU (`advisor.fragmentation.node_fragmentation_milli`)."""
    return node_fragmentation_milli(free_milli, topology.islands, topology.largest_island, task_mix)


Fit = tuple[tuple[int, int], tuple[int, int]]
"""A node's CPU/memory fit index (`MixResources.fit_index`) before and after the pod's own request."""


def _fit(node: NodeState, pod: PodRequest, resources: MixResources | None) -> Fit | None:
    """The fit indices when the mix gives CPU/memory and the node's free CPU or memory is known, else None."""
    if resources is None or (node.cpu_free_milli is None and node.memory_free_mib is None):
        return None
    cpu = math.inf if node.cpu_free_milli is None else float(node.cpu_free_milli)
    memory = math.inf if node.memory_free_mib is None else float(node.memory_free_mib)
    return (
        resources.fit_index(cpu, memory),
        resources.fit_index(cpu - (pod.cpu_milli or 0), memory - (pod.memory_mib or 0)),
    )


def _resources_short(node: NodeState, pod: PodRequest) -> str | None:
    """Why the node cannot hold the pod's own request — a GPU model the pod does not accept, too little free CPU or
    memory (where known) — or None when it can."""
    if pod.gpu_models and normalize_gpu_model(node.gpu_model) not in pod.gpu_models:
        return f"GPU model {node.gpu_model or 'unknown'} is not one the pod accepts ({', '.join(pod.gpu_models)})"
    if pod.cpu_milli is not None and node.cpu_free_milli is not None and pod.cpu_milli > node.cpu_free_milli:
        return f"needs {pod.cpu_milli} milli-CPU, has {node.cpu_free_milli} free"
    if pod.memory_mib is not None and node.memory_free_mib is not None and pod.memory_mib > node.memory_free_mib:
        return f"needs {pod.memory_mib} MiB of memory, has {node.memory_free_mib} free"
    return None


def _fragmentation_with(
    topology: Topology, free_milli: tuple[int, ...], config: ScoringConfig, fit: tuple[int, int] | None
) -> float:
    """F_n(M) of the node, with CPU/memory at fit index `fit` when known (else GPU-only, as `fragmentation_milli`)."""
    if fit is None or config.resources is None:
        return node_fragmentation_milli(free_milli, topology.islands, topology.largest_island, config.task_mix)
    return node_fragmentation_fit_milli(free_milli, topology.islands, topology.largest_island, config.resources, fit)


@lru_cache(maxsize=65536)
def _mask_milli(gpu_count: int, mask: int) -> tuple[int, ...]:
    return tuple(WHOLE_GPU_MILLI if mask >> i & 1 else 0 for i in range(gpu_count))


def _take(free_milli: tuple[int, ...], positions: Iterable[int], milli: int) -> tuple[int, ...]:
    out = list(free_milli)
    for p in positions:
        out[p] -= milli
    return tuple(out)


@dataclass(frozen=True, slots=True)
class _GpuSet:
    mask: int
    positions: tuple[int, ...]
    worst_rank: int
    mean_rank: float
    fragmentation_after: float


def _set_cost(ranks: tuple[tuple[int, ...], ...], positions: Sequence[int]) -> tuple[int, float]:
    worst, total, pairs = 0, 0, 0
    for a_i, a in enumerate(positions):
        row = ranks[a]
        for b in positions[a_i + 1 :]:
            r = row[b]
            total += r
            pairs += 1
            worst = max(worst, r)
    return worst, (total / pairs if pairs else 0.0)


@lru_cache(maxsize=65536)
def best_gpu_set(topology: Topology, eligible_mask: int, k: int, task_mix: TaskMix) -> _GpuSet | None:
    """The best k GPUs among `eligible_mask`: best worst link, then best mean link, then least fragmentation.

    Which whole free GPUs a pod takes changes only the whole-GPU part of F (partly used GPUs stay as they are), so
    the tie-break compares F of the eligible GPUs left.

    Exhaustive while the number of k-subsets is at most 4096; beyond, greedy (grow by cheapest link) from up to 8 seeds
    spread over the NVLink islands.
    """
    positions = [i for i in range(topology.gpu_count) if eligible_mask >> i & 1]
    if k <= 0 or len(positions) < k:
        return None
    ranks = topology.ranks
    if math.comb(len(positions), k) <= _EXHAUSTIVE_SET_LIMIT:
        candidates: Iterable[tuple[int, ...]] = combinations(positions, k)
    else:
        # Grow from the first eligible GPU of each NVLink island (then others) — at most _GREEDY_STARTS seeds.
        seeds = [p for island in topology.islands for p in positions if island >> p & 1][:: max(1, k)]
        seeds = list(dict.fromkeys([*seeds, *positions]))[:_GREEDY_STARTS]
        candidates = (_greedy_set(ranks, positions, start, k) for start in seeds)
    best: tuple[int, float, float] | None = None
    chosen: _GpuSet | None = None
    for combo in candidates:
        worst, mean = _set_cost(ranks, combo)
        if best is not None and (worst, mean) > best[:2]:
            continue
        mask = 0
        for p in combo:
            mask |= 1 << p
        frag = fragmentation_milli(topology, _mask_milli(topology.gpu_count, eligible_mask & ~mask), task_mix)
        key = (worst, mean, frag)
        if best is None or key < best:
            best = key
            chosen = _GpuSet(mask, tuple(combo), worst, mean, frag)
    return chosen


def _greedy_set(ranks: tuple[tuple[int, ...], ...], positions: list[int], start: int, k: int) -> tuple[int, ...]:
    chosen = [start]
    rest = [p for p in positions if p != start]
    while len(chosen) < k:
        nxt = min(rest, key=lambda p: (max(ranks[p][c] for c in chosen), sum(ranks[p][c] for c in chosen)))
        chosen.append(nxt)
        rest.remove(nxt)
    return tuple(sorted(chosen))


@dataclass(frozen=True, slots=True)
class _WholePlan:
    positions: tuple[int, ...]
    packing: float
    topology_affinity: float
    detail: str


@lru_cache(maxsize=65536)
def _whole_plan(
    topology: Topology, free_milli: tuple[int, ...], eligible_mask: int, k: int, config: ScoringConfig
) -> _WholePlan | None:
    """Chosen k-set, packing and link affinity of a whole-GPU request; depends only on the node's shape."""
    chosen = best_gpu_set(topology, eligible_mask, k, config.task_mix)
    if chosen is None:
        return None
    after_milli = _take(free_milli, chosen.positions, WHOLE_GPU_MILLI)
    packing = _packing(
        fragmentation_milli(topology, after_milli, config.task_mix)
        - fragmentation_milli(topology, free_milli, config.task_mix),
        after_milli,
    )
    left = f"leaves {sum(1 for r in after_milli if r >= WHOLE_GPU_MILLI)} free"
    if k <= 1:
        return _WholePlan(chosen.positions, packing, 1.0, f", {left}")
    link = _LEVEL_BY_RANK[chosen.worst_rank] if topology.known else "topology unknown"
    return _WholePlan(chosen.positions, packing, 1.0 - chosen.mean_rank / WORST_LINK_RANK, f" on {link}, {left}")


def _packing(delta_fragmentation_milli: float, free_after_milli: tuple[int, ...]) -> float:
    """80 % fragmentation change (in GPUs), 20 % best fit (less free capacity left): equal fragmentation changes go
    to the fuller node."""
    left_ratio = sum(free_after_milli) / max(1, WHOLE_GPU_MILLI * len(free_after_milli))
    return 0.8 * _sigmoid_of_negative(delta_fragmentation_milli / WHOLE_GPU_MILLI) + 0.2 * (1.0 - left_ratio)


def _sigmoid_of_negative(x: float) -> float:
    if x > 50:
        return 0.0
    return 1.0 / (1.0 + math.exp(x))


# --------------------------------------------------------------------------------------------------------------------
# Per-node evaluation (before the batch-relative JCT component)


@dataclass(slots=True)
class _Raw:
    """A node's verdict before the batch-relative JCT; names the node rather than holding it (no reference cycle
    through `NodeState.memo`, so a replaced node state is freed at once)."""

    name: str
    gpu_model: str
    feasible: bool
    gpus: tuple[int, ...] = ()
    packing: float = 0.0
    affinity: float = 0.0
    interference: float = 1.0
    slowdown: float = 1.0
    detail: str = ""


_LEVEL_BY_RANK = {rank: level.value for level, rank in LINK_RANK.items()}


def _memory_ok(gpu: GpuState, need_bytes: int | None, *, whole: bool) -> bool:
    if need_bytes is None:
        return True
    if whole:
        return gpu.memory_total_bytes <= 0 or gpu.memory_total_bytes >= need_bytes
    free = gpu.memory_free_bytes
    return free is None or free >= need_bytes


def _whole_eligible_mask(node: NodeState, pod: PodRequest) -> int:
    if pod.gpu_memory_bytes is None:
        return node.free_mask
    mask = 0
    for pos, g in enumerate(node.gpus):
        if node.free_mask >> pos & 1 and _memory_ok(g, pod.gpu_memory_bytes, whole=True):
            mask |= 1 << pos
    return mask


def _evaluate_whole(
    node: NodeState,
    pod: PodRequest,
    *,
    k: int,
    config: ScoringConfig,
    predictors: Predictors,
    usage: UsageProfile,
    gang_elsewhere: bool,
    fit: Fit | None,
) -> _Raw:
    eligible = _whole_eligible_mask(node, pod)
    free = eligible.bit_count()
    if free < k:
        what = "free GPUs" if eligible == node.free_mask else "free GPUs with enough memory"
        return _Raw(node.name, node.gpu_model, False, detail=f"needs {k} {what}, has {free}")
    plan = _whole_plan(node.topology, node.free_milli, eligible, k, config)
    if plan is None:
        return _Raw(node.name, node.gpu_model, False, detail=f"needs {k} free GPUs, has {free}")
    packing = plan.packing
    if fit is not None:
        after = _take(node.free_milli, plan.positions, WHOLE_GPU_MILLI)
        before_f = _fragmentation_with(node.topology, node.free_milli, config, fit[0])
        packing = _packing(_fragmentation_with(node.topology, after, config, fit[1]) - before_f, after)
    affinity = plan.topology_affinity
    if pod.gang:
        affinity = 0.5 * affinity + 0.5 * (1.0 if pod.gang in node.gangs else (0.0 if gang_elsewhere else 0.5))
    gpus = node.gpus
    pod_slow, res_slow = 1.0, 1.0
    for pos in plan.positions:
        residents = gpus[pos].residents
        if residents:
            p, r = predictors.interference.slowdowns(gpus[pos].model, pod.workload, usage, residents)
            pod_slow = max(pod_slow, p)
            res_slow = max(res_slow, r)
    indices = plan.positions if node.natural_indices else tuple(gpus[p].index for p in plan.positions)
    return _Raw(
        node.name,
        node.gpu_model,
        True,
        indices,
        packing,
        affinity,
        0.5 / pod_slow + 0.5 / res_slow,
        pod_slow,
        plan.detail,
    )


def _evaluate_share(
    node: NodeState,
    pod: PodRequest,
    *,
    config: ScoringConfig,
    predictors: Predictors,
    usage: UsageProfile,
    gang_elsewhere: bool,
    fit: Fit | None,
) -> _Raw:
    milli = pod.share_milli
    topo = node.topology
    best: tuple[float, int, float, float, float] | None = None  # (value, pos, packing, pod_slow, res_slow)
    free_milli = node.free_milli
    fit_before, fit_after = fit if fit is not None else (None, None)
    before = _fragmentation_with(topo, free_milli, config, fit_before)
    gpus = node.gpus
    for pos in node.share_positions:
        g = gpus[pos]
        if g.allocated_milli + milli > WHOLE_GPU_MILLI:
            continue
        if not _memory_ok(g, pod.gpu_memory_bytes, whole=False):
            continue
        after_milli = _take(free_milli, (pos,), milli)
        packing = _packing(_fragmentation_with(topo, after_milli, config, fit_after) - before, after_milli)
        if g.residents:
            pod_slow, res_slow = predictors.interference.slowdowns(g.model, pod.workload, usage, g.residents)
        else:
            pod_slow, res_slow = 1.0, 1.0
        interference = 0.5 / pod_slow + 0.5 / res_slow
        value = config.weight_packing * packing + config.weight_interference * interference
        if best is None or value > best[0]:
            best = (value, pos, packing, pod_slow, res_slow)
    if best is None:
        need = f"{milli} milli-GPU" + (f" and {pod.gpu_memory_bytes} bytes" if pod.gpu_memory_bytes is not None else "")
        return _Raw(node.name, node.gpu_model, False, detail=f"no healthy GPU has {need} free")
    _, pos, packing, pod_slow, res_slow = best
    affinity = 1.0
    if pod.gang:
        affinity = 0.5 + 0.5 * (1.0 if pod.gang in node.gangs else (0.0 if gang_elsewhere else 0.5))
    g = node.gpus[pos]
    shared_with = len(g.residents)
    return _Raw(
        node.name,
        node.gpu_model,
        True,
        gpus=(g.index,),
        packing=packing,
        affinity=affinity,
        interference=0.5 / pod_slow + 0.5 / res_slow,
        slowdown=pod_slow,
        detail=f", shares GPU {g.index} with {shared_with} process(es), residents slowed x{res_slow:.2f}"
        if shared_with
        else f", GPU {g.index} unshared",
    )


def _evaluate_without_gpu(node: NodeState, *, config: ScoringConfig, fit: Fit) -> _Raw:
    """A pod without GPU: only its CPU/memory can fragment the node's GPUs (task types that no longer fit there)."""
    free_milli = node.free_milli
    topo = node.topology
    delta = _fragmentation_with(topo, free_milli, config, fit[1]) - _fragmentation_with(
        topo, free_milli, config, fit[0]
    )
    return _Raw(
        node.name,
        node.gpu_model,
        True,
        packing=_packing(delta, free_milli),
        affinity=1.0,
        detail=f", no GPU; leaves {delta / WHOLE_GPU_MILLI:+.2f} GPUs of fragmentation",
    )


def _scores_without_gpu(pod: PodRequest, config: ScoringConfig) -> bool:
    """Whether a pod without GPU is scored (by its CPU/memory) rather than given the neutral score everywhere."""
    return config.resources is not None and (pod.cpu_milli is not None or pod.memory_mib is not None)


_NO_GPU_DETAIL = "pod requests no GPU; neutral score"


def _neutral_without_gpu(name: str) -> NodeScore:
    return NodeScore(name, 50.0, True, False, 0.5, 0.5, 1.0, 0.5, (), 1.0, None, _NO_GPU_DETAIL)


def _is_stale(node: NodeState, config: ScoringConfig, now_seconds: float | None) -> bool:
    if node.observed_at_seconds is None:
        return True
    return now_seconds is not None and now_seconds - node.observed_at_seconds > config.staleness_seconds


def unknown_score(node: str, reason: str, config: ScoringConfig) -> NodeScore:
    """The neutral verdict on a node without usable state (never observed, stale)."""
    neutral = config.unknown_node_score / 100.0
    return NodeScore(
        node=node,
        score=config.unknown_node_score,
        feasible=True,
        known=False,
        packing=neutral,
        affinity=neutral,
        interference=neutral,
        jct=neutral,
        gpus=(),
        predicted_slowdown=1.0,
        predicted_jct_seconds=None,
        detail=reason,
    )


def duration_text(seconds: float) -> str:
    """A predicted duration as a reason string shows it: whole seconds up to 90 s, then minutes, then hours."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:,.1f} h"


def _stale_reason(node: NodeState, now_seconds: float | None) -> str:
    if node.observed_at_seconds is None:
        return "unknown: no telemetry from this node; neutral score"
    age = (now_seconds or 0.0) - node.observed_at_seconds
    return f"unknown: last snapshot {age:.0f}s old (stale); neutral score"


# --------------------------------------------------------------------------------------------------------------------
# Public API


def score_nodes(
    pod: PodRequest,
    nodes: Sequence[NodeState],
    *,
    config: ScoringConfig,
    predictors: Predictors | None = None,
    now_seconds: float | None = None,
) -> list[NodeScore]:
    """Score every node for `pod`, in the order given.

    `now_seconds` (Unix time) enables the staleness check; None treats every observed node as fresh (simulator).
    Infeasible nodes score 0 with the reason; stale ones get `config.unknown_node_score`.
    """
    predictors = predictors or _HEURISTIC
    k = pod.whole_gpus
    if k == 0 and not pod.is_share and not _scores_without_gpu(pod, config):
        return [_neutral_without_gpu(n.name) for n in nodes]
    raws = _evaluate_batch(pod, nodes, config=config, predictors=predictors, now_seconds=now_seconds)
    return _finish(pod, raws, config, predictors)


def _evaluate_batch(
    pod: PodRequest,
    nodes: Sequence[NodeState],
    *,
    config: ScoringConfig,
    predictors: Predictors,
    now_seconds: float | None,
) -> list[_Raw | NodeScore]:
    """Each node's verdict before the batch-relative JCT (memoised per node and request shape); stale → unknown."""
    k = pod.whole_gpus
    gang_elsewhere = bool(pod.gang) and any(pod.gang in n.gangs for n in nodes)
    usage_cache: dict[str, UsageProfile] = {}
    fallback_usage = default_usage(pod.share_milli or WHOLE_GPU_MILLI)

    raws: list[_Raw | NodeScore] = []
    key = _shape_id(
        (
            k,
            pod.share_milli,
            pod.gpu_memory_bytes,
            pod.workload,
            pod.gang,
            gang_elsewhere,
            pod.cpu_milli,
            pod.memory_mib,
            pod.gpu_models,
            config,
            predictors,
        )
    )
    resources = config.resources
    gpu_pod = k > 0 or pod.is_share
    oldest = None if now_seconds is None else now_seconds - config.staleness_seconds
    for node in nodes:
        observed = node.observed_at_seconds
        if observed is None or (oldest is not None and observed < oldest):
            raws.append(unknown_score(node.name, _stale_reason(node, now_seconds), config))
            continue
        memo = node.memo
        cached = memo.get(key)
        if cached is not None:
            raws.append(cached)
            continue
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        fit = _fit(node, pod, resources) if resources is not None else None
        short = _resources_short(node, pod)
        if short is not None:
            raw = memo[key] = _Raw(node.name, node.gpu_model, False, detail=short)
            raws.append(raw)
            continue
        if not gpu_pod:
            if fit is None:
                raws.append(_neutral_without_gpu(node.name))
            else:
                raw = memo[key] = _evaluate_without_gpu(node, config=config, fit=fit)
                raws.append(raw)
            continue
        usage = usage_cache.get(node.gpu_model)
        if usage is None:
            usage = predictors.usage.usage(pod.workload, node.gpu_model) or fallback_usage
            usage_cache[node.gpu_model] = usage
        if node.healthy_count == 0:
            raw = _Raw(node.name, node.gpu_model, False, detail="no healthy GPU")
        elif k:
            raw = _evaluate_whole(
                node,
                pod,
                k=k,
                config=config,
                predictors=predictors,
                usage=usage,
                gang_elsewhere=gang_elsewhere,
                fit=fit,
            )
        else:
            raw = _evaluate_share(
                node, pod, config=config, predictors=predictors, usage=usage, gang_elsewhere=gang_elsewhere, fit=fit
            )
        memo[key] = raw
        raws.append(raw)
    return raws


_shape_ids: dict[tuple[object, ...], int] = {}
_next_shape_id = count()


def _shape_id(shape: tuple[object, ...]) -> int:
    """A never-reused small int per request shape: the per-node memo then hashes an int, not an 8-tuple, per node."""
    shape_id = _shape_ids.get(shape)
    if shape_id is None:
        if len(_shape_ids) >= _SHAPE_LIMIT:
            _shape_ids.clear()  # ids are never reused, so entries under forgotten ids just age out of the memos
        shape_id = _shape_ids[shape] = next(_next_shape_id)
    return shape_id


def _jct_basis(
    pod: PodRequest, feasible: Sequence[_Raw], predictors: Predictors
) -> tuple[dict[str, float | None], dict[str, float], bool]:
    """Per GPU model of the feasible nodes: the predicted JCT (or None), the unit time the jct component compares
    (the JCT when every model has one, else 1 / relative speed), and whether JCTs were used. A pod without GPU: 1
    everywhere (the GPU model says nothing about its run time)."""
    gpu_count = max(pod.whole_gpus, 1)
    base_jct: dict[str, float | None] = {}
    inverse_speed: dict[str, float] = {}
    if pod.whole_gpus == 0 and not pod.is_share:
        return (
            dict.fromkeys((r.gpu_model for r in feasible), None),
            dict.fromkeys((r.gpu_model for r in feasible), 1.0),
            False,
        )
    for raw in feasible:
        model = raw.gpu_model
        if model not in base_jct:
            base_jct[model] = predictors.jct.jct_seconds(pod.workload, model, gpu_count)
            inverse_speed[model] = 1.0 / max(predictors.speed.relative_speed(model), 1e-6)
    use_jct = bool(base_jct) and all(v is not None for v in base_jct.values())
    unit_time = {m: (j or 0.0) if use_jct else inverse_speed[m] for m, j in base_jct.items()}
    return base_jct, unit_time, use_jct


def _finish(
    pod: PodRequest, raws: list[_Raw | NodeScore], config: ScoringConfig, predictors: Predictors
) -> list[NodeScore]:
    """Add the batch-relative JCT component and weight the components."""
    feasible = [raw for raw in raws if isinstance(raw, _Raw) and raw.feasible]
    base_jct, unit_time, use_jct = _jct_basis(pod, feasible, predictors)
    times = [raw.slowdown * unit_time[raw.gpu_model] for raw in feasible]
    best_time = min(times, default=1.0)
    w_p, w_a, w_i, w_j = config.weight_packing, config.weight_affinity, config.weight_interference, config.weight_jct
    w_total = w_p + w_a + w_i + w_j
    scale = 100.0 / w_total if w_total > 0 else 0.0
    jct_basis = "jct model" if use_jct else f"relative GPU speed; {predictors.jct.name} has no estimate"
    make = NodeScore._make
    out: list[NodeScore] = []
    append = out.append
    t_iter = iter(times)
    for raw in raws:
        if isinstance(raw, NodeScore):
            append(raw)
            continue
        if not raw.feasible:
            append(make((raw.name, 0.0, False, True, 0.0, 0.0, 0.0, 0.0, (), 1.0, None, raw.detail, raw.gpu_model, "")))
            continue
        t = next(t_iter)
        jct_ratio = best_time / t if t > 0 else 1.0
        if scale:
            total = scale * (w_p * raw.packing + w_a * raw.affinity + w_i * raw.interference + w_j * jct_ratio)
            total = 100.0 if total > 100.0 else (0.0 if total < 0.0 else total)
        else:
            total = 50.0
        jct_s = base_jct[raw.gpu_model]
        append(
            make(
                (
                    raw.name,
                    total,
                    True,
                    True,
                    raw.packing,
                    raw.affinity,
                    raw.interference,
                    jct_ratio,
                    raw.gpus,
                    raw.slowdown,
                    jct_s * raw.slowdown if jct_s is not None else None,
                    raw.detail,
                    raw.gpu_model,
                    jct_basis,
                )
            )
        )
    return out


def score_candidates(
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    *,
    config: ScoringConfig,
    predictors: Predictors | None = None,
    now_seconds: float | None = None,
) -> list[NodeScore]:
    """Like `score_nodes` for node names; a name without state gets the neutral unknown score, in place."""
    known = [nodes[n] for n in names if n in nodes]
    scored = iter(score_nodes(pod, known, config=config, predictors=predictors, now_seconds=now_seconds))
    return [
        next(scored) if n in nodes else unknown_score(n, "unknown: the advisor has no state for this node", config)
        for n in names
    ]


@dataclass(frozen=True, slots=True)
class ExtenderVerdict:
    """The extender's answer for a batch: integer 0..10 per candidate (in order) and how many of each outcome."""

    scores: list[int]
    scored: int
    infeasible: int
    unknown: int


def extender_priorities(
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    *,
    config: ScoringConfig,
    predictors: Predictors | None = None,
    now_seconds: float | None = None,
) -> ExtenderVerdict:
    """`extender_scores(score_candidates(...))` without building a `NodeScore` per node (the scheduler's hot path).

    Same numbers: only the totals are computed, since kube-scheduler reads nothing else.
    """
    predictors = predictors or _HEURISTIC
    unknown_int = min(10, max(0, round(config.unknown_node_score / 10.0)))
    if pod.whole_gpus == 0 and not pod.is_share and not _scores_without_gpu(pod, config):
        return ExtenderVerdict([5] * len(names), 0, 0, len(names))
    known = [nodes[n] for n in names if n in nodes]
    raws = _evaluate_batch(pod, known, config=config, predictors=predictors, now_seconds=now_seconds)
    totals = _extender_totals(pod, raws, config, predictors)
    best = max(totals, default=-1.0)
    it = iter(totals)
    scores: list[int] = []
    scored = infeasible = unknown = 0
    for name in names:
        value = next(it) if name in nodes else None
        if value is None:
            scores.append(unknown_int)
            unknown += 1
        else:
            scores.append(_extender_int(value, best, config.extender_span_points))
            if value >= 0.0:
                scored += 1
            elif value == _INFEASIBLE:
                infeasible += 1
            else:
                unknown += 1
    return ExtenderVerdict(scores, scored, infeasible, unknown)


def extender_node_scores(
    pod: PodRequest,
    nodes: Sequence[NodeState],
    *,
    config: ScoringConfig,
    predictors: Predictors | None = None,
    now_seconds: float | None = None,
) -> list[int]:
    """`extender_scores(score_nodes(...))` without building a `NodeScore` per node (the simulator's hot path)."""
    predictors = predictors or _HEURISTIC
    if pod.whole_gpus == 0 and not pod.is_share and not _scores_without_gpu(pod, config):
        return [5] * len(nodes)
    raws = _evaluate_batch(pod, nodes, config=config, predictors=predictors, now_seconds=now_seconds)
    totals = _extender_totals(pod, raws, config, predictors)
    best = max(totals, default=-1.0)
    span = config.extender_span_points
    return [_extender_int(v, best, span) for v in totals]


_INFEASIBLE = -1.0
_NEUTRAL_BASE = -2.0
"""`_extender_totals` codes: -1 for an infeasible node, -2 - n for a neutral/unknown verdict whose integer is n."""


def _extender_int(total: float, best: float, span_points: float) -> int:
    """The extender's integer for one `_extender_totals` value: 1..10 by distance to the batch's best feasible total
    (one step per `span_points` / 10), 0 if infeasible, the coded integer for a neutral/unknown verdict."""
    if total >= 0.0:
        return max(1, round(10.0 - 10.0 * (best - total) / span_points))
    return 0 if total == _INFEASIBLE else round(_NEUTRAL_BASE - total)


def _extender_totals(
    pod: PodRequest, raws: Sequence[_Raw | NodeScore], config: ScoringConfig, predictors: Predictors
) -> list[float]:
    """Each verdict's total 0..100 as `_finish` computes it, or a negative code (`_INFEASIBLE`, `_NEUTRAL_BASE`)."""
    feasible = [raw for raw in raws if isinstance(raw, _Raw) and raw.feasible]
    _, unit_time, _ = _jct_basis(pod, feasible, predictors)
    best_time = min((raw.slowdown * unit_time[raw.gpu_model] for raw in feasible), default=1.0)
    w_p, w_a, w_i, w_j = config.weight_packing, config.weight_affinity, config.weight_interference, config.weight_jct
    w_total = w_p + w_a + w_i + w_j
    scale = 100.0 / w_total if w_total > 0 else 0.0
    totals: list[float] = []
    for raw in raws:
        if isinstance(raw, NodeScore):
            totals.append(_NEUTRAL_BASE - min(10, max(0, round(raw.score / 10.0))))
        elif not raw.feasible:
            totals.append(_INFEASIBLE)
        elif scale:
            t = raw.slowdown * unit_time[raw.gpu_model]
            jct_ratio = best_time / t if t > 0 else 1.0
            total = scale * (w_p * raw.packing + w_a * raw.affinity + w_i * raw.interference + w_j * jct_ratio)
            totals.append(100.0 if total > 100.0 else (0.0 if total < 0.0 else total))
        else:
            totals.append(50.0)
    return totals


def allocate(
    pod: PodRequest,
    node: NodeState,
    *,
    config: ScoringConfig,
    predictors: Predictors | None = None,
    now_seconds: float | None = None,
) -> NodeScore:
    """The best GPUs on one node for `pod` (for a device plugin's GetPreferredAllocation); `gpus` empty if none fit."""
    return score_nodes(pod, [node], config=config, predictors=predictors, now_seconds=now_seconds)[0]


def filter_nodes(
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    *,
    config: ScoringConfig,
    now_seconds: float | None = None,
    predictors: Predictors | None = None,
    leaving: LeaveTimes | None = None,
    usable: Callable[[str], bool] | None = None,
    reservation: Reservation | None = None,
    claim_log: Sequence[Claim] = (),
    rank: tuple[int, float] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """Split `names` into nodes that can run `pod` and {node: reason} for those that cannot.

    A node fails when it lacks enough healthy free GPUs (or GPU memory, or room for the share), or — where known —
    free CPU or memory for the pod's own request, or (with `predictors` and `leaving`, `wait_verdicts`) when the
    pod would finish sooner by waiting for a faster GPU model (on a node `usable` does not rule out), or when it is
    held by `reservation` for a blocked pod and the pod would not finish before that starts (`reserved_verdicts`),
    or when its room is expected to go to pending pods ranked above the pod's `rank` (priority, then response ratio;
    `claim_log`, `yield_verdicts`); the wait reason first. Unknown or stale nodes pass unless
    `config.strict_staleness`.
    """
    k = pod.whole_gpus
    passed: list[str] = []
    failed: dict[str, str] = {}
    held: dict[str, str] = {}
    if predictors is not None and reservation is not None:
        held = reserved_verdicts(pod, sorted(reservation.nodes), nodes, reservation, predictors=predictors)
    if claim_log and rank is not None:
        held = yield_verdicts(pod, names, nodes, claim_log, rank=rank) | held
    wait: dict[str, str] = {}
    if predictors is not None and leaving is not None:
        # Room on a node held for another pod is not room for this one: it neither waits for it nor is offered it.
        wait = wait_verdicts(
            pod,
            [n for n in names if n not in held],
            nodes,
            config=config,
            predictors=predictors,
            leaving=leaving,
            now_seconds=now_seconds,
            usable=not_held(held, usable),
        )
    wait = held | wait
    for name in names:
        node = nodes.get(name)
        if node is None or _is_stale(node, config, now_seconds):
            if config.strict_staleness:
                failed[name] = "no fresh telemetry from this node (strict staleness)"
            else:
                passed.append(name)
            continue
        short = _resources_short(node, pod)
        if short is not None:
            failed[name] = short
            continue
        if k == 0 and not pod.is_share:
            passed.append(name)
            continue
        if node.healthy_count == 0:
            failed[name] = "no healthy GPU"
            continue
        if k:
            free = _whole_eligible_mask(node, pod).bit_count()
            if free < k:
                failed[name] = f"needs {k} free GPUs, has {free}"
                continue
        elif not any(
            g.healthy
            and g.allocated_milli + pod.share_milli <= WHOLE_GPU_MILLI
            and _memory_ok(g, pod.gpu_memory_bytes, whole=False)
            for g in node.gpus
        ):
            failed[name] = "no healthy GPU has room for the requested share"
            continue
        if name in wait:
            failed[name] = wait[name]
            continue
        passed.append(name)
    return passed, failed


ResidentEnd = Callable[[NodeState, Resident], float | None]
"""Predicted time (seconds, on the clock of `LeaveTimes.now_seconds`) at which `Resident` leaves its node; None when
there is no basis for it (no JCT estimate, no start time)."""


@dataclass(frozen=True, slots=True)
class LeaveTimes:
    """When residents leave, as the wait rule sees it: `end` of each resident, and `now_seconds`. A resident whose
    predicted end has passed (a job running late) gives no basis for when it ends: its GPU counts as never freeing.

    `cache_key` is what `end` depends on besides the node (the service's JCT predictor): with one, each node's GPU end
    times are memoised on its `NodeState` under it (a node's residents and their start times change only with a new
    snapshot, hence a new `NodeState`), so a filter call costs a lookup per node rather than a prediction per busy GPU.
    None: nothing is memoised (the simulator, whose node states are reused across time).
    """

    end: ResidentEnd
    now_seconds: float
    cache_key: object | None = None


class _GpuEnds(NamedTuple):
    """A node's busy healthy GPUs (allocated to some pod) and when each empties: `spans` (first, last) resident end
    per GPU (inf, inf when a resident's end is unknown or no pod is seen on it); `lasts` the last ends ascending;
    `first` the earliest first end (while it is in the future no GPU has an overdue resident)."""

    spans: tuple[tuple[float, float], ...]
    lasts: tuple[float, ...]
    first: float


def jct_leave_times(predictors: Predictors, now_seconds: float) -> LeaveTimes:
    """The service's `LeaveTimes`: a resident leaves at its pod's start plus its predicted JCT (its workload on the
    node's GPU model, on as many GPUs as it holds there); no end without a start time or an estimate. Memoised per node
    under the JCT predictor, which a model reload replaces."""

    held_on: dict[int, dict[str, int]] = {}  # per node (by identity, alive for the call): GPUs each pod holds

    def end(node: NodeState, resident: Resident) -> float | None:
        if resident.started_seconds is None or resident.workload is None:
            return None
        held = held_on.get(id(node))
        if held is None:
            held = held_on[id(node)] = {}
            for g in node.gpus:
                for pod in {r.pod for r in g.residents}:
                    held[pod] = held.get(pod, 0) + 1
        predicted = predictors.jct.jct_seconds(resident.workload, node.gpu_model, max(held.get(resident.pod, 0), 1))
        return None if predicted is None else resident.started_seconds + predicted

    return LeaveTimes(end, now_seconds, cache_key=predictors.jct)


def _gpu_ends(node: NodeState, leaving: LeaveTimes) -> _GpuEnds:
    key = leaving.cache_key
    if key is not None:
        memo = node.leave_memo.get(id(key))
        if memo is not None and memo[0] is key:
            return memo[1]
    spans = tuple(_gpu_span(node, g, leaving.end) for g in node.gpus if g.healthy and g.allocated_milli)
    ends = _GpuEnds(spans, tuple(sorted(last for _, last in spans)), min((f for f, _ in spans), default=math.inf))
    if key is not None:
        if len(node.leave_memo) > 3:  # predictors replaced by a model reload: the old entries are dead
            node.leave_memo.clear()
        node.leave_memo[id(key)] = (key, ends)
    return ends


def _gpu_span(node: NodeState, gpu: GpuState, end: ResidentEnd) -> tuple[float, float]:
    """(first, last) end of the pods on a busy GPU, (inf, inf) if no pod is seen on it or an end is unknown."""
    first, last = math.inf, -math.inf
    for r in gpu.residents:
        if r.gpu_milli or r.workload or r.started_seconds is not None:  # a pod, not a bare host process
            at = end(node, r)
            if at is None:
                return math.inf, math.inf
            first, last = min(first, at), max(last, at)
    return (first, last) if last > -math.inf else (math.inf, math.inf)


def room_seconds(node: NodeState, pod: PodRequest, leaving: LeaveTimes) -> float:
    """Predicted seconds until `node` has room for `pod` (0 now; inf when it never will as far as is known): a whole-GPU
    request waits for its k-th healthy GPU to empty, a share for the first GPU with room or, failing that, the first
    GPU to empty (shares freed one by one are not counted: the estimate errs toward waiting less)."""
    if _has_room_now(node, pod):
        return 0.0
    need = max(pod.whole_gpus, 1) - (node.free_gpus if pod.whole_gpus else 0)
    ends = _gpu_ends(node, leaving)
    if len(ends.lasts) < need:
        return math.inf
    now = leaving.now_seconds
    if ends.first > now:  # nobody overdue: the k-th GPU to empty is the k-th last end
        return ends.lasts[need - 1] - now
    times = sorted(last - now if first > now else math.inf for first, last in ends.spans)
    return times[need - 1]


def _has_room_now(node: NodeState, pod: PodRequest) -> bool:
    """k healthy GPUs with nothing allocated, or for a share a healthy GPU with its `share_milli` free (any healthy
    GPU for a memory-only share)."""
    if pod.whole_gpus:
        return node.free_gpus >= pod.whole_gpus
    if pod.share_milli:
        return max(node.free_milli, default=0) >= pod.share_milli
    return node.healthy_count > 0


def wait_verdicts(
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    *,
    config: ScoringConfig,
    predictors: Predictors,
    leaving: LeaveTimes,
    now_seconds: float | None = None,
    usable: Callable[[str], bool] | None = None,
) -> dict[str, str]:
    """{node: reason} for the candidates `names` that `pod` should pass over to wait for a faster GPU model (module
    docstring); room is looked for on every fresh node of `nodes`, not only the candidates, but a node that has room
    now and is not a candidate is not counted on, nor one that `usable` (the pod's node selector and affinity, where
    known) rules out."""
    if config.wait_slack is None or pod.gang is not None or (not pod.whole_gpus and not pod.is_share):
        return {}
    offered = set(names)
    # A node with room now that is not offered is closed to this pod for a reason the advisor does not see (a node
    # selector or affinity, a taint, CPU or memory): counting on it could keep the pod pending for ever.
    fresh = [
        n
        for name, n in nodes.items()  # by key: one state may stand for several alike nodes (the simulator's)
        if n.gpu_model
        and not _is_stale(n, config, now_seconds)
        and (name in offered or (not _has_room_now(n, pod) and (usable is None or usable(name))))
    ]
    count = max(pod.whole_gpus, 1)
    run: dict[str, float] = {}
    for model in {n.gpu_model for n in fresh}:
        seconds = predictors.jct.jct_seconds(pod.workload, model, count)
        if seconds is None or not seconds > 0:
            return {}
        run[model] = seconds
    candidates = {nodes[n].gpu_model for n in names if n in nodes and nodes[n].gpu_model in run}
    if len(run) < 2 or not candidates:
        return {}
    quickest = min(run.values())
    slack = config.wait_slack
    if all(run[m] <= slack * quickest for m in candidates):
        return {}  # no candidate is slow enough that any wait could pay
    worst = max(run[m] for m in candidates)
    room: dict[str, float] = {}
    for node in fresh:
        model = node.gpu_model
        if run[model] * slack >= worst or room.get(model, math.inf) == 0:
            continue
        room[model] = min(room.get(model, math.inf), room_seconds(node, pod, leaving))
    finish = {m: room[m] + run[m] for m in room if math.isfinite(room[m])}
    if not finish:
        return {}
    best = min(finish, key=lambda m: finish[m])
    verdicts: dict[str, str] = {}
    for name in names:
        state = nodes.get(name)
        if state is None or state.gpu_model not in run or _is_stale(state, config, now_seconds):
            continue
        here = run[state.gpu_model]
        if here > slack * finish[best]:
            here_text = f"~{duration_text(here)} on this {state.gpu_model}"
            if room[best] < 1.0:
                verdicts[name] = (
                    f"passed over: {best} has room now and finishes it in ~{duration_text(finish[best])} vs {here_text}"
                )
            else:
                verdicts[name] = (
                    f"passed over to wait for room on {best} in ~{duration_text(room[best])}: done in "
                    f"~{duration_text(finish[best])} from now vs {here_text}"
                )
    return verdicts


# --------------------------------------------------------------------------------------------------------------------
# Holding nodes for a blocked pending pod (EASY backfilling)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held for `pod`, a pending pod (or the members of a gang) that has no room now: `nodes` of `gpu_model`
    are where it is predicted to start first, `start_seconds` from now. Other pods may use them only if they are
    predicted to finish before that (`reserved_verdicts`)."""

    pod: str
    gpu_model: str
    nodes: frozenset[str]
    start_seconds: float


def _slots_in(node: NodeState, pod: PodRequest, leaving: LeaveTimes) -> list[float]:
    """Predicted seconds until `node` has room for one, two, … pods like `pod` (ascending, inf where never): the j-th
    whole-GPU request waits for the (j·k)-th healthy GPU to empty; a share counts one slot (`room_seconds`)."""
    if not pod.whole_gpus:
        return [room_seconds(node, pod, leaving)]
    k = pod.whole_gpus
    now = leaving.now_seconds
    ends = _gpu_ends(node, leaving)
    if ends.first > now:
        busy = [last - now for last in ends.lasts]
    else:
        busy = sorted(last - now if first > now else math.inf for first, last in ends.spans)
    times = [0.0] * node.free_gpus + busy
    return times[k - 1 :: k]


def reserve(
    pod: PodRequest,
    nodes: Mapping[str, NodeState],
    *,
    members: int = 1,
    config: ScoringConfig,
    predictors: Predictors,
    leaving: LeaveTimes,
    now_seconds: float | None = None,
    usable: Callable[[str], bool] | None = None,
) -> Reservation | None:
    """Where and when `members` pods like `pod` (1, or the pending members of its gang) are predicted to start
    first: per GPU model, the `members`-th soonest slot over its fresh nodes (`_slots_in`, one node may give several);
    the model on which the pod would finish first (its JCT estimate; without one, the soonest start). None when no
    model is predicted to ever have room (ends unknown) — nothing is held then."""
    slots: dict[str, list[tuple[float, str]]] = {}
    for name, node in nodes.items():  # by key: one state may stand for several alike nodes (the simulator's)
        if not node.gpu_model or _is_stale(node, config, now_seconds) or (usable is not None and not usable(name)):
            continue
        slots.setdefault(node.gpu_model, []).extend((t, name) for t in _slots_in(node, pod, leaving))
    best: tuple[float, float, str, frozenset[str]] | None = None
    for model, found in slots.items():
        if len(found) < members:
            continue
        first = sorted(found)[:members]
        start = first[-1][0]
        if not math.isfinite(start):
            continue
        run = predictors.jct.jct_seconds(pod.workload, model, max(pod.whole_gpus, 1) * members)
        finish = start + run if run is not None and run > 0 else start
        if best is None or (finish, start) < best[:2]:
            best = (finish, start, model, frozenset(name for _, name in first))
    if best is None:
        return None
    return Reservation(pod=pod.name, gpu_model=best[2], nodes=best[3], start_seconds=best[1])


def not_held(held: Mapping[str, str], usable: Callable[[str], bool] | None) -> Callable[[str], bool] | None:
    """`usable` less the nodes in `held` (`reserved_verdicts` over a reservation's nodes)."""
    if not held:
        return usable
    return lambda name: name not in held and (usable is None or usable(name))


def reserved_verdicts(
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    reservation: Reservation,
    *,
    predictors: Predictors,
) -> dict[str, str]:
    """{node: reason} for the candidates held by `reservation` on which `pod` would still run when the held pod is
    predicted to start (a pod without a JCT estimate counts as running past it)."""
    verdicts: dict[str, str] = {}
    for name in names:
        state = nodes.get(name)
        if name not in reservation.nodes or state is None:
            continue
        run = predictors.jct.jct_seconds(pod.workload, state.gpu_model, max(pod.whole_gpus, 1))
        if run is None or run > reservation.start_seconds:
            why = "this pod has no JCT estimate" if run is None else f"this pod would run ~{run:.0f} s"
            verdicts[name] = (
                f"held for {reservation.pod}, pending and predicted to start here in "
                f"~{reservation.start_seconds:.0f} s; {why}"
            )
    return verdicts


def fits_now(
    pod: PodRequest,
    nodes: Mapping[str, NodeState],
    *,
    members: int = 1,
    config: ScoringConfig,
    now_seconds: float | None = None,
    usable: Callable[[str], bool] | None = None,
) -> bool:
    """Whether `members` pods like `pod` (1, or a gang's) have room now on the fresh nodes that `usable` allows (GPUs
    only: CPU and memory are not counted)."""
    room = 0
    for name, n in nodes.items():
        if not _has_room_now(n, pod) or _is_stale(n, config, now_seconds) or (usable is not None and not usable(name)):
            continue
        room += n.free_gpus // pod.whole_gpus if pod.whole_gpus else 1
        if room >= members:
            return True
    return False


# --------------------------------------------------------------------------------------------------------------------
# Shortest first: pending pods that waiting has slowed most take the room first (highest response ratio next)


def response_ratio(waited_seconds: float, run_seconds: float) -> float:
    """(wait + run) / run: the slowdown a pending pod ends with if it starts now. Highest first (HRRN, Brinch Hansen
    1971) puts short pods first, as shortest-job-first does, and lets every pod's ratio grow while it waits, so a
    long pod is not passed over for ever."""
    return (max(waited_seconds, 0.0) + run_seconds) / run_seconds


@dataclass(frozen=True, slots=True)
class Claimant:
    """A pending pod that may take room ahead of others: its request (never a gang member's), how long it has waited,
    its predicted run time per GPU model (`runs`, models without an estimate left out; not empty), the nodes its node
    selector and affinity allow (None: any), and its priority. `ratio` is its `response_ratio` on its quickest model;
    pods go by `rank`: higher priority first, then higher ratio."""

    pod: str
    request: PodRequest
    waited_seconds: float
    runs: Mapping[str, float]
    usable: Callable[[str], bool] | None = None
    priority: int = 0
    run_seconds: float = field(init=False)
    ratio: float = field(init=False)

    def __post_init__(self) -> None:
        quickest = min(self.runs.values())
        object.__setattr__(self, "run_seconds", quickest)
        object.__setattr__(self, "ratio", response_ratio(self.waited_seconds, quickest))

    @property
    def rank(self) -> tuple[int, float]:
        return (self.priority, self.ratio)


@dataclass(frozen=True, slots=True)
class Claim:
    """Room on `node` that `claimant` is expected to take (`claims`)."""

    claimant: Claimant
    node: str


class _Room:
    """Free milli-GPU per GPU of one node (0 for an unhealthy GPU) while claims are laid on it."""

    __slots__ = ("milli",)

    def __init__(self, node: NodeState) -> None:
        self.milli = list(node.free_milli)

    def left_after(self, pod: PodRequest) -> int | None:
        """The milli-GPU left on the node once `pod` takes its room (best fit: less is tighter), None if it does not
        fit. A memory-only share takes no SM room."""
        if pod.whole_gpus:
            free = [i for i, m in enumerate(self.milli) if m == WHOLE_GPU_MILLI]
            return sum(self.milli) - pod.whole_gpus * WHOLE_GPU_MILLI if len(free) >= pod.whole_gpus else None
        fits = [m for m in self.milli if m >= max(pod.share_milli, 1)]
        return sum(self.milli) - pod.share_milli if fits else None

    def take(self, pod: PodRequest) -> None:
        if pod.whole_gpus:
            free = [i for i, m in enumerate(self.milli) if m == WHOLE_GPU_MILLI][: pod.whole_gpus]
            for i in free:
                self.milli[i] = 0
            return
        # A share goes to the fullest GPU it fits on (as the scorer prefers), leaving whole GPUs whole.
        gpu = min((m, i) for i, m in enumerate(self.milli) if m >= max(pod.share_milli, 1))[1]
        self.milli[gpu] -= pod.share_milli


CLAIM_SCAN = 256
"""At most this many pending pods, in response-ratio order, are laid on the nodes by `claims` (each costs a pass over
the GPU models and the nodes with room); those after them take no room ahead of anyone."""


def claims(
    claimants: Sequence[Claimant],
    nodes: Mapping[str, NodeState],
    *,
    config: ScoringConfig,
    now_seconds: float | None = None,
) -> list[Claim]:
    """Where the pending pods, taken by rank (higher priority, then higher response ratio, first; `claimants` order
    breaks ties), are expected to go: each takes room on the GPU model where it is predicted to run fastest among those
    with room for it and within `wait_slack` of its quickest (a slower model it would pass over, waiting), on the node
    there it fits most tightly (least free milli-GPU; then by name). The log of those that found room; a pod with none
    takes nothing. Fresh nodes only; CPU and memory are checked against each node's free amounts as known, not
    decremented by claims."""
    ordered = sorted(claimants, key=lambda c: (-c.priority, -c.ratio))[:CLAIM_SCAN]
    if not ordered:
        return []
    by_model: dict[str, list[tuple[int, str]]] = {}  # per GPU model, (free milli-GPU, node) ascending
    for name, node in nodes.items():  # by key: one state may stand for several alike nodes (the simulator's)
        free = sum(node.free_milli)
        if free and node.gpu_model and not _is_stale(node, config, now_seconds):
            by_model.setdefault(node.gpu_model, []).append((free, name))
    for index in by_model.values():
        index.sort()
    rooms: dict[str, _Room] = {}  # the nodes claims were tried on, as the claims leave them

    def room(name: str) -> _Room:
        found = rooms.get(name)
        if found is None:
            found = rooms[name] = _Room(nodes[name])
        return found

    log: list[Claim] = []
    full: set[tuple[object, ...]] = set()  # shapes that found no room: room only shrinks, so later ones neither
    for claimant in ordered:
        pod = claimant.request
        runs = claimant.runs
        limit = claimant.run_seconds * (config.wait_slack if config.wait_slack is not None else math.inf)
        models = sorted((m for m in by_model if m in runs and runs[m] <= limit), key=lambda m: (runs[m], m))
        shape = (pod.whole_gpus, pod.share_milli, pod.cpu_milli, pod.memory_mib, *models)
        if claimant.usable is None and shape in full:
            continue
        need = pod.whole_gpus * WHOLE_GPU_MILLI or max(pod.share_milli, 1)
        for model in models:
            index = by_model[model]
            at = bisect_left(index, (need, ""))
            found = next(
                (
                    i
                    for i in range(at, len(index))
                    if room(index[i][1]).left_after(pod) is not None
                    and (claimant.usable is None or claimant.usable(index[i][1]))
                    and _resources_short(nodes[index[i][1]], pod) is None
                ),
                None,
            )
            if found is not None:
                _, taken = index.pop(found)
                left = room(taken)
                left.take(pod)
                if sum(left.milli):
                    insort(index, (sum(left.milli), taken))
                log.append(Claim(claimant, taken))
                break
        else:
            if claimant.usable is None:
                full.add(shape)
    return log


def yield_verdicts(
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    log: Sequence[Claim],
    *,
    rank: tuple[int, float],
) -> dict[str, str]:
    """{node: reason} for the candidates on which `pod` (its priority and response ratio: `rank`) has room now but not
    once the pending pods ranked above it take theirs (the first claims of `log`, `claims`). A gang member never
    yields."""
    if pod.gang is not None:
        return {}
    rooms: dict[str, _Room] = {}
    last: dict[str, Claim] = {}
    for claim in log:
        if not claim.claimant.rank > rank:
            break  # the log is in rank order
        if claim.claimant.pod == pod.name:
            continue
        state = nodes.get(claim.node)
        if state is None:
            continue
        room = rooms.get(claim.node)
        if room is None:
            room = rooms[claim.node] = _Room(state)
        room.take(claim.claimant.request)
        last[claim.node] = claim
    verdicts: dict[str, str] = {}
    for name in names:
        room = rooms.get(name)
        state = nodes.get(name)
        if room is None or state is None or room.left_after(pod) is not None or _Room(state).left_after(pod) is None:
            continue
        c = last[name].claimant
        why = (
            f"priority {c.priority} vs this pod's {rank[0]}"
            if c.priority > rank[0]
            else f"response ratio {c.ratio:.2f} vs this pod's {rank[1]:.2f}"
        )
        verdicts[name] = (
            f"room kept for {c.pod}, pending ~{c.waited_seconds:.0f} s for a ~{c.run_seconds:.0f} s run: {why} "
            "(shortest first)"
        )
    return verdicts
