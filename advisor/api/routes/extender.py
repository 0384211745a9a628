"""kube-scheduler extender: `prioritizeVerb` and `filterVerb` (k8s.io/kube-scheduler/extender/v1).

Every candidate node is answered: nodes the advisor has no fresh telemetry for get the neutral score (and pass the
filter unless strict staleness is configured), so a new or silent node is never vetoed by a missing snapshot. The
pod's own CPU/memory requests go into its `PodRequest`; the labels of full node objects (a scheduler that is not
`nodeCacheCapable`) serve that request's node selectors where the node watch has none, and are never stored. The
filter is `advisor.placement.filter.extender_filter`: capacity, then the held, yielded and waiting rules over the
pending pods the watch keeps in the state. Nodes that can never host the pod (`advisor.placement.unresolvable`) are
answered as `FailedAndUnresolvableNodes`, so that preemption does not evict pods there; without `nodeCacheCapable` the
Node objects that pass come back exactly as sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

import msgspec
from fastapi import APIRouter
from fastapi.responses import Response

from advisor.api.context import AppContext
from advisor.api.deps import Ctx
from advisor.api.errors import ERROR_RESPONSES, StrictJsonRoute
from advisor.api.fastpath import decode_json
from advisor.api.limits import LARGE_BODY_BYTES
from advisor.api.schemas import (
    MAX_CANDIDATE_NODES,
    ExtenderArgs,
    ExtenderFilterResult,
    HostPriority,
    NodeMeta,
    V1Node,
    V1NodeList,
    V1Pod,
)
from advisor.placement.filter import extender_filter
from advisor.placement.unresolvable import never_fits

router = APIRouter(
    prefix="/extender", tags=["scheduler extender"], route_class=StrictJsonRoute, responses=ERROR_RESPONSES
)


def _labels(args: ExtenderArgs, ctx: AppContext) -> Callable[[str], Mapping[str, str] | None]:
    """Each node's labels for this request: what the node watch knows, else (no watch, or a node it has not listed
    yet) the labels of the Node object in the request. Never written to the state: a request's `Nodes` list is
    whatever its sender says, and must not change how the advisor sees a node for anyone else."""
    sent = {n.metadata.name: n.labels() for n in (args.Nodes.items or [] if args.Nodes is not None else [])}
    known = ctx.state.node_labels
    if not sent:
        return known

    def labels(node: str) -> Mapping[str, str] | None:
        watched = known(node)
        return watched if watched is not None else sent.get(node)

    return labels


PRIORITIZE_PATH = "/extender/prioritize"


def _priorities(args: ExtenderArgs, ctx: AppContext) -> bytes:
    """The HostPriorityList for one request, as JSON, with its metrics counted."""
    pod = args.Pod.to_request(ctx.dra)
    names = args.candidates()
    scorer = ctx.scorer
    verdict = scorer.extender_priorities(pod, names, ctx.state.nodes)
    ctx.metrics.count_scores("extender", verdict.scored, verdict.infeasible, verdict.unknown)
    ctx.metrics.count_fallbacks(scorer.predictors.names())
    return host_priorities(names, verdict.scores, len(ctx.state.nodes))


_HOST_PREFIX: dict[str, bytes] = {}
"""`{"Host":<the name as JSON>,"Score":` per node name answered, so that an answer is a join (0.04 ms for 500 hosts,
against 0.2 ms through a list of dicts and a JSON encoder); emptied when it outgrows the cluster (nodes that left)."""
_SCORE_CLOSE = [f"{score}}},".encode() for score in range(11)]


def host_priorities(names: list[str], scores: list[int], cluster_size: int) -> bytes:
    """The HostPriorityList as JSON (scores 0..10)."""
    if not names:
        return b"[]"
    prefix = _HOST_PREFIX
    if len(prefix) > 2 * cluster_size + 1024:
        prefix.clear()
    heads = list(map(prefix.get, names))
    if None in heads:
        for name in names:
            if name not in prefix:
                prefix[name] = b'{"Host":' + json.dumps(name).encode() + b',"Score":'
        heads = list(map(prefix.get, names))
    # name, score, name, score, ...: interleaved by slices, no Python loop per host
    parts: list[bytes | None] = [None] * (2 * len(heads))
    parts[0::2] = heads
    parts[1::2] = map(_SCORE_CLOSE.__getitem__, scores)
    return b"[" + b"".join(parts)[:-1] + b"]"  # type: ignore[arg-type]  # every slot filled above


@router.post("/prioritize", response_model=list[HostPriority])
async def prioritize(args: ExtenderArgs, ctx: Ctx) -> Response:
    """HostPriorityList: `[{"Host": name, "Score": 0..10}]` for every candidate node, in the order given.

    The best feasible node scores 10, the others 1 less per 4 points (of 100) behind it; infeasible 0; unknown (no fresh
    telemetry) 5, neutral.

    `async` on purpose although CPU-bound: scoring takes about a millisecond and never waits on I/O, so a hop to the
    thread pool would cost as much as the work itself (and the GIL serialises the threads anyway). In the running
    service a valid request is answered ahead of FastAPI's routing (`advisor.api.fastpath`), with the same code.
    """
    return Response(_priorities(args, ctx), media_type="application/json")


def fast_prioritize(body: bytes, ctx: AppContext) -> bytes:
    """`JsonFastPath`'s answer for a raw prioritize body (raises where the route would not answer 200)."""
    if len(body) > LARGE_BODY_BYTES:
        return _priorities(args_in_pieces(body), ctx)
    return _priorities(ExtenderArgs.model_validate(decode_json(body)), ctx)


class _ArgsRaw(msgspec.Struct):
    """ExtenderArgs with its three fields left as JSON text (empty: absent)."""

    Pod: msgspec.Raw = msgspec.Raw()
    Nodes: msgspec.Raw = msgspec.Raw()
    NodeNames: msgspec.Raw = msgspec.Raw()


_ARGS_RAW = msgspec.json.Decoder(_ArgsRaw)
_FIELDS_RAW = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ITEMS_RAW = msgspec.json.Decoder(list[msgspec.Raw] | None)


def args_in_pieces(body: bytes) -> ExtenderArgs:
    """The ExtenderArgs of a large body (whole Node objects: 22.7 MB at 5,000 nodes), through the same models as
    `ExtenderArgs.model_validate`, one Node at a time: no single step holds the interpreter for the whole body (a
    20 MB decode or validation is ~0.2 s on an idle core, seconds on a busy one), so the event loop answers /healthz
    and small requests between the nodes, and no whole-body tree of dicts is built. Raises on anything the route
    would refuse (it answers those, with its 422)."""
    top = _ARGS_RAW.decode(body)
    if not top.Pod:
        raise ValueError("Pod: required")
    pod = V1Pod.model_validate_json(bytes(top.Pod))
    nodes = None
    if top.Nodes and bytes(top.Nodes) != b"null":
        fields = _FIELDS_RAW.decode(top.Nodes)
        listed = _ITEMS_RAW.decode(fields.pop("items", msgspec.Raw(b"null")))
        items = None if listed is None else [V1Node.model_validate_json(bytes(item)) for item in listed]
        rest = {name: msgspec.json.decode(value) for name, value in fields.items()}
        nodes = V1NodeList.model_validate({**rest, "items": items})
    names = msgspec.json.decode(top.NodeNames) if top.NodeNames else None
    return ExtenderArgs.model_validate({"Pod": pod, "Nodes": nodes, "NodeNames": names})


FILTER_PATH = "/extender/filter"


class SmallBodyError(ValueError):
    """A filter body `fast_filter` leaves to the route (node names only, no whole Node objects)."""


def _verdict(args: ExtenderArgs, ctx: AppContext) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(the nodes that pass, why the others fail, why some never could) for one filter request."""
    pod = args.Pod.to_request(ctx.dra)
    nodes = ctx.state.nodes
    candidates = args.candidates()
    now = ctx.state.now()
    unresolvable = {
        name: reason
        for name in candidates
        if (node := nodes.get(name)) is not None
        and (reason := never_fits(pod, node, config=ctx.scoring, now_seconds=now)) is not None
    }
    passed, failed = extender_filter(
        pod,
        [n for n in candidates if n not in unresolvable],
        nodes,
        ctx.state,
        labels=_labels(args, ctx),
        queue_key=args.Pod.queue_key(pod.name),
        scheduler=args.Pod.scheduler(),
        placement=args.Pod.placement(),
        config=ctx.scoring,
        predictors=ctx.predictors,
        now_seconds=now,
    )
    return passed, failed, unresolvable


@router.post("/filter", response_model=ExtenderFilterResult, response_model_exclude_none=True)
def filter_(args: ExtenderArgs, ctx: Ctx) -> ExtenderFilterResult:
    """ExtenderFilterResult: the nodes that can run the pod and, for the others, why not (too few free GPUs, CPU or
    memory, or — with a JCT model — a faster GPU model that frees up soon enough to finish the pod sooner).

    With whole Node objects (`nodeCacheCapable: false`) a valid request is answered ahead of FastAPI's routing
    (`fast_filter`), with the same code."""
    passed, failed, unresolvable = _verdict(args, ctx)
    if args.NodeNames is None and args.Nodes is not None:
        keep = set(passed)
        node_list = args.Nodes.model_dump(mode="json", exclude_unset=True, exclude={"items"})
        node_list["items"] = [n.as_sent() for n in args.Nodes.items or [] if n.metadata.name in keep]
        return ExtenderFilterResult(
            Nodes=node_list, NodeNames=passed, FailedNodes=failed, FailedAndUnresolvableNodes=unresolvable
        )
    return ExtenderFilterResult(NodeNames=passed, FailedNodes=failed, FailedAndUnresolvableNodes=unresolvable)


class _NodeMetaView(msgspec.Struct):
    """What the filter reads of a Node: its name and labels (the rest goes back to the scheduler untouched)."""

    name: str
    labels: dict[str, str] | None = None


class _NodeView(msgspec.Struct):
    metadata: _NodeMetaView


_NODE_VIEW = msgspec.json.Decoder(_NodeView)


def fast_filter(body: bytes, ctx: AppContext) -> bytes:
    """`JsonFastPath`'s answer for a filter body with whole Node objects (`nodeCacheCapable: false`: 12 MB for a few
    hundred real nodes, within the scheduler's `httpTimeout`). Each Node is read for its name and labels only, and
    the passing ones go back as the exact bytes the scheduler sent, never rebuilt as Python objects; the verdict is
    the route's (`_verdict`). Raises on a body this path does not answer (NodeNames given, a malformed Node): the
    route answers that, as it always has."""
    top = _ARGS_RAW.decode(body)
    if not top.Pod or not top.Nodes or bytes(top.Nodes) == b"null" or bytes(top.NodeNames or b"null") != b"null":
        raise SmallBodyError("not a filter call with whole Node objects")
    fields = _FIELDS_RAW.decode(top.Nodes)
    items = _ITEMS_RAW.decode(fields.pop("items", msgspec.Raw(b"null"))) or []
    if len(items) > MAX_CANDIDATE_NODES:
        raise ValueError("Nodes.items: too many")
    views = [_NODE_VIEW.decode(item).metadata for item in items]
    # Already typed by the decoder: built without a second validation (a third of a second for 750 nodes)
    light = [V1Node.model_construct(metadata=NodeMeta.model_construct(name=v.name, labels=v.labels)) for v in views]
    args = ExtenderArgs.model_construct(
        Pod=V1Pod.model_validate_json(bytes(top.Pod)), Nodes=V1NodeList.model_construct(items=light), NodeNames=None
    )
    passed, failed, unresolvable = _verdict(args, ctx)
    keep = set(passed)
    node_list = {**fields, "items": [item for item, view in zip(items, views, strict=True) if view.name in keep]}
    answer = {
        "Nodes": node_list,
        "NodeNames": passed,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": "",
    }
    return msgspec.json.encode(answer)
