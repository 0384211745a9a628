"""Placement scoring: how good each candidate node is for one GPU pod, and which GPUs it should get there.

Pure and batched: `score_nodes` takes the pod's request and the state of all candidate nodes and returns one
`NodeScore` per node (0..100, with its components, the chosen GPU indices, the predicted slowdown/JCT and a one-line
reason). No HTTP, no pydantic, no I/O — the service, `/v1/allocate`, the extender filter and the simulator all call
these functions directly.

Components (each a ratio 0..1; the score is their weighted mean × 100):

* packing — fragmentation gradient (FGD, ATC'23; the math is `advisor.placement.fragmentation`): Δ = how much placing
  the pod increases the node's expected fragmentation, i.e. the free GPU capacity (fractional shares included) that a
  task drawn from the target workload `ScoringConfig.task_mix` could not use. A task of 1 < k ≤ largest NVLink island
  GPUs only counts as runnable inside one island. `packing = (1 − b) / (1 + exp(Δ in GPUs)) + b × (1 − free GPU
  capacity left / capacity)`, b = `ScoringConfig.packing_best_fit_share` (0.2; the packing profile 0.005): a pod that
  fills a gap scores high, one that breaks up a whole node, island or GPU low, and the best-fit share breaks ties
  between equal fragmentation changes toward the fuller node. With `ScoringConfig.packing_gradient_steps` (the
  packing profile: 100) the sigmoid is floored to that many steps first, as the FGD authors' integer score is.
  A GPU share is scored on every GPU it fits on (the GPU with the best packing + interference wins). Where a node's
  free CPU / memory is known and the task mix gives CPU / memory, task types that no longer fit there count all its
  free GPUs as fragments (FGD's full definition; the pod's own CPU/memory is taken off first), and a pod without GPU
  is scored by this component alone; otherwise the scores are exactly the GPU-only ones.
* affinity — for k ≥ 2 GPUs the best free k-set by link level (NVLINK > PCIE_SWITCH > PCIE_HOSTBRIDGE > NUMA >
  SYSTEM): `1 − mean pairwise link rank / 4`. For members of a gang, half of it is gang locality: 1 on a node that
  already runs a member, 0 on another node when members run elsewhere.
* interference — 0.5 / pod slowdown + 0.5 / worst resident slowdown on the chosen GPUs (1 when they are unshared).
* jct — predicted completion time on this node's GPU model, slowdown included, relative to the best candidate
  (`best / this`). Without a JCT estimate the ratio of `slowdown / relative GPU speed` is used (heterogeneity only).

Nodes whose last snapshot is older than `ScoringConfig.staleness_seconds` are scored as unknown
(`unknown_node_score`, neutral by default) with that reason; so are nodes the advisor never heard of.
kube-scheduler's integer 0..10 comes from `advisor.placement.extender`; the filter's rules are
`advisor.placement.filter`. Verdicts are memoised per node state and request shape (`NodeMemo`; the shape is what the
GPU choice depends on, not the pod's CPU/memory); shares new to the memo are evaluated on all candidates at once
(`advisor.placement.columnar`, the same numbers).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import count

from advisor.gpus import normalize_gpu_model
from advisor.placement.columnar import NO_SHARE, ShareChoice, share_choices
from advisor.placement.config import ScoringConfig
from advisor.placement.fragmentation import MixResources
from advisor.placement.gpuset import fragmentation_with, packing_of, take_milli, whole_plan
from advisor.placement.memo import NodeMemo
from advisor.placement.mig import mig_verdict
from advisor.placement.types import (
    WHOLE_GPU_MILLI,
    GpuState,
    NodeScore,
    NodeState,
    PodRequest,
    taken_as_unknown,
)
from advisor.predictors import Predictors, UsageProfile, default_usage

_MEMO_LIMIT = 16
_SHAPE_LIMIT = 4096
HEURISTIC_PREDICTORS = Predictors.heuristic()
_VERDICTS: NodeMemo[dict[int | tuple[int, tuple[int, int]], RawVerdict]] = NodeMemo()
"""Each node state's verdicts by request shape (`_shape_id`: what the GPU choice depends on, not the pod's CPU/memory),
with the node's CPU/memory fit index after the pod where that is known; at most `_MEMO_LIMIT` per node."""


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


def _cpu_fit(node: NodeState, fit_after: tuple[int, int] | None) -> int | None:
    """The CPU part of the node's fit index after the pod, or None where its free CPU is not known."""
    return None if fit_after is None or node.cpu_free_milli is None else fit_after[0]


def resources_short(node: NodeState, pod: PodRequest) -> str | None:
    """Why the node cannot hold the pod's own request — a GPU model the pod does not accept, too little free CPU or
    memory (where known) — or None when it can."""
    if pod.gpu_models and normalize_gpu_model(node.gpu_model) not in pod.gpu_models:
        return f"GPU model {node.gpu_model or 'unknown'} is not one the pod accepts ({', '.join(pod.gpu_models)})"
    if pod.cpu_milli is not None and node.cpu_free_milli is not None and pod.cpu_milli > node.cpu_free_milli:
        return f"needs {pod.cpu_milli} milli-CPU, has {node.cpu_free_milli} free"
    if pod.memory_mib is not None and node.memory_free_mib is not None and pod.memory_mib > node.memory_free_mib:
        return f"needs {pod.memory_mib} MiB of memory, has {node.memory_free_mib} free"
    return None


@dataclass(slots=True)
class RawVerdict:
    """A node's verdict before the batch-relative JCT; names the node rather than holding it (a memoised verdict
    that held its node would keep it alive, and with it its memo entry)."""

    name: str
    gpu_model: str
    feasible: bool
    gpus: tuple[int, ...] = ()
    packing: float = 0.0
    affinity: float = 0.0
    interference: float = 1.0
    slowdown: float = 1.0
    detail: str = ""
    shared_with: int = -1
    resident_slowdown: float = 1.0

    def explanation(self) -> str:
        """`detail`, or for a placed share the sentence on its GPU, written only when asked for (the extender never
        reads it, and a cold call makes one verdict per candidate)."""
        if self.shared_with < 0:
            return self.detail
        gpu, residents = self.gpus[0], self.shared_with
        if residents:
            slowed = f"residents slowed x{self.resident_slowdown:.2f}"
            self.detail = f", shares GPU {gpu} with {residents} process(es), {slowed}"
        else:
            self.detail = f", GPU {gpu} unshared"
        self.shared_with = -1  # written once: a memoised verdict explains itself from now on without formatting
        return self.detail


def memory_ok(gpu: GpuState, need_bytes: int | None, *, whole: bool) -> bool:
    if need_bytes is None:
        return True
    if whole:
        return gpu.memory_total_bytes <= 0 or gpu.memory_total_bytes >= need_bytes
    free = gpu.memory_free_bytes
    return free is None or free >= need_bytes


def whole_eligible_mask(node: NodeState, pod: PodRequest) -> int:
    if pod.gpu_memory_bytes is None:
        return node.free_mask
    mask = 0
    for pos, g in enumerate(node.gpus):
        if node.free_mask >> pos & 1 and memory_ok(g, pod.gpu_memory_bytes, whole=True):
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
) -> RawVerdict:
    eligible = whole_eligible_mask(node, pod)
    free = eligible.bit_count()
    if free < k:
        what = "free GPUs" if eligible == node.free_mask else "free GPUs with enough memory"
        detail = f"needs {k} {what}, has {free}{taken_as_unknown(node)}"
        return RawVerdict(node.name, node.gpu_model, False, detail=detail)
    plan = whole_plan(node.topology, node.free_milli, eligible, k, config)
    if plan is None:
        detail = f"needs {k} free GPUs, has {free}{taken_as_unknown(node)}"
        return RawVerdict(node.name, node.gpu_model, False, detail=detail)
    packing = plan.packing
    if fit is not None:
        after = take_milli(node.free_milli, plan.positions, WHOLE_GPU_MILLI)
        before_f = fragmentation_with(node.topology, node.free_milli, config, fit[0])
        packing = packing_of(
            fragmentation_with(node.topology, after, config, fit[1]) - before_f,
            after,
            config,
            config.cpu_balance_penalty(after, _cpu_fit(node, fit[1])),
        )
    affinity = plan.topology_affinity
    if pod.gang:
        affinity = 0.5 * affinity + 0.5 * (1.0 if pod.gang in node.gangs else (0.0 if gang_elsewhere else 0.5))
    gpus = node.gpus
    pod_slow, res_slow = 1.0, 1.0
    for pos in plan.positions:
        residents = gpus[pos].residents
        if residents:
            p, r = predictors.interference.slowdowns(
                gpus[pos].model, pod.workload, usage, residents, sharing=node.sharing_mode
            )
            pod_slow = max(pod_slow, p)
            res_slow = max(res_slow, r)
    indices = plan.positions if node.natural_indices else tuple(gpus[p].index for p in plan.positions)
    return RawVerdict(
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
) -> RawVerdict:
    milli = pod.share_milli
    topo = node.topology
    best: tuple[float, int, float, float, float] | None = None  # (value, pos, packing, pod_slow, res_slow)
    free_milli = node.free_milli
    fit_before, fit_after = fit if fit is not None else (None, None)
    before = fragmentation_with(topo, free_milli, config, fit_before)
    gpus = node.gpus
    cpu_fit = _cpu_fit(node, fit_after)
    for pos in node.share_positions:
        g = gpus[pos]
        if g.allocated_milli + milli > WHOLE_GPU_MILLI:
            continue
        if not memory_ok(g, pod.gpu_memory_bytes, whole=False):
            continue
        after_milli = take_milli(free_milli, (pos,), milli)
        packing = packing_of(
            fragmentation_with(topo, after_milli, config, fit_after) - before,
            after_milli,
            config,
            config.cpu_balance_penalty(after_milli, cpu_fit),
        )
        if g.residents:
            pod_slow, res_slow = predictors.interference.slowdowns(
                g.model, pod.workload, usage, g.residents, sharing=node.sharing_mode
            )
        else:
            pod_slow, res_slow = 1.0, 1.0
        interference = 0.5 / pod_slow + 0.5 / res_slow
        value = config.weight_packing * packing + config.weight_interference * interference
        if best is None or value > best[0]:
            best = (value, pos, packing, pod_slow, res_slow)
    if best is None:
        return _share_verdict(node, pod, NO_SHARE, gang_elsewhere=gang_elsewhere)
    _, pos, packing, pod_slow, res_slow = best
    return _share_verdict(node, pod, (pos, packing, pod_slow, res_slow), gang_elsewhere=gang_elsewhere)


def _share_verdict(node: NodeState, pod: PodRequest, choice: ShareChoice, *, gang_elsewhere: bool) -> RawVerdict:
    """A share's verdict once its GPU is chosen (by either path; position -1: none fits)."""
    pos, packing, pod_slow, res_slow = choice
    if pos < 0:
        milli = pod.share_milli
        need = f"{milli} milli-GPU" + (f" and {pod.gpu_memory_bytes} bytes" if pod.gpu_memory_bytes is not None else "")
        detail = f"no healthy GPU has {need} free{taken_as_unknown(node)}"
        return RawVerdict(node.name, node.gpu_model, False, detail=detail)
    affinity = 1.0
    if pod.gang:
        affinity = 0.5 + 0.5 * (1.0 if pod.gang in node.gangs else (0.0 if gang_elsewhere else 0.5))
    g = node.gpus[pos]
    # positional, the explanation left to `RawVerdict.explanation`: one of these per candidate node on a cold call
    interference = 0.5 / pod_slow + 0.5 / res_slow
    return RawVerdict(
        node.name,
        node.gpu_model,
        True,
        (g.index,),
        packing,
        affinity,
        interference,
        pod_slow,
        "",
        len(g.residents),
        res_slow,
    )


def _evaluate_without_gpu(node: NodeState, *, config: ScoringConfig, fit: Fit) -> RawVerdict:
    """A pod without GPU: only its CPU/memory can fragment the node's GPUs (task types that no longer fit there)."""
    free_milli = node.free_milli
    topo = node.topology
    delta = fragmentation_with(topo, free_milli, config, fit[1]) - fragmentation_with(topo, free_milli, config, fit[0])
    return RawVerdict(
        node.name,
        node.gpu_model,
        True,
        packing=packing_of(
            delta,
            free_milli,
            config,
            config.cpu_balance_penalty(free_milli, _cpu_fit(node, fit[1])),
        ),
        affinity=1.0,
        detail=f", no GPU; leaves {delta / WHOLE_GPU_MILLI:+.2f} GPUs of fragmentation",
    )


def scores_without_gpu(pod: PodRequest, config: ScoringConfig) -> bool:
    """Whether a pod without GPU is scored (by its CPU/memory) rather than given the neutral score everywhere."""
    return config.resources is not None and (pod.cpu_milli is not None or pod.memory_mib is not None)


_NO_GPU_DETAIL = "pod requests no GPU; neutral score"


def _neutral_without_gpu(name: str) -> NodeScore:
    return NodeScore(name, 50.0, True, False, 0.5, 0.5, 1.0, 0.5, (), 1.0, None, _NO_GPU_DETAIL)


def is_stale(node: NodeState, config: ScoringConfig, now_seconds: float | None) -> bool:
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
    predictors = predictors or HEURISTIC_PREDICTORS
    k = pod.whole_gpus
    if k == 0 and not pod.is_share and not pod.mig and not scores_without_gpu(pod, config):
        return [_neutral_without_gpu(n.name) for n in nodes]
    raws = evaluate_batch(pod, nodes, config=config, predictors=predictors, now_seconds=now_seconds)
    return _finish(pod, raws, config, predictors)


def evaluate_batch(
    pod: PodRequest,
    nodes: Sequence[NodeState],
    *,
    config: ScoringConfig,
    predictors: Predictors,
    now_seconds: float | None,
) -> list[RawVerdict | NodeScore]:
    """Each node's verdict before the batch-relative JCT (memoised per node and request shape); stale → unknown."""
    k = pod.whole_gpus
    gang_elsewhere = bool(pod.gang) and any(pod.gang in n.gangs for n in nodes)
    usage_cache: dict[str, UsageProfile] = {}
    fallback_usage = default_usage(pod.share_milli or WHOLE_GPU_MILLI)

    raws: list[RawVerdict | NodeScore] = []
    deferred: list[_Deferred] = []
    # What a node's GPU choice depends on; the pod's CPU/memory enter only through the node's fit index after it
    # (below) and the shortfall check, so a new CPU/memory request is not a new shape. The workload matters only
    # through the interference with residents: whole GPUs on a node whose free GPUs have none do not depend on it.
    shape = (k, pod.share_milli, pod.gpu_memory_bytes, pod.gang, gang_elsewhere, pod.gpu_models, config, predictors)
    key = _shape_id((*shape, pod.workload))
    key_any_workload = _shape_id((*shape, _ANY_WORKLOAD)) if k > 0 or not pod.is_share else key
    gpu_pod = k > 0 or pod.is_share
    own_resources = pod.cpu_milli is not None or pod.memory_mib is not None
    oldest = None if now_seconds is None else now_seconds - config.staleness_seconds
    for node in nodes:
        observed = node.observed_at_seconds
        if observed is None or (oldest is not None and observed < oldest):
            raws.append(unknown_score(node.name, _stale_reason(node, now_seconds), config))
            continue
        if own_resources and (refused := _resources_refusal(node, pod)) is not None:
            raws.append(refused)
            continue
        if pod.mig:  # MIG instances, not GPUs: placed on a free instance of each profile asked (`placement.mig`)
            feasible, gpus, packing, detail = mig_verdict(node.mig_instances, dict(pod.mig))
            raws.append(
                RawVerdict(node.name, node.gpu_model, feasible, gpus, packing, 1.0 if feasible else 0.0, detail=detail)
            )
            continue
        node_config = config.for_model(node.gpu_model)  # packing's task mix as seen from this GPU model
        resources = node_config.resources
        fit = _fit(node, pod, resources) if resources is not None else None
        base = key if node.free_residents else key_any_workload
        node_key: int | tuple[int, tuple[int, int]] = base if fit is None else (base, fit[1])
        memo = _VERDICTS.get(node)
        if memo is None:
            memo = _VERDICTS.put(node, {})
        cached = memo.get(node_key)
        if cached is not None:
            raws.append(cached)
            continue
        if len(memo) >= _MEMO_LIMIT:
            # The oldest shape goes: one eviction per new shape. Clearing the whole memo instead frees every node's
            # verdicts in the same call (each node fills up with the same shapes), a burst that set the p99.
            del memo[next(iter(memo))]
        short = _model_short(node, pod)
        if short is not None:
            raw = memo[node_key] = RawVerdict(node.name, node.gpu_model, False, detail=short)
            raws.append(raw)
            continue
        if not gpu_pod:
            if fit is None:
                raws.append(_neutral_without_gpu(node.name))
            else:
                raw = memo[node_key] = _evaluate_without_gpu(node, config=node_config, fit=fit)
                raws.append(raw)
            continue
        usage = usage_cache.get(node.gpu_model)
        if usage is None:
            usage = predictors.usage.usage(pod.workload, node.gpu_model) or fallback_usage
            usage_cache[node.gpu_model] = usage
        if node.healthy_count == 0:
            raw = RawVerdict(node.name, node.gpu_model, False, detail="no healthy GPU")
        elif k:
            raw = _evaluate_whole(
                node,
                pod,
                k=k,
                config=node_config,
                predictors=predictors,
                usage=usage,
                gang_elsewhere=gang_elsewhere,
                fit=fit,
            )
        else:
            # Shares are evaluated together once every node is seen (`_evaluate_shares`).
            deferred.append((len(raws), node, memo, node_key, usage, fit, node_config))
            raws.append(_PENDING)
            continue
        memo[node_key] = raw
        raws.append(raw)
    if deferred:
        _evaluate_shares(pod, deferred, raws, predictors=predictors, gang_elsewhere=gang_elsewhere)
    return raws


_MemoKey = int | tuple[int, tuple[int, int]]
_Deferred = tuple[int, NodeState, dict[_MemoKey, RawVerdict], _MemoKey, UsageProfile, Fit | None, ScoringConfig]
"""A node whose share verdict is still to be computed: (its place in the batch, the node, its memo, the memo key, the
pod's expected use on its GPU model, its CPU/memory fit indices, the configuration its GPU model is scored with)."""


_PENDING = RawVerdict("", "", False, detail="pending")
_COLUMNAR_MIN_NODES = 8
"""Below this many nodes of one GPU count, the scalar loop is as fast as setting up the arrays."""


def _evaluate_shares(
    pod: PodRequest,
    deferred: list[_Deferred],
    raws: list[RawVerdict | NodeScore],
    *,
    predictors: Predictors,
    gang_elsewhere: bool,
) -> None:
    """Fill in the share verdicts of `deferred` (and their memos): nodes of the same GPU count and configuration
    (`ScoringConfig.for_model`) together through `columnar.share_choices` where there are enough of them, else one
    by one (`_evaluate_share`); the same verdicts either way."""
    groups: dict[tuple[int, int], list[_Deferred]] = {}
    for d in deferred:
        groups.setdefault((d[1].topology.gpu_count, id(d[6])), []).append(d)
    for group in groups.values():
        config = group[0][6]
        if len(group) >= _COLUMNAR_MIN_NODES:
            columns = share_choices(
                pod,
                [d[1] for d in group],
                [d[5] for d in group],
                [d[4] for d in group],
                config=config,
                predictors=predictors,
            )
            # `_share_verdict` inlined: one verdict per candidate node on a cold call, built from the columns as is.
            gang = pod.gang
            affinity = 1.0
            for (slot, node, memo, key, _, _, _), pos, packing, interference, pod_slow, res_slow in zip(
                group, *columns, strict=True
            ):
                if pos < 0:
                    raw = _share_verdict(node, pod, NO_SHARE, gang_elsewhere=gang_elsewhere)
                else:
                    if gang:
                        affinity = 0.5 + 0.5 * (1.0 if gang in node.gangs else (0.0 if gang_elsewhere else 0.5))
                    gpu = node.gpus[pos]
                    raw = RawVerdict(
                        node.name,
                        node.gpu_model,
                        True,
                        (gpu.index,),
                        packing,
                        affinity,
                        interference,
                        pod_slow,
                        "",
                        len(gpu.residents),
                        res_slow,
                    )
                memo[key] = raws[slot] = raw
        else:
            for slot, node, memo, key, usage, fit, _ in group:
                memo[key] = raws[slot] = _evaluate_share(
                    node,
                    pod,
                    config=config,
                    predictors=predictors,
                    usage=usage,
                    gang_elsewhere=gang_elsewhere,
                    fit=fit,
                )


def _resources_refusal(node: NodeState, pod: PodRequest) -> RawVerdict | None:
    """The infeasible verdict when the node cannot hold the pod's own CPU/memory (or GPU model), else None: checked
    on every call, outside the per-shape memo, since the pod's CPU/memory are not part of its shape."""
    cpu, memory = node.cpu_free_milli, node.memory_free_mib
    if (cpu is None or pod.cpu_milli is None or pod.cpu_milli <= cpu) and (
        memory is None or pod.memory_mib is None or pod.memory_mib <= memory
    ):
        return None
    short = resources_short(node, pod)
    return None if short is None else RawVerdict(node.name, node.gpu_model, False, detail=short)


def _model_short(node: NodeState, pod: PodRequest) -> str | None:
    """Why the node's GPU model is not one the pod accepts, or None."""
    if pod.gpu_models and normalize_gpu_model(node.gpu_model) not in pod.gpu_models:
        return resources_short(node, pod)
    return None


_ANY_WORKLOAD = object()
"""Stands for the workload in the shape of a request whose verdicts do not depend on it (`evaluate_batch`)."""
_shape_ids: dict[tuple[object, ...], int] = {}
_next_shape_id = count()


def clear_verdicts() -> None:
    """Forget every memoised verdict (a benchmark's cold start)."""
    _VERDICTS.clear()


def _shape_id(shape: tuple[object, ...]) -> int:
    """A never-reused small int per request shape: the per-node memo then hashes an int, not an 8-tuple, per node."""
    shape_id = _shape_ids.get(shape)
    if shape_id is None:
        if len(_shape_ids) >= _SHAPE_LIMIT:
            _shape_ids.clear()  # ids are never reused, so entries under forgotten ids just age out of the memos
        shape_id = _shape_ids[shape] = next(_next_shape_id)
    return shape_id


def speed_basis(pod: PodRequest, gpu_model: str, predictors: Predictors) -> tuple[float, str]:
    """The pod's workload's speed on `gpu_model` relative to the reference GPU for ranking, and what answered
    (`SpeedPredictor.speed_of`); an unknown GPU model ranks as the reference and the text says it is unknown."""
    speed, how = predictors.speed.speed_of(pod.workload, gpu_model, max(pod.whole_gpus, 1))
    if speed is None:
        return predictors.speed.relative_speed(gpu_model), f"{how}: ranked as the reference GPU"
    return speed, how


def jct_basis(
    pod: PodRequest, feasible: Sequence[RawVerdict], predictors: Predictors
) -> tuple[dict[str, float | None], dict[str, float], bool]:
    """Per GPU model of the feasible nodes: the predicted JCT (or None), the unit time the jct component compares
    (the JCT when every model has one, else 1 / the workload's relative speed), and whether JCTs were used. A pod
    without GPU: 1 everywhere (the GPU model says nothing about its run time)."""
    base_jct, unit_time, use_jct, _ = _jct_basis(pod, feasible, predictors)
    return base_jct, unit_time, use_jct


def _jct_basis(
    pod: PodRequest, feasible: Sequence[RawVerdict], predictors: Predictors
) -> tuple[dict[str, float | None], dict[str, float], bool, dict[str, str]]:
    """`jct_basis` and, per GPU model, what answered its speed."""
    gpu_count = max(pod.whole_gpus, 1)
    base_jct: dict[str, float | None] = {}
    inverse_speed: dict[str, float] = {}
    how: dict[str, str] = {}
    if pod.whole_gpus == 0 and not pod.is_share:
        return (
            dict.fromkeys((r.gpu_model for r in feasible), None),
            dict.fromkeys((r.gpu_model for r in feasible), 1.0),
            False,
            dict.fromkeys((r.gpu_model for r in feasible), "no GPU"),
        )
    for raw in feasible:
        model = raw.gpu_model
        if model not in base_jct:
            base_jct[model] = predictors.jct.jct_seconds(pod.workload, model, gpu_count)
            speed, how[model] = speed_basis(pod, model, predictors)
            inverse_speed[model] = 1.0 / max(speed, 1e-6)
    use_jct = bool(base_jct) and all(v is not None for v in base_jct.values())
    unit_time = {m: (j or 0.0) if use_jct else inverse_speed[m] for m, j in base_jct.items()}
    return base_jct, unit_time, use_jct, how


def _finish(
    pod: PodRequest, raws: list[RawVerdict | NodeScore], config: ScoringConfig, predictors: Predictors
) -> list[NodeScore]:
    """Add the batch-relative JCT component and weight the components."""
    feasible = [raw for raw in raws if isinstance(raw, RawVerdict) and raw.feasible]
    base_jct, unit_time, use_jct, speed_how = _jct_basis(pod, feasible, predictors)
    times = [raw.slowdown * unit_time[raw.gpu_model] for raw in feasible]
    best_time = min(times, default=1.0)
    w_p, w_a, w_i, w_j = config.weight_packing, config.weight_affinity, config.weight_interference, config.weight_jct
    w_total = w_p + w_a + w_i + w_j
    scale = 100.0 / w_total if w_total > 0 else 0.0
    no_jct = f"{predictors.jct.name} has no estimate"
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
                    raw.explanation(),
                    raw.gpu_model,
                    "jct model" if use_jct else f"relative GPU speed: {speed_how[raw.gpu_model]}; {no_jct}",
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
