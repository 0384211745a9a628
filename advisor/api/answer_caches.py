"""What the hot routes keep between calls, as one object the app's context owns (`AppContext.caches`), created with
it: a new app starts cold, and tests read or empty an app's caches without reaching into route modules.

None of it depends on the predictors served (each text is keyed by the verdict it writes, a Node by its exact JSON),
so it outlives a `Scorer` renewed for newly promoted models."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Generic, TypeVar

import msgspec

from advisor.placement.scorer import BriefScore
from advisor.placement.types import NodeScore, PodRequest

K = TypeVar("K", bound=Hashable)

ENCODE = msgspec.json.Encoder().encode
BOOL = ("false", "true")

ENTRY_CACHE_LIMIT = 50_000
"""Texts a `TextMemo` holds before it is emptied (~30 MB at most for score entries)."""

POD_SHAPE_LIMIT = 1024
"""Pod shapes whose `PodRequest` `PodShapes` keeps before it is emptied."""

CHECKED_NODES_GENERATION_BYTES = 32 * 1024 * 1024
"""A `CheckedNodes` generation holds one body up to the 24 MiB default scheduler body limit."""

NodeView = tuple[str, Mapping[str, str]]
"""What the extender reads of a Node object: its name and labels (`{}` for none), as the route's `V1Node` has them."""


class TextMemo(Generic[K]):
    """Each key's JSON text, written by `write` the first time it is asked for; emptied when it holds `limit` texts.

    Keys are verdicts (NamedTuples of plain values): equal verdicts write equal JSON. `get` is the dict's own lookup,
    for a hot loop that tries the cache before anything else."""

    def __init__(self, write: Callable[[K], str], limit: int = ENTRY_CACHE_LIMIT) -> None:
        self.limit = limit
        self._write = write
        self._texts: dict[K, str] = {}
        self.get = self._texts.get  # the same dict for the memo's life: `clear` empties it in place

    def text(self, key: K) -> str:
        text = self._texts.get(key)
        if text is None:
            if len(self._texts) >= self.limit:
                self._texts.clear()
            text = self._texts[key] = self._write(key)
        return text

    def clear(self) -> None:
        self._texts.clear()

    def __len__(self) -> int:
        return len(self._texts)


class CheckedNodes:
    """Node objects already validated, by their exact JSON text: kube-scheduler without `nodeCacheCapable` sends every
    candidate Node in full on every call (16.7 KB each with the kubelet's image list), and a Node's JSON changes only
    when its object does. A Node seen before — the same bytes — is not read again; one not seen is read by the
    reader `views` is given (the extender's `node_view`).

    Two generations of at most `generation_bytes` of JSON each: a Node found in the older one moves to the newer, and
    once the newer is full it becomes the older (the oldest forgotten), so a cluster's Nodes stay while what is no
    longer sent goes, and the memory held is bounded whatever the callers send."""

    def __init__(self, generation_bytes: int = CHECKED_NODES_GENERATION_BYTES) -> None:
        self.generation_bytes = generation_bytes
        self._lock = threading.Lock()  # large bodies are answered in worker threads
        self._new: dict[bytes, NodeView] = {}
        self._old: dict[bytes, NodeView] = {}
        self._new_bytes = 0

    def views(self, items: Sequence[msgspec.Raw], read: Callable[[bytes], NodeView]) -> list[NodeView]:
        with self._lock:
            return [self._view(bytes(item), read) for item in items]

    def _view(self, text: bytes, read: Callable[[bytes], NodeView]) -> NodeView:
        view = self._new.get(text)
        if view is not None:
            return view
        view = self._old.pop(text, None)
        if view is None:
            view = read(text)
        self._new[text] = view
        self._new_bytes += len(text)
        if self._new_bytes > self.generation_bytes:
            self._old, self._new, self._new_bytes = self._new, {}, 0
        return view

    def __len__(self) -> int:
        return len(self._new) + len(self._old)


def brief_json(s: BriefScore) -> str:
    """A `detail: brief` entry (`NodeScoreBrief`) without its `reason` and `unresolvable`."""
    return (
        f'{{"node":{ENCODE(s.node).decode()},"score":{s.score:.3f},"feasible":{BOOL[s.feasible]},'
        f'"known":{BOOL[s.known]}}}'
    )


def entry_json(s: NodeScore) -> str:
    """One entry of `ScoreResponse.scores` as the JSON `NodeScoreOut` documents, written directly: a pydantic object
    per node and response_model serialisation cost more than the scoring itself. Fixed decimals (`:.3f`, `:.4f`,
    `:.1f`) read back as exactly the values `round(x, 3)` etc. give (both round the same binary value)."""
    jct_seconds = s.predicted_jct_seconds
    jct_text = "null" if jct_seconds is None else f"{jct_seconds:.1f}"
    return (
        f'{{"node":{ENCODE(s.node).decode()},"score":{s.score:.3f},"feasible":{BOOL[s.feasible]},'
        f'"known":{BOOL[s.known]},"components":{{"packing":{s.packing:.4f},"affinity":{s.affinity:.4f},'
        f'"interference":{s.interference:.4f},"jct":{s.jct:.4f}}},"predicted_jct_seconds":{jct_text},'
        f'"predicted_slowdown":{s.predicted_slowdown:.4f},"gpus":[{",".join(map(str, s.gpus))}],'
        f'"reason":{ENCODE(s.reason).decode()}}}'
    )


class PodShapes:
    """The `PodRequest` (without its name) of each v1.Pod a scoring route has read, keyed by the pod's JSON without
    its name and UID (`shape_key`): a scheduler plugin sends pods of one shape call after call, and reading one
    (quantities, affinity, MIG resources) costs more than the rest of a delta answer's bookkeeping. Only pods whose
    request depends on nothing but that JSON are kept (no ResourceClaims: their GPUs come from the cluster's DRA
    objects). Emptied when it holds `limit` shapes."""

    def __init__(self, limit: int = POD_SHAPE_LIMIT) -> None:
        self.limit = limit
        self._requests: dict[bytes, PodRequest] = {}

    def get(self, key: bytes) -> PodRequest | None:
        return self._requests.get(key)

    def put(self, key: bytes, request: PodRequest) -> None:
        if len(self._requests) >= self.limit:
            self._requests = {}
        self._requests[key] = request

    def clear(self) -> None:
        self._requests = {}

    def __len__(self) -> int:
        return len(self._requests)


_PER_POD = frozenset({"name", "uid"})


def shape_key(pod: Mapping[str, object]) -> bytes | None:
    """A wire v1.Pod's JSON without `metadata.name` and `metadata.uid` (None when it has no metadata object): equal
    for the pods of one shape as one sender encodes them."""
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        return None
    return ENCODE({**pod, "metadata": {k: v for k, v in meta.items() if k not in _PER_POD}})


class AnswerCaches:
    """The hot routes' caches: each `/v1/score` entry's JSON (`entries`, and `briefs` for `detail: brief`), the
    prioritize answer's `{"Host":<name>,"Score":` prefix per node name (`host_prefix`, emptied when it outgrows the
    cluster), the Node objects the extender has validated (`checked_nodes`) and the pods `/v1/score` has read
    (`pod_shapes`). Entries of a brief answer for a
    node the pod does not fit also depend on the pod: written every time, never kept."""

    def __init__(self, *, generation_bytes: int = CHECKED_NODES_GENERATION_BYTES) -> None:
        self.entries: TextMemo[NodeScore] = TextMemo(entry_json)
        self.briefs: TextMemo[BriefScore] = TextMemo(brief_json)
        self.host_prefix: dict[str, bytes] = {}
        self.checked_nodes = CheckedNodes(generation_bytes)
        self.pod_shapes = PodShapes()

    def clear(self) -> None:
        """Forget every text and checked Node (a benchmark's cold start)."""
        self.entries.clear()
        self.briefs.clear()
        self.host_prefix.clear()
        self.pod_shapes.clear()
        self.checked_nodes = CheckedNodes(self.checked_nodes.generation_bytes)
