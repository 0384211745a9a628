"""Volcano scheduler extender plugin: `predicate` (one node per call: does the task fit?) and `prioritize` (scores
0..100 for every node of the call).

Volcano sends each node as an api.NodeInfo with its resident tasks, each a full Pod: 500 nodes × 8 tasks is a 12 MB
body, and decoding it whole took longer than Volcano's timeout. The bodies are decoded with msgspec into structs that
declare only what is read (the task's Pod, each node's Name), so the rest
is skipped without being built; the Pod alone then goes through the same pydantic model as the kube-scheduler
extender's (`V1Pod`). The OpenAPI schema still documents the whole request (`VolcanoPriorityRequest`). The
prioritize answer (a score per node: 5,000 entries at 5,000 nodes) is encoded by msgspec too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, NoReturn, TypeVar

import anyio.to_thread
import msgspec
from fastapi import APIRouter, HTTPException, Request, Response, status
from pydantic import ValidationError

from advisor.api.context import AppContext
from advisor.api.deps import Ctx
from advisor.api.errors import ERROR_RESPONSES, BodyError, StrictJsonRoute, parse_json
from advisor.api.limits import LARGE_BODY_BYTES
from advisor.api.schemas import (
    MAX_CANDIDATE_NODES,
    V1Pod,
    VolcanoPredicateRequest,
    VolcanoPredicateResponse,
    VolcanoPriorityRequest,
    VolcanoPriorityResponse,
)
from advisor.cluster.pods import PodSpecError
from advisor.placement.filter import FilterRequest, filter_nodes
from advisor.placement.types import PodRequest
from advisor.placement.unresolvable import never_fits

# The request models the routes document but decode themselves: the app adds them (and the models they refer to) to
# the OpenAPI components, where the routes' `$ref`s point.
DOCUMENTED_BODIES = (VolcanoPriorityRequest, VolcanoPredicateRequest)

router = APIRouter(prefix="/volcano", tags=["volcano"], route_class=StrictJsonRoute, responses=ERROR_RESPONSES)

# Volcano's api.Status codes (the kube-scheduler framework's): a node that never fits is not worth preempting for.
UNSCHEDULABLE = 2
UNSCHEDULABLE_AND_UNRESOLVABLE = 3


class _Task(msgspec.Struct):
    Pod: msgspec.Raw = msgspec.Raw()  # empty: absent


class _NodeName(msgspec.Struct):
    Name: str = ""


class _PrioritizeBody(msgspec.Struct):
    task: _Task | None = None
    nodes: Annotated[list[_NodeName], msgspec.Meta(max_length=MAX_CANDIDATE_NODES)] | None = None


class _PredicateNode(msgspec.Struct):
    Name: str = ""


class _PredicateBody(msgspec.Struct):
    task: _Task | None = None
    node: _PredicateNode | None = None


class _Priorities(msgspec.Struct):
    """`VolcanoPriorityResponse` as msgspec encodes it."""

    nodeScore: dict[str, float]  # noqa: N815 — Volcano's JSON name
    errorMessage: str = ""  # noqa: N815


_Body = TypeVar("_Body", _PrioritizeBody, _PredicateBody)
_Answer = TypeVar("_Answer")
_PRIORITIZE = msgspec.json.Decoder(_PrioritizeBody)
_PREDICATE = msgspec.json.Decoder(_PredicateBody)
_ENCODER = msgspec.json.Encoder()


async def _body(request: Request) -> bytes:
    """The request body, without the copy `Request.body()` makes when joining its chunks: the body limit middleware
    (`advisor.api.errors.BodyLimit`) hands it on in one piece, and a prioritize body is ~14 MB at 5,000 nodes."""
    chunks = [chunk async for chunk in request.stream() if chunk]
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _reject(body: bytes, field: str, message: str) -> NoReturn:
    """A 422 for a body that cannot be used. Its bad values first (invalid UTF-8, a non-finite number, an unpaired
    surrogate: `parse_json` says where, as every route does), else `field: message`. Only a failing request pays for
    that second, strict parse."""
    try:
        parse_json(body)
    except BodyError as e:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=[e.as_error()]) from None
    raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"{field}: {message}")


def _decode(decoder: msgspec.json.Decoder[_Body], body: bytes) -> _Body:
    """The body as the struct, or a 422 naming the field (msgspec says `... - at $.nodes[3].Name`)."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as e:
        message, _, where = str(e).partition(" - at `$.")
        _reject(body, where.rstrip("`") or "body", message)
    except msgspec.DecodeError as e:
        _reject(body, "body", f"not JSON ({e})")
    except RecursionError:  # msgspec's own depth limit: JSON nested deeper than any Volcano body
        _reject(body, "body", "not JSON this advisor reads: nested too deep")
    except UnicodeDecodeError as e:  # msgspec's for a string that is not UTF-8; `_reject` says where it is
        _reject(body, "body", f"not UTF-8 ({e.reason})")


def _pod(task: _Task | None, body: bytes) -> PodRequest:
    """The task's pod as a scoring request. The pod (a few KB) is checked for bad values whole, as every other route
    checks its body; the rest of a Volcano body (mostly the nodes' resident tasks) is skipped unread."""
    if task is None or not task.Pod:
        _reject(body, "task.Pod", "the task's pod is required")
    raw = bytes(task.Pod)
    try:
        parse_json(raw)
        pod = V1Pod.model_validate_json(raw)
    except BodyError as e:
        _reject(body, "task.Pod", e.msg)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        _reject(body, f"task.Pod.{where}", str(first["msg"]))
    try:
        return pod.to_request()
    except PodSpecError as e:  # "spec.containers[0]...: what is wrong", under the task's pod
        field, _, problem = str(e).partition(": ")
        _reject(body, f"task.Pod.{field}", problem)


def _names(names: list[str], body: bytes, where: str) -> list[str]:
    """The node names, refused (422) when one holds an unpaired surrogate escape: no answer could encode it."""
    for i, name in enumerate(names):
        if not name.isascii():
            try:
                name.encode()
            except UnicodeEncodeError:
                _reject(body, where.format(i), "invalid Unicode: an unpaired surrogate escape")
    return names


@router.post(
    "/prioritize",
    response_model=VolcanoPriorityResponse,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/VolcanoPriorityRequest"}}},
        }
    },
)
async def prioritize(request: Request, ctx: Ctx) -> Response:
    """Score every node of the request for the task's pod (unknown nodes get the neutral score)."""
    raw = await _body(request)
    return Response(await _off_loop(_priorities, raw, ctx), media_type="application/json")


def _priorities(raw: bytes, ctx: AppContext) -> bytes:
    body = _decode(_PRIORITIZE, raw)
    pod = _pod(body.task, raw)
    names = _names([n.Name for n in body.nodes or []], raw, "nodes[{}].Name")
    scorer = ctx.scorer
    predictors = scorer.predictors
    scores = scorer.score_candidates(pod, names, ctx.state.nodes)
    unknown = sum(1 for s in scores if not s.known)
    infeasible = sum(1 for s in scores if s.known and not s.feasible)
    ctx.metrics.count_scores("volcano", len(scores) - unknown - infeasible, infeasible, unknown)
    ctx.metrics.count_fallbacks(predictors.names())
    # Encoded here rather than through `response_model` (kept for the OpenAPI document): validating and serialising
    # a 5,000-entry model costs more than the scores' own JSON.
    return _ENCODER.encode(_Priorities(nodeScore={s.node: round(s.score, 3) for s in scores}))


async def _off_loop(answer: Callable[[bytes, AppContext], _Answer], raw: bytes, ctx: AppContext) -> _Answer:
    """`answer(raw, ctx)`, in a worker thread for a large body (a parse of a second or more must not stall the event
    loop: /healthz, the kube-scheduler's small requests)."""
    if len(raw) > LARGE_BODY_BYTES:
        return await anyio.to_thread.run_sync(answer, raw, ctx)
    return answer(raw, ctx)


@router.post(
    "/predicate",
    response_model=VolcanoPredicateResponse,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/VolcanoPredicateRequest"}}},
        }
    },
)
async def predicate(request: Request, ctx: Ctx) -> VolcanoPredicateResponse:
    """Whether the task's pod fits the node: `status` "" when it does (or the advisor has no telemetry for the node),
    else why not, with code 3 for a node that can never host it (fewer or lost GPUs, too little GPU memory, a GPU model
    its affinity excludes) and 2 for one that is full for now."""
    return await _off_loop(_predicate, await _body(request), ctx)


def _predicate(raw: bytes, ctx: AppContext) -> VolcanoPredicateResponse:
    body = _decode(_PREDICATE, raw)
    pod = _pod(body.task, raw)
    if body.node is None or not body.node.Name:
        _reject(raw, "node.Name", "the candidate node is required")
    (name,) = _names([body.node.Name], raw, "node.Name")
    verdict = _fits(pod, name, ctx)
    ctx.metrics.count_scores("volcano", int(verdict.code == 0), int(verdict.code != 0), 0)
    return verdict


def _fits(pod: PodRequest, name: str, ctx: AppContext) -> VolcanoPredicateResponse:
    node = ctx.state.nodes.get(name)
    if node is not None:
        reason = never_fits(pod, node, config=ctx.scoring, now_seconds=ctx.state.now())
        if reason is not None:
            return VolcanoPredicateResponse(status=reason, code=UNSCHEDULABLE_AND_UNRESOLVABLE)
    _, failed = filter_nodes(FilterRequest(pod, [name], ctx.state.nodes, ctx.scoring, now_seconds=ctx.state.now()))
    if name in failed:
        return VolcanoPredicateResponse(status=failed[name], code=UNSCHEDULABLE)
    return VolcanoPredicateResponse()
