"""Placement scoring: how good each candidate node is for one GPU pod, and which GPUs it should get there.

Pure functions over one node: its verdict for a pod (feasible, the chosen GPUs, packing, affinity, interference, the
predicted slowdown, a one-line reason) before the batch-relative JCT. The `Scorer` (`advisor.placement.scorer`)
memoises them per node state and request shape, weighs them (`advisor.placement.totals`) and answers the service and
the simulator. No HTTP, no pydantic, no I/O.

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
kube-scheduler's integer 0..10 comes from `advisor.placement.totals`; the filter's rules are
`advisor.placement.filter`. Shares new to the memo are evaluated on all candidates at once
(`advisor.placement.columnar`, the same numbers as `evaluate_share`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from advisor.gpus import normalize_gpu_model
from advisor.placement.columnar import NO_SHARE, ShareChoice
from advisor.placement.config import ScoringConfig
from advisor.placement.fragmentation import MixResources
from advisor.placement.gpuset import fragmentation_with, packing_of, take_milli, whole_plan
from advisor.placement.types import (
    WHOLE_GPU_MILLI,
    GpuState,
    NodeScore,
    NodeState,
    PodRequest,
    taken_as_unknown,
)
from advisor.predictors import Predictors, UsageProfile

HEURISTIC_PREDICTORS = Predictors.heuristic()


Fit = tuple[tuple[int, int], tuple[int, int]]
"""A node's CPU/memory fit index (`MixResources.fit_index`) before and after the pod's own request."""


def node_fit(node: NodeState, pod: PodRequest, resources: MixResources | None) -> Fit | None:
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


def evaluate_whole(
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
    pod_slow, res_slow = whole_slowdowns(node, pod, plan.positions, predictors, usage)
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


def whole_slowdowns(
    node: NodeState, pod: PodRequest, positions: Sequence[int], predictors: Predictors, usage: UsageProfile
) -> tuple[float, float]:
    """The pod's slowdown and the worst resident's on the whole GPUs at `positions` (1, 1 where none has a
    resident): both paths of a whole-GPU verdict ask it, the per-node one and the score vectors'."""
    pod_slow, res_slow = 1.0, 1.0
    gpus = node.gpus
    for pos in positions:
        residents = gpus[pos].residents
        if residents:
            p, r = predictors.interference.slowdowns(
                gpus[pos].model, pod.workload, usage, residents, sharing=node.sharing_mode
            )
            pod_slow = max(pod_slow, p)
            res_slow = max(res_slow, r)
    return pod_slow, res_slow


def evaluate_share(
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
        return share_verdict(node, pod, NO_SHARE, gang_elsewhere=gang_elsewhere)
    _, pos, packing, pod_slow, res_slow = best
    return share_verdict(node, pod, (pos, packing, pod_slow, res_slow), gang_elsewhere=gang_elsewhere)


def share_verdict(node: NodeState, pod: PodRequest, choice: ShareChoice, *, gang_elsewhere: bool) -> RawVerdict:
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


def evaluate_without_gpu(node: NodeState, *, config: ScoringConfig, fit: Fit) -> RawVerdict:
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


def neutral_without_gpu(name: str) -> NodeScore:
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


def stale_reason(node: NodeState, now_seconds: float | None) -> str:
    if node.observed_at_seconds is None:
        return "unknown: no telemetry from this node; neutral score"
    age = (now_seconds or 0.0) - node.observed_at_seconds
    return f"unknown: last snapshot {age:.0f}s old (stale); neutral score"


def resources_refusal(node: NodeState, pod: PodRequest) -> RawVerdict | None:
    """The infeasible verdict when the node cannot hold the pod's own CPU/memory (or GPU model), else None: checked
    on every call, outside the per-shape memo, since the pod's CPU/memory are not part of its shape."""
    cpu, memory = node.cpu_free_milli, node.memory_free_mib
    if (cpu is None or pod.cpu_milli is None or pod.cpu_milli <= cpu) and (
        memory is None or pod.memory_mib is None or pod.memory_mib <= memory
    ):
        return None
    short = resources_short(node, pod)
    return None if short is None else RawVerdict(node.name, node.gpu_model, False, detail=short)


def model_short(node: NodeState, pod: PodRequest) -> str | None:
    """Why the node's GPU model is not one the pod accepts, or None."""
    if pod.gpu_models and normalize_gpu_model(node.gpu_model) not in pod.gpu_models:
        return resources_short(node, pod)
    return None


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
    base_jct, unit_time, use_jct, _ = jct_basis_how(pod, feasible, predictors)
    return base_jct, unit_time, use_jct


def jct_basis_how(
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
