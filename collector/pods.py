"""What the collector knows about a pod, independent of where it learnt it (Kubernetes API, simulation, nothing).

`PodLookup` is the seam between process attribution (pure) and the pod index adapter (`collector.kube`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from collector.keys import WORKLOAD_LABEL


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod of this node: identity, labels, top-level owner and its containers by runtime container ID."""

    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    owner_kind: str = ""
    owner_name: str = ""
    containers: Mapping[str, str] = field(default_factory=dict)

    @property
    def workload(self) -> str | None:
        return self.labels.get(WORKLOAD_LABEL)

    def container_name(self, container_id: str | None) -> str:
        """Name of the container with runtime ID `container_id` (bare hex, no `containerd://` scheme), or ""."""
        if container_id is None:
            return ""
        return self.containers.get(container_id, "")


class PodLookup(Protocol):
    """Pods of this node by UID."""

    def get(self, uid: str) -> PodInfo | None: ...


class NoPods:
    """The lookup used with `--no-kube`: pods are then known by their UID only."""

    def get(self, uid: str) -> PodInfo | None:
        return None


class StaticPods:
    """A fixed set of pods (the simulator's, or a test's)."""

    def __init__(self, pods: Mapping[str, PodInfo]) -> None:
        self._pods = dict(pods)

    def get(self, uid: str) -> PodInfo | None:
        return self._pods.get(uid)


def strip_container_scheme(container_id: str) -> str:
    """`containerd://abc` → `abc` (the form cgroup paths use)."""
    _, sep, rest = container_id.partition("://")
    return rest if sep else container_id


def controller_of(metadata: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(apiVersion, kind, name) of the controlling ownerReference of an object's metadata, if any."""
    for ref in metadata.get("ownerReferences") or ():
        if ref.get("controller"):
            return str(ref.get("apiVersion", "")), str(ref.get("kind", "")), str(ref.get("name", ""))
    return None


def pod_info_from_manifest(pod: Mapping[str, Any], owner_kind: str, owner_name: str) -> PodInfo:
    """PodInfo of a pod manifest (as the API returns it) with its already resolved top-level owner."""
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    containers: dict[str, str] = {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for container in status.get(key) or ():
            container_id = container.get("containerID")
            if container_id:
                containers[strip_container_scheme(str(container_id))] = str(container.get("name", ""))
    return PodInfo(
        uid=str(metadata.get("uid", "")),
        namespace=str(metadata.get("namespace", "")),
        name=str(metadata.get("name", "")),
        labels={str(k): str(v) for k, v in (metadata.get("labels") or {}).items()},
        owner_kind=owner_kind,
        owner_name=owner_name,
        containers=containers,
    )
