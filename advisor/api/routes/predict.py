"""Direct model queries: predicted JCT of a workload on a GPU model, and the interference of two workloads."""

from __future__ import annotations

from fastapi import APIRouter

from advisor.api.deps import Ctx
from advisor.api.errors import ERROR_RESPONSES, StrictJsonRoute
from advisor.api.schemas import InterferenceAnswer, InterferenceQuery, JctAnswer, JctQuery, UsageIn
from advisor.placement.types import WHOLE_GPU_MILLI, Resident
from advisor.predictors import (
    HEURISTIC,
    SCALING_EFFICIENCY_PER_DOUBLING,
    UsageProfile,
    data_parallel_speedup,
    default_usage,
)
from advisor.serving import ModelInterference, ModelJct

router = APIRouter(prefix="/v1/predict", tags=["predictions"], route_class=StrictJsonRoute, responses=ERROR_RESPONSES)


@router.post("/jct", response_model=JctAnswer)
def predict_jct(query: JctQuery, ctx: Ctx) -> JctAnswer:
    """Predicted completion time; null with the reason when no model or history covers the workload, or the GPU model
    is unknown. `models` says what answered the speed and the JCT for this request."""
    predictors = ctx.predictors
    speed, source = predictors.speed.speed_of(query.workload, query.gpu_model, query.gpu_count)
    jct = predictors.jct.jct_seconds(query.workload, query.gpu_model, query.gpu_count)
    runs = "" if speed is None else f"this workload runs {speed:.2f} x its V100 speed here ({source})"
    if speed is None:
        ctx.metrics.unknown_gpu_models.labels("predict_jct").inc()
        jct = None
        reason = f"no JCT or speed estimate: {source}"
    elif jct is None:
        ctx.metrics.fallbacks.labels("jct").inc()
        jct_model = predictors.jct
        why = (
            jct_model.why_not(query.workload, query.gpu_model, query.gpu_count)
            if isinstance(jct_model, ModelJct)
            else f"{jct_model.name}: no JCT model is promoted"
        )
        jct, reason = _from_steps(query, ctx, f"no JCT estimate ({why})")
        if jct is None:
            reason = f"{reason}; {runs}"
    else:
        reason = f"JCT from {predictors.jct.name} on a V100, scaled to this GPU: {runs}"
    if jct is None:
        jct_answer = f"{HEURISTIC}: no estimate"
    elif reason.startswith(_PHYSICAL):
        jct_answer = _PHYSICAL
    else:
        jct_answer = predictors.jct.name
    return JctAnswer(
        workload=query.workload,
        gpu_model=query.gpu_model,
        gpu_count=query.gpu_count,
        jct_seconds=jct,
        relative_speed=None if speed is None else round(speed, 4),
        model=predictors.jct.name,
        models={"jct": jct_answer, "speed": source},
        reason=reason,
    )


_PHYSICAL = "requested steps / throughput"


def _from_steps(query: JctQuery, ctx: Ctx, why_not: str) -> tuple[float | None, str]:
    """The JCT of a job without history from its requested steps (see `advisor.predictors`), or None and why not."""
    if query.steps is None:
        return None, f"{why_not}; give the job's `steps` for an estimate from its throughput"
    rate, how = ctx.predictors.speed.steps_per_second(query.workload, query.gpu_model)
    if rate is None or rate <= 0:
        return None, f"{why_not}; no throughput for its steps: {how}"
    speedup = data_parallel_speedup(query.gpu_count)
    jct = query.steps / (rate * speedup)
    return jct, (
        f"{_PHYSICAL} ({why_not}): {query.steps} steps at {rate:.4g} steps/s on one {query.gpu_model} ({how}), "
        f"{speedup:.3g} x that on {query.gpu_count} GPU{'s' if query.gpu_count != 1 else ''} (data-parallel, "
        f"{SCALING_EFFICIENCY_PER_DOUBLING:g} of the per-GPU throughput kept per doubling)"
    )


def _usage(given: UsageIn | None, workload: str, gpu_model: str, ctx: Ctx) -> tuple[UsageProfile, str]:
    """A workload's solo usage and where it came from: the request, its profiles, or the default for a whole GPU."""
    if given is not None:
        return UsageProfile(given.sm_utilization_ratio, given.memory_bandwidth_utilization_ratio), "given"
    profiled = ctx.predictors.usage.usage(workload, gpu_model)
    if profiled is not None:
        return profiled, "from its profiles"
    return default_usage(WHOLE_GPU_MILLI), "unprofiled: a busy GPU assumed"


@router.post("/interference", response_model=InterferenceAnswer)
def predict_interference(query: InterferenceQuery, ctx: Ctx) -> InterferenceAnswer:
    """Each workload's slowdown (and normalised throughput) when the two share one GPU of `gpu_model`."""
    predictors = ctx.predictors
    usage_a, from_a = _usage(query.usage_a, query.workload_a, query.gpu_model, ctx)
    usage_b, from_b = _usage(query.usage_b, query.workload_b, query.gpu_model, ctx)
    resident = Resident(
        pod="",
        workload=query.workload_b,
        sm_utilization_ratio=usage_b.sm_utilization_ratio,
        memory_bandwidth_utilization_ratio=usage_b.memory_bandwidth_utilization_ratio,
    )
    sharing = query.sharing or ""
    slow_a, slow_b = predictors.interference.slowdowns(
        query.gpu_model, query.workload_a, usage_a, [resident], sharing=sharing
    )
    heuristic = predictors.interference.name == HEURISTIC
    usage = f"usage of {query.workload_a} {from_a}, of {query.workload_b} {from_b}; sharing {sharing or 'unknown'}"
    if heuristic:
        ctx.metrics.fallbacks.labels("interference").inc()
        reason = f"heuristic (no interference model is promoted: contention for SM and memory bandwidth); {usage}"
    elif isinstance(predictors.interference, ModelInterference):
        reason = f"from {predictors.interference.answer_for(sharing)}; {usage}"
    else:
        reason = f"from {predictors.interference.name}; {usage}"
    return InterferenceAnswer(
        gpu_model=query.gpu_model,
        slowdown_a=round(slow_a, 4),
        slowdown_b=round(slow_b, 4),
        normalized_throughput_a=round(1.0 / slow_a, 4),
        normalized_throughput_b=round(1.0 / slow_b, 4),
        model=predictors.interference.name,
        source="heuristic" if heuristic else "model",
        reason=reason,
    )
