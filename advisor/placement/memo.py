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


class NodeMemo(Generic[V]):
    """One value per live `NodeState` (by identity). Reading costs a dict lookup by `id`; an entry goes when its node
    state is garbage-collected (a weak reference's callback), before the id can be reused."""

    __slots__ = ("__weakref__", "_by_id")

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[weakref.ref[NodeState], V]] = {}

    def get(self, node: NodeState) -> V | None:
        found = self._by_id.get(id(node))
        return None if found is None else found[1]

    def put(self, node: NodeState, value: V) -> V:
        """Remember `value` for `node` (replacing what was there) and return it."""
        key = id(node)
        found = self._by_id.get(key)
        if found is not None:
            self._by_id[key] = (found[0], value)
            return value
        self_ref = weakref.ref(self)

        def forget(_: weakref.ref[NodeState]) -> None:
            memo = self_ref()
            if memo is not None:
                memo._by_id.pop(key, None)

        self._by_id[key] = (weakref.ref(node, forget), value)
        return value

    def __contains__(self, node: NodeState) -> bool:
        return id(node) in self._by_id

    def __len__(self) -> int:
        return len(self._by_id)

    def clear(self) -> None:
        """Forget every node (a benchmark's cold start)."""
        self._by_id.clear()
