"""kube-scheduler extender: `prioritizeVerb` and `filterVerb` (k8s.io/kube-scheduler/extender/v1).

Every candidate node is answered: nodes the advisor has no fresh telemetry for get the neutral score (and pass the
filter unless strict staleness is configured), so a new or silent node is never vetoed by a missing snapshot. The
pod's own CPU/memory requests go into its `PodRequest`; full node objects (a scheduler that is not
`nodeCacheCapable`) hand their allocatable CPU/memory to the state. The filter is
`advisor.placement.filter.extender_filter`: capacity, then the held, yielded and waiting rules over the pending pods
the watch keeps in the state.
"""

from __future__ import annotations

import pydantic_core
from fastapi import APIRouter
from fastapi.responses import Response

from advisor.api.context import AppContext
from advisor.api.deps import Ctx
from advisor.api.schemas import ExtenderArgs, ExtenderFilterResult, HostPriority
from advisor.placement.extender import extender_priorities
from advisor.placement.filter import extender_filter

router = APIRouter(prefix="/extender", tags=["scheduler extender"])


def _take_allocatable(args: ExtenderArgs, ctx: AppContext) -> None:
    """Without `nodeCacheCapable` the scheduler sends full node objects: keep their `status.allocatable` cpu/memory
    and labels (the node watch gives the same; a node's state changes only when the value does)."""
    for node in args.Nodes.items or [] if args.Nodes is not None else []:
        allocatable = node.allocatable()
        if node.metadata.name:
            ctx.state.set_node_labels(node.metadata.name, node.labels())
            if allocatable is not None:
                ctx.state.set_allocatable(node.metadata.name, allocatable)


@router.post("/prioritize", response_model=list[HostPriority])
async def prioritize(args: ExtenderArgs, ctx: Ctx) -> Response:
    """HostPriorityList: `[{"Host": name, "Score": 0..10}]` for every candidate node, in the order given.

    The best feasible node scores 10, the others 1 less per 4 points (of 100) behind it; infeasible 0; unknown (no fresh
    telemetry) 5, neutral.

    `async` on purpose although CPU-bound: scoring takes about a millisecond and never waits on I/O, so a hop to the
    thread pool would cost as much as the work itself (and the GIL serialises the threads anyway).
    """
    pod = args.Pod.to_request()
    names = args.candidates()
    _take_allocatable(args, ctx)
    predictors = ctx.predictors
    verdict = extender_priorities(
        pod, names, ctx.state.nodes, config=ctx.scoring, predictors=predictors, now_seconds=ctx.state.now()
    )
    hosts = [{"Host": name, "Score": score} for name, score in zip(names, verdict.scores, strict=True)]
    ctx.metrics.count_scores("extender", verdict.scored, verdict.infeasible, verdict.unknown)
    ctx.metrics.count_fallbacks(predictors.names())
    # Serialised here (not by FastAPI): 500 entries per call, 4x cheaper than re-validating them through a model.
    return Response(pydantic_core.to_json(hosts), media_type="application/json")


@router.post("/filter", response_model=ExtenderFilterResult, response_model_exclude_none=True)
def filter_(args: ExtenderArgs, ctx: Ctx) -> ExtenderFilterResult:
    """ExtenderFilterResult: the nodes that can run the pod and, for the others, why not (too few free GPUs, CPU or
    memory, or — with a JCT model — a faster GPU model that frees up soon enough to finish the pod sooner)."""
    pod = args.Pod.to_request()
    names = args.candidates()
    _take_allocatable(args, ctx)
    passed, failed = extender_filter(
        pod,
        names,
        ctx.state.nodes,
        ctx.state,
        queue_key=args.Pod.queue_key(pod.name),
        scheduler=args.Pod.scheduler(),
        placement=args.Pod.placement(),
        config=ctx.scoring,
        predictors=ctx.predictors,
        now_seconds=ctx.state.now(),
    )
    if args.NodeNames is None and args.Nodes is not None:
        keep = set(passed)
        items = [n.model_dump(mode="json") for n in args.Nodes.items or [] if n.metadata.name in keep]
        return ExtenderFilterResult(Nodes={"items": items}, NodeNames=passed, FailedNodes=failed)
    return ExtenderFilterResult(NodeNames=passed, FailedNodes=failed)
