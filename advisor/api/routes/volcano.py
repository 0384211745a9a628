"""Volcano scheduler extender plugin: `task` / `nodes` in, `nodeScore` (0..100) / `errorMessage` out."""

from __future__ import annotations

from fastapi import APIRouter

from advisor.api.deps import Ctx
from advisor.api.errors import ERROR_RESPONSES, StrictJsonRoute
from advisor.api.schemas import VolcanoPriorityRequest, VolcanoPriorityResponse
from advisor.placement.scoring import score_candidates

router = APIRouter(prefix="/volcano", tags=["volcano"], route_class=StrictJsonRoute, responses=ERROR_RESPONSES)


@router.post("/prioritize", response_model=VolcanoPriorityResponse)
def prioritize(body: VolcanoPriorityRequest, ctx: Ctx) -> VolcanoPriorityResponse:
    """Score every node of the request for the task's pod (unknown nodes get the neutral score)."""
    pod = body.task.Pod.to_request()
    names = [n.Name for n in body.nodes]
    predictors = ctx.predictors
    scores = score_candidates(
        pod, names, ctx.state.nodes, config=ctx.scoring, predictors=predictors, now_seconds=ctx.state.now()
    )
    unknown = sum(1 for s in scores if not s.known)
    infeasible = sum(1 for s in scores if s.known and not s.feasible)
    ctx.metrics.count_scores("volcano", len(scores) - unknown - infeasible, infeasible, unknown)
    ctx.metrics.count_fallbacks(predictors.names())
    return VolcanoPriorityResponse(nodeScore={s.node: round(s.score, 3) for s in scores})
