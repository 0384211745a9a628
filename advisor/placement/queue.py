"""The pending queue as the filter's queue rules read it: a pending pod, its place in kube-scheduler's queue and the
nodes its own spec lets it use.

Plain values: the Kubernetes watch (`advisor.cluster.kube`) builds them from pod manifests and the cluster state
(`advisor.cluster.state`) keeps them; the holding and shortest-first rules (`advisor.placement.holding`,
`advisor.placement.shortest`) read them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from advisor.placement.types import PodRequest

DEFAULT_SCHEDULER = "default-scheduler"
# Node placement: the pod's own constraints on nodes (kube-scheduler's NodeAffinity plugin, required part).


@dataclass(frozen=True, slots=True)
class NodeRequirement:
    """One `matchExpressions` (node labels) or `matchFields` (`metadata.name`) entry of a node selector term."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, value: str | None) -> bool:
        """Whether a node whose label `key` is `value` (None: absent) meets it, as `k8s.io/api/core/v1` defines."""
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        number, bound = _int_or_none(value), _int_or_none(self.values[0] if len(self.values) == 1 else None)
        if number is None or bound is None:
            return False
        return number > bound if self.operator == "Gt" else number < bound


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """A `nodeSelectorTerms` entry: every expression on the node's labels and every field requirement hold (a term
    with neither matches no node, as in Kubernetes)."""

    expressions: tuple[NodeRequirement, ...] = ()
    fields: tuple[NodeRequirement, ...] = ()

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False
        return all(r.matches(labels.get(r.key)) for r in self.expressions) and all(
            r.matches(name if r.key == "metadata.name" else None) for r in self.fields
        )


@dataclass(frozen=True, slots=True)
class NodePlacement:
    """Where a pod may run by its own spec: `spec.nodeSelector` (every label equal) and, when given, the terms of
    `spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution` (any one term). Taints, preferred
    affinity and inter-pod affinity are not read."""

    selector: Mapping[str, str]
    terms: tuple[NodeSelectorTerm, ...] | None = None

    def admits(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether a node called `name` with these labels meets the pod's constraints."""
        if any(labels.get(k) != v for k, v in self.selector.items()):
            return False
        return self.terms is None or any(t.matches(name, labels) for t in self.terms)


@dataclass(frozen=True, slots=True)
class PendingPod:
    """A GPU pod waiting to be scheduled (from the Kubernetes API): its request, where it may run, and its place in
    kube-scheduler's queue (higher `priority` first, then older `created_seconds`, Unix seconds; None: unknown)."""

    pod: str
    request: PodRequest
    scheduler: str = DEFAULT_SCHEDULER
    priority: int = 0
    created_seconds: float | None = None
    placement: NodePlacement | None = None

    def queue_key(self) -> tuple[int, float, str]:
        """Sorts as kube-scheduler's default queue does (PrioritySort: priority, then the time it was queued)."""
        return queue_key(self.pod, self.priority, self.created_seconds)


def queue_key(pod: str, priority: int, created_seconds: float | None) -> tuple[int, float, str]:
    """A pod's place in kube-scheduler's default queue: higher priority first, then older (unknown age: last)."""
    return (-priority, created_seconds if created_seconds is not None else math.inf, pod)
