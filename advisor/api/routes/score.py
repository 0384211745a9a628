"""Native scoring (`/v1/score`) and GPU choice on one node (`/v1/allocate`, for a pod or for a device plugin's
GetPreferredAllocation), with every score explained."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from operator import attrgetter
from typing import Any

from fastapi import APIRouter, HTTPException, status
from fastapi.responses import Response

from advisor.api.answer_caches import BOOL, ENCODE, brief_json, shape_key
from advisor.api.context import AppContext
from advisor.api.deps import Ctx
from advisor.api.errors import ERROR_RESPONSES, StrictJsonRoute, documented
from advisor.api.fastpath import decode_json
from advisor.api.schemas import (
    AllocateRequest,
    AllocateResponse,
    ContainerPreferredAllocationResponse,
    PodQuery,
    PreferredAllocationRequest,
    PreferredAllocationResponse,
    ScoreDeltaResponse,
    ScoreRequest,
    ScoreResponse,
)
from advisor.api.score_delta import tracked
from advisor.cluster.dra import ClaimAsk
from advisor.cluster.pods import PodSpecError, request_name
from advisor.cluster.state import PodAllocation, allocation_of
from advisor.gpus import gpu_spec
from advisor.placement.devices import DeviceRequestError, check_request, preferred_devices
from advisor.placement.scorer import BriefScore
from advisor.placement.types import NodeScore, NodeState, PodRequest
from advisor.placement.unresolvable import never_fits
from advisor.serving import ModelInterference
from advisor.sharing import describe_sharing

router = APIRouter(prefix="/v1", tags=["scoring"], route_class=StrictJsonRoute, responses=ERROR_RESPONSES)
SCORE_PATH = "/v1/score"


_SCORE = attrgetter("score")


@router.post("/score", response_model=ScoreResponse | ScoreDeltaResponse, responses=documented(404))
async def score(body: ScoreRequest, ctx: Ctx) -> Response:
    """Scores 0..100 with components, chosen GPUs, predicted slowdown/JCT and a reason, best first (`detail: brief`:
    the verdicts only, with why an infeasible node does not fit and whether it never can).

    Without `nodes`, every node with telemetry is scored. Naming a node the advisor has never heard of is an error
    (404): this API is for callers that ask about nodes they know the advisor watches.

    `async` and serialised here (the JSON `ScoreResponse` documents, by msgspec) for the same reason as the
    extender's prioritize: the work is CPU-bound and short, and a thread-pool hop or a pydantic object per node
    would cost as much as the scoring. In the running service a valid request is answered ahead of FastAPI's
    routing (`advisor.api.fastpath`), with the same code.
    """
    return Response(_answer(body, ctx), media_type="application/json")


def fast_score(body: bytes, ctx: AppContext) -> bytes:
    """`JsonFastPath`'s answer for a raw score body (raises where the route would not answer 200)."""
    raw = decode_json(body)
    return _answer(ScoreRequest.model_validate(raw), ctx, raw)


def _answer(body: ScoreRequest, ctx: AppContext, raw: Any = None) -> bytes:
    """The `ScoreResponse` JSON for one request, with its metrics counted; 404 for a node without telemetry. `raw`:
    the body as decoded JSON, when there is one (the fast path): its pods are read through `AnswerCaches.pod_shapes`."""
    pod, shape = _pod_request(body.pod, raw["pod"] if raw is not None else None, ctx)
    ask = None if shape is not None else body.pod.claim_ask(ctx.dra)
    state_nodes = ctx.state.nodes
    names = body.nodes if body.nodes is not None else sorted(state_nodes)
    held: list[str] = []
    if body.assumed:
        assumed = _assumed_allocations(body, raw["assumed"] if raw is not None else None, ctx)
        held = [a.pod for a in assumed if ctx.state.holds_pod(a.pod)]
        state_nodes = ctx.state.with_assumed(assumed)
    missing = [n for n in names if n not in state_nodes] if body.unknown_nodes == "error" else []
    if missing:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"nodes: no telemetry has been received from {', '.join(missing[:10])}"
        )
    scorer = ctx.scorer
    # Best first (sorted is stable: equal scores keep the order given). `detail: brief` scores without writing out
    # what it leaves out (`Scorer.brief_candidates`): the same scores.
    scores: Sequence[NodeScore | BriefScore]
    since: tuple[str, bool] | None = None  # the answer's token and whether it is a delta
    models: dict[str, str] | None = None
    if body.detail == "brief":
        scores, entries, since, models, (scored, infeasible, unknown) = _brief_answer(
            body, pod, shape, names, state_nodes, ctx
        )
    else:
        full = scorer.score_candidates(pod, names, state_nodes)
        scores = full
        entry = ctx.caches.entries.text
        entries = ",".join([entry(s) for s in sorted(full, key=_SCORE, reverse=True)])
        scored, infeasible, unknown = _outcomes(scores)
    ctx.metrics.count_scores("score", scored, infeasible, unknown)
    if models is None:
        models = _models(pod, ask=ask, names=names, state_nodes=state_nodes, scores=scores, ctx=ctx)
        if since is not None and since[0]:
            ctx.deltas.remember_models(since[0], pod, models)
    else:
        ctx.metrics.count_fallbacks(models)
    if since is not None:
        ctx.metrics.child(ctx.metrics.score_answers, "delta" if since[1] else "full").inc()
    hint = ""
    if not names:
        hint = (
            "no node has sent telemetry to this advisor yet: point collectors at it (`gpuadvisor collector run "
            "--advisor-url`, with the API token) or try `gpuadvisor up`"
            if not state_nodes
            else "`nodes` is empty: name the nodes to score, or leave it out to score every node"
        )
    tail: dict[str, object] = {"hint": hint, "assumed_held": held}
    if since is not None:
        tail["token"], tail["delta"] = since
    return f'{{"scores":[{entries}],"models":{ENCODE(models).decode()},{ENCODE(tail).decode()[1:]}'.encode()


def _brief_answer(  # noqa: PLR0917 - the route's locals, passed on
    body: ScoreRequest,
    pod: PodRequest,
    shape: PodRequest | None,
    names: Sequence[str],
    state_nodes: Mapping[str, NodeState],
    ctx: AppContext,
) -> tuple[Sequence[BriefScore], str, tuple[str, bool] | None, dict[str, str] | None, tuple[int, int, int]]:
    """A `detail: brief` answer: the briefs scored, the entries' JSON (best first), the token and whether the answer
    is a delta (None without `since`), the `models` of a delta answer (None: to be written) and the outcome counts.

    A verdict written before (a feasible or unknown node's entry, `AnswerCaches.briefs`) is read straight from the
    cache: one dict lookup per node of the ~500, on every scheduling cycle. With `since`, a tracked pod's answer
    carries only the entries changed since the caller's token (`advisor.api.score_delta`)."""
    written = ctx.caches.briefs.get

    def write(s: BriefScore) -> str:
        return written(s) or _brief_entry(s, pod, state_nodes, ctx)

    if body.since is not None and tracked(pod):
        got = ctx.deltas.answer(
            pod, names=names, nodes=state_nodes, since=body.since, scorer=ctx.scorer, write=write, shape=shape
        )
        ctx.metrics.score_state_reads.inc(got.state_reads)
        return got.briefs, ",".join(got.entries), (got.token, got.delta), got.models, got.outcomes
    briefs = ctx.scorer.brief_candidates(pod, names, state_nodes)
    entries = ",".join([write(s) for s in sorted(briefs, key=_SCORE, reverse=True)])
    return briefs, entries, None if body.since is None else ("", False), None, _outcomes(briefs)


def _outcomes(scores: Sequence[NodeScore | BriefScore]) -> tuple[int, int, int]:
    """How many of the answer's nodes were scored, infeasible and unknown."""
    unknown = sum(1 for s in scores if not s.known)
    infeasible = sum(1 for s in scores if s.known and not s.feasible)
    return len(scores) - unknown - infeasible, infeasible, unknown


def _models(
    pod: PodRequest,
    *,
    ask: ClaimAsk | None,
    names: Sequence[str],
    state_nodes: Mapping[str, NodeState],
    scores: Sequence[NodeScore | BriefScore],
    ctx: AppContext,
) -> dict[str, str]:
    """The answer's `models`: which model or heuristic answered each question for these candidates (fallbacks and
    unknown GPU models counted in the metrics)."""
    predictors = ctx.scorer.predictors
    gpu_models = sorted({s.gpu_model for s in scores if s.known and s.feasible})
    models = predictors.answered(pod.workload, gpu_models, max(pod.whole_gpus, 1))
    modes = [(s.sharing_mode, s.sharing_source) for s in map(state_nodes.get, names) if s is not None]
    models["sharing"] = describe_sharing(modes)
    if isinstance(predictors.interference, ModelInterference) and modes:
        # Each mode asked once, in the order first met: the same answers as one call per node.
        models["interference"] = "; ".join(
            dict.fromkeys(predictors.interference.answer_for(m) for m in dict.fromkeys(m for m, _ in modes))
        )
    if ask is not None:  # how the pod's ResourceClaims were read (what could not be judged, and why)
        models["claims"] = "; ".join(ask.notes) or "GPUs asked through ResourceClaims read from their device classes"
    ctx.metrics.count_fallbacks(models)
    unknown_models = sum(1 for m in gpu_models if not gpu_spec(m).known)
    if unknown_models:
        ctx.metrics.unknown_gpu_models.labels("score").inc(unknown_models)
    return models


def _brief_entry(s: BriefScore, pod: PodRequest, nodes: Mapping[str, NodeState], ctx: AppContext) -> str:
    """One entry of a `detail: brief` answer (`NodeScoreBrief`): the verdict a scheduler acts on, and for a node the
    pod does not fit, why and whether it never can (`never_fits`, the extender filter's unresolvable nodes)."""
    if s.feasible or not s.known:
        return ctx.caches.briefs.text(s)
    never = never_fits(pod, nodes[s.node], config=ctx.scoring, now_seconds=ctx.state.now())
    reason = s.reason if never is None else never
    return f'{brief_json(s)[:-1]},"reason":{ENCODE(reason).decode()},"unresolvable":{BOOL[never is not None]}}}'


def _pod_request(pod: PodQuery, raw: Any, ctx: AppContext, *, dra: bool = True) -> tuple[PodRequest, PodRequest | None]:
    """`pod`'s `PodRequest` (its ResourceClaims read through the cluster's DRA objects when `dra`), and the same
    without its name when it came from `ctx.caches.pod_shapes` or went into it (None otherwise: then its claims
    may count). `raw` is the pod's decoded JSON (None: not cached): a v1.Pod without ResourceClaims is read once per
    shape. A shape's `PodSpecError`s depend on nothing its key leaves out, so one kept is one that was read without
    an error."""
    meta, spec = pod.metadata, pod.spec
    key = None
    if raw is not None and meta is not None and spec is not None and not spec.resourceClaims:
        key = shape_key(raw)
    if key is None or meta is None:
        return pod.to_request(ctx.dra if dra else None), None
    shapes = ctx.caches.pod_shapes
    shape = shapes.get(key)
    if shape is None:
        request = pod.to_request(ctx.dra if dra else None)
        shape = replace(request, name="")
        shapes.put(key, shape)
        return request, shape
    return replace(shape, name=request_name(meta.namespace, meta.name)), shape


def _assumed_allocations(body: ScoreRequest, raw: Any, ctx: AppContext) -> list[PodAllocation]:
    """The GPUs each assumed pod holds on its node; a pod that asks for none holds nothing. `raw`: the assumed
    pods' decoded JSON (None: not cached, `_pod_request`)."""
    out = []
    for i, assumed in enumerate(body.assumed):
        try:
            request, _ = _pod_request(assumed.pod, raw[i]["pod"] if raw is not None else None, ctx, dra=False)
        except PodSpecError as e:
            raise PodSpecError(f"assumed[{i}].{e}") from e
        if request.whole_gpus or request.is_share or request.mig:
            out.append(allocation_of(request.name, request, assumed.node))
    return out


@router.post("/allocate", response_model=AllocateResponse | PreferredAllocationResponse, responses=documented(404))
def allocate_(
    body: AllocateRequest | PreferredAllocationRequest, ctx: Ctx
) -> AllocateResponse | PreferredAllocationResponse:
    """The best GPUs on one node: for a pod (`{"pod", "node"}` → GPU indices, topology and sharing), or for a device
    plugin's GetPreferredAllocation (`{"node", "container_requests": [{"available_deviceIDs",
    "must_include_deviceIDs", "allocation_size"}]}` → `{"container_responses": [{"deviceIDs"}]}`, IDs from the
    available ones, must-include ones kept). A node without telemetry gets the kubelet's own order."""
    if isinstance(body, PreferredAllocationRequest):
        return _preferred(body, ctx)
    pod = body.pod.to_request()
    node = ctx.state.nodes.get(body.node)
    if node is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"node: no telemetry has been received from {body.node!r}")
    verdict = ctx.scorer.allocate(pod, node)
    ctx.metrics.count_scores("allocate", int(verdict.feasible and verdict.known), int(not verdict.feasible), 0)
    return AllocateResponse(
        node=verdict.node,
        feasible=verdict.feasible,
        gpus=list(verdict.gpus),
        score=round(verdict.score, 3),
        predicted_slowdown=round(verdict.predicted_slowdown, 4),
        reason=verdict.reason,
    )


def _preferred(body: PreferredAllocationRequest, ctx: AppContext) -> PreferredAllocationResponse:
    node = ctx.state.nodes.get(body.node)
    record = ctx.state.record(body.node)
    uuids = dict(record.uuids) if record is not None else {}
    responses = []
    for i, request in enumerate(body.container_requests):
        available, must, size = request.available_deviceIDs, request.must_include_deviceIDs, request.allocation_size
        try:
            check_request(available, must, size, f"container_requests[{i}]")
        except DeviceRequestError as e:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(e)) from e
        chosen = preferred_devices(node, uuids, available, must, size)
        responses.append(ContainerPreferredAllocationResponse(deviceIDs=chosen))
    ctx.metrics.count_scores("allocate", int(node is not None), 0, int(node is None))
    return PreferredAllocationResponse(container_responses=responses)
