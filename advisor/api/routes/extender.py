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
from dataclasses import dataclass
from typing import Any

import msgspec
from fastapi import APIRouter
from fastapi.responses import Response

from advisor.api.answer_caches import CheckedNodes, NodeView
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
    V1Pod,
)
from advisor.placement.filter import extender_filter
from advisor.placement.unresolvable import never_fits

router = APIRouter(
    prefix="/extender", tags=["scheduler extender"], route_class=StrictJsonRoute, responses=ERROR_RESPONSES
)


def _sent_labels(args: ExtenderArgs) -> dict[str, Mapping[str, str]]:
    """The labels of each Node object in the request, by name (none with `nodeCacheCapable`)."""
    return {n.metadata.name: n.labels() for n in (args.Nodes.items or [] if args.Nodes is not None else [])}


def _labels(sent: Mapping[str, Mapping[str, str]], ctx: AppContext) -> Callable[[str], Mapping[str, str] | None]:
    """Each node's labels for this request: what the node watch knows, else (no watch, or a node it has not listed
    yet) the labels of the Node object in the request (`sent`). Never written to the state: a request's `Nodes` list
    is whatever its sender says, and must not change how the advisor sees a node for anyone else."""
    known = ctx.state.node_labels
    if not sent:
        return known

    def labels(node: str) -> Mapping[str, str] | None:
        watched = known(node)
        return watched if watched is not None else sent.get(node)

    return labels


PRIORITIZE_PATH = "/extender/prioritize"


def _priorities(pod_object: V1Pod, names: list[str], ctx: AppContext) -> bytes:
    """The HostPriorityList for one request (the pod, its candidate nodes), as JSON, with its metrics counted."""
    pod = pod_object.to_request(ctx.dra)
    scorer = ctx.scorer
    verdict = scorer.extender_priorities(pod, names, ctx.state.nodes)
    ctx.metrics.count_scores("extender", verdict.scored, verdict.infeasible, verdict.unknown)
    ctx.metrics.count_fallbacks(scorer.predictors.names())
    return host_priorities(names, verdict.scores, len(ctx.state.nodes), ctx.caches.host_prefix)


_SCORE_CLOSE = [f"{score}}},".encode() for score in range(11)]


def host_priorities(names: list[str], scores: list[int], cluster_size: int, prefix: dict[str, bytes]) -> bytes:
    """The HostPriorityList as JSON (scores 0..10). `prefix`: `{"Host":<the name as JSON>,"Score":` per node name
    answered before (`AnswerCaches.host_prefix`), so that an answer is a join (0.04 ms for 500 hosts, against 0.2 ms
    through a list of dicts and a JSON encoder); emptied here when it outgrows the cluster (nodes that left)."""
    if not names:
        return b"[]"
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
    return Response(_priorities(args.Pod, args.candidates(), ctx), media_type="application/json")


def fast_prioritize(body: bytes, ctx: AppContext) -> bytes:
    """`JsonFastPath`'s answer for a raw prioritize body (raises where the route would not answer 200)."""
    if len(body) > LARGE_BODY_BYTES:
        sent = sent_args(body, checked=ctx.caches.checked_nodes)
        return _priorities(sent.args.Pod, sent.candidates(), ctx)
    args = ExtenderArgs.model_validate(decode_json(body))
    return _priorities(args.Pod, args.candidates(), ctx)


class _NodeListParts(msgspec.Struct, forbid_unknown_fields=True):
    """A v1.NodeList as kube-scheduler encodes it (TypeMeta, ListMeta, items), each part left as JSON text (empty:
    absent); any other field sends the body the general way (`_split`)."""

    items: list[msgspec.Raw] | None = None
    metadata: msgspec.Raw = msgspec.Raw()
    kind: msgspec.Raw = msgspec.Raw()
    apiVersion: msgspec.Raw = msgspec.Raw()  # noqa: N815 — Kubernetes' JSON name


class _ArgsParts(msgspec.Struct, forbid_unknown_fields=True):
    """ExtenderArgs as kube-scheduler encodes it, the Nodes split into theirs: one pass over the whole body."""

    Pod: msgspec.Raw = msgspec.Raw()
    Nodes: _NodeListParts | None = None
    NodeNames: msgspec.Raw = msgspec.Raw()


_ARGS_PARTS = msgspec.json.Decoder(_ArgsParts)
_FIELDS_RAW = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ITEMS_RAW = msgspec.json.Decoder(list[msgspec.Raw] | None)
_NULL = b"null"


def _split(body: bytes) -> tuple[dict[str, msgspec.Raw], dict[str, msgspec.Raw] | None, list[msgspec.Raw] | None]:
    """(the body's own fields but Nodes, the NodeList's own fields but items — None without Nodes —, its items), each
    as JSON text. msgspec checks only the syntax of what it leaves as text: every part is decoded strictly later
    (each Node as far as `node_view` reads it)."""
    try:
        parts = _ARGS_PARTS.decode(body)
    except msgspec.ValidationError:  # a field kube-scheduler does not send, or a wrong type: the general way
        top = _FIELDS_RAW.decode(body)
        nodes = top.pop("Nodes", None)
        if nodes is None or bytes(nodes) == _NULL:
            return top, None, None
        listed = _FIELDS_RAW.decode(nodes)
        return top, listed, _ITEMS_RAW.decode(listed.pop("items", msgspec.Raw(_NULL)))
    top = {name: raw for name, raw in (("Pod", parts.Pod), ("NodeNames", parts.NodeNames)) if raw}
    if parts.Nodes is None:
        return top, None, None
    meta = parts.Nodes
    listed = {
        name: raw
        for name, raw in (("metadata", meta.metadata), ("kind", meta.kind), ("apiVersion", meta.apiVersion))
        if raw
    }
    return top, listed, meta.items


class _SentNode(msgspec.Struct):
    """A Node object as the extender reads it: its metadata decoded in full, every other field (a Node's bulk: its
    images, conditions, capacity, none of them read here) skipped, checked for JSON syntax only."""

    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


_SENT_NODE = msgspec.json.Decoder(_SentNode)


def node_view(text: bytes) -> NodeView:
    """What the extender reads of one Node object's JSON: its metadata validated by the route's `NodeMeta` (as its
    `V1Node` does), raising where the route refuses the metadata or the object's JSON syntax. The fields the advisor
    does not read are not built as Python objects (two thirds of the time a Node took to read; bench/
    extender_full_nodes.py), so a number out of range there is not looked for. A Node with a byte past ASCII is
    decoded in full, since skipping a string does not check its UTF-8."""
    if text.isascii():
        meta = NodeMeta.model_validate(_SENT_NODE.decode(text).metadata)
        return meta.name, meta.labels or {}
    node = V1Node.model_validate(decode_json(text))
    return node.metadata.name, node.labels()


@dataclass(frozen=True)
class SentArgs:
    """An ExtenderArgs body with whole Node objects, read for the answer without a model of each Node: what the
    route's `ExtenderArgs` would hold, as far as the answers use it. `args` is the route's model without its Nodes."""

    args: ExtenderArgs
    node_list: dict[str, msgspec.Raw] | None  # the NodeList's own fields but items, as sent; None: no Nodes
    items: list[msgspec.Raw]  # each Node as sent
    nodes: list[NodeView]  # and what is read of it

    def candidates(self) -> list[str]:
        """`ExtenderArgs.candidates` of the whole body."""
        if self.args.NodeNames is not None:
            return self.args.NodeNames
        if self.node_list is not None:
            return [name for name, _ in self.nodes]
        return self.args.candidates()  # neither: its error

    def labels(self) -> dict[str, Mapping[str, str]]:
        """`_sent_labels` of the whole body."""
        return dict(self.nodes)


def sent_args(body: bytes, *, checked: CheckedNodes, whole_nodes: bool = False) -> SentArgs:
    """The ExtenderArgs of a body, raising on what the route would refuse (it answers those, with its 422): its
    Pod, NodeNames and every other part decoded strictly and validated by the route's models, each Node through
    `checked` (its metadata and its JSON syntax: `node_view`). `whole_nodes`: raise `SmallBodyError` (before any
    validation) unless the body has whole Node objects and no NodeNames — the filter's case."""
    top, node_list, listed = _split(body)
    if whole_nodes and (node_list is None or bytes(top.get("NodeNames", _NULL)) != _NULL):
        raise SmallBodyError("not a filter call with whole Node objects")
    args = ExtenderArgs.model_validate({name: decode_json(raw) for name, raw in top.items()})
    items = listed or []
    if node_list is not None:
        for raw in node_list.values():
            decode_json(raw)  # kept as sent, but the route's parser must accept it
        if len(items) > MAX_CANDIDATE_NODES:
            raise ValueError(f"Nodes.items: more than {MAX_CANDIDATE_NODES} nodes")
    return SentArgs(args=args, node_list=node_list, items=items, nodes=checked.views(items, node_view))


FILTER_PATH = "/extender/filter"


class SmallBodyError(ValueError):
    """A filter body `fast_filter` leaves to the route (node names only, no whole Node objects)."""


def _verdict(
    pod_object: V1Pod, candidates: list[str], sent: Mapping[str, Mapping[str, str]], ctx: AppContext
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(the nodes that pass, why the others fail, why some never could) for one filter request: the pod, its
    candidate nodes and the labels of the Node objects sent."""
    pod = pod_object.to_request(ctx.dra)
    nodes = ctx.state.nodes
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
        labels=_labels(sent, ctx),
        queue_key=pod_object.queue_key(pod.name),
        scheduler=pod_object.scheduler(),
        placement=pod_object.placement(),
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
    passed, failed, unresolvable = _verdict(args.Pod, args.candidates(), _sent_labels(args), ctx)
    if args.NodeNames is None and args.Nodes is not None:
        keep = set(passed)
        node_list = args.Nodes.model_dump(mode="json", exclude_unset=True, exclude={"items"})
        node_list["items"] = [n.as_sent() for n in args.Nodes.items or [] if n.metadata.name in keep]
        return ExtenderFilterResult(
            Nodes=node_list, NodeNames=passed, FailedNodes=failed, FailedAndUnresolvableNodes=unresolvable
        )
    return ExtenderFilterResult(NodeNames=passed, FailedNodes=failed, FailedAndUnresolvableNodes=unresolvable)


def fast_filter(body: bytes, ctx: AppContext) -> bytes:
    """`JsonFastPath`'s answer for a filter body with whole Node objects (`nodeCacheCapable: false`: 12 MB for a few
    hundred real nodes, within the scheduler's `httpTimeout`). The body is read by `sent_args` — each Node validated
    once, then known by its bytes — and the passing Nodes go back as the exact bytes the scheduler sent, never
    rebuilt as Python objects; the verdict is the route's (`_verdict`). Raises on a body this path does not answer
    (NodeNames given, a malformed Node): the route answers that, as it always has."""
    sent = sent_args(body, checked=ctx.caches.checked_nodes, whole_nodes=True)
    passed, failed, unresolvable = _verdict(sent.args.Pod, sent.candidates(), sent.labels(), ctx)
    keep = set(passed)
    items = [item for item, (name, _) in zip(sent.items, sent.nodes, strict=True) if name in keep]
    answer = {
        "Nodes": {**(sent.node_list or {}), "items": items},
        "NodeNames": passed,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": "",
    }
    return msgspec.json.encode(answer)
