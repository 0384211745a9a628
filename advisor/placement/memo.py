"""Memos of what the scorer derives from one node state, kept by the scorer rather than on the state itself.

A `NodeState` is immutable, so anything computed from it (a verdict per request shape, when its GPUs empty) holds for
as long as the state lives; a new snapshot makes a new state. `NodeMemo` keys such values by the state's identity and
drops them when the state is freed, so the domain type carries no caches and a replaced state takes its entries with
it.
"""

from __future__ import annotations

import weakref
from typing import Generic, TypeVar

from advisor.placement.types import NodeState

V = TypeVar("V")


class _Entry(weakref.ref[NodeState], Generic[V]):
    """One memo entry: the weak reference to its node state, holding the value and its key. One object per entry
    (not a reference, a closure and a tuple): the cluster state keeps the collector's work per node small."""

    __slots__ = ("key", "value")

    key: int
    value: V


class NodeMemo(Generic[V]):
    """One value per live `NodeState` (by identity). Reading costs a dict lookup by `id`; an entry goes when its node
    state is garbage-collected (the weak reference's callback), before the id can be reused."""

    __slots__ = ("__weakref__", "_by_id", "_forget")

    def __init__(self) -> None:
        self._by_id: dict[int, _Entry[V]] = {}
        self_ref = weakref.ref(self)

        def forget(entry: weakref.ref[NodeState]) -> None:
            memo = self_ref()
            if memo is not None and isinstance(entry, _Entry) and memo._by_id.get(entry.key) is entry:
                del memo._by_id[entry.key]

        self._forget = forget

    def get(self, node: NodeState) -> V | None:
        found = self._by_id.get(id(node))
        return None if found is None else found.value

    def put(self, node: NodeState, value: V) -> V:
        """Remember `value` for `node` (replacing what was there) and return it."""
        key = id(node)
        found = self._by_id.get(key)
        if found is not None:
            found.value = value
            return value
        entry: _Entry[V] = _Entry(node, self._forget)
        entry.key = key
        entry.value = value
        self._by_id[key] = entry
        return value

    def __contains__(self, node: NodeState) -> bool:
        return id(node) in self._by_id

    def __len__(self) -> int:
        return len(self._by_id)

    def clear(self) -> None:
        """Forget every node (a benchmark's cold start)."""
        self._by_id.clear()
