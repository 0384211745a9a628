"""Which pod and node annotations to write, and when (pure; `collector.kube.PodAnnotator` applies the patches).

Pods using a GPU carry their current GPU use (design §3). To keep API traffic low a pod is patched only when a value
changed meaningfully (GPU set, job, memory by more than `memory_change_ratio` and `memory_change_min_bytes`,
utilisation by more than `utilization_change`) or when its annotations are older than `refresh_seconds`.
Annotations are removed once the pod has had no GPU process for `grace_seconds`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from collector.keys import (
    GPUS_ANNOTATION,
    JOB_ANNOTATION,
    MEMORY_ANNOTATION,
    UPDATED_AT_ANNOTATION,
    UTILIZATION_ANNOTATION,
)
from collector.snapshot import GpuSnapshot, Link, NodeSnapshot

POD_ANNOTATIONS = (MEMORY_ANNOTATION, UTILIZATION_ANNOTATION, GPUS_ANNOTATION, UPDATED_AT_ANNOTATION, JOB_ANNOTATION)


@dataclass(frozen=True, slots=True)
class PodUsage:
    """GPU use of one pod in one snapshot, summed over its processes and GPUs."""

    namespace: str
    name: str
    uid: str
    memory_used_bytes: int
    # None when NVML had no utilisation sample for any of the pod's processes this cycle: unknown, not idle
    utilization_ratio: float | None
    gpus: tuple[str, ...]
    job: str


@dataclass(frozen=True, slots=True)
class PodPatch:
    """A JSON merge patch of a pod's annotations; a None value removes that annotation."""

    namespace: str
    name: str
    uid: str
    annotations: dict[str, str | None]


@dataclass(slots=True)
class _Published:
    usage: PodUsage
    published_at: datetime
    last_seen_at: datetime


def pod_usage(snapshot: NodeSnapshot) -> dict[str, PodUsage]:
    """Per pod UID, for pods the index knows by name (UID-only pods cannot be patched)."""
    totals: dict[str, tuple[str, str, int, float | None, set[str], str]] = {}
    for gpu in snapshot.gpus:
        for process in gpu.processes:
            pod = process.pod
            if pod is None or not pod.name:
                continue
            job = f"{pod.owner_kind}/{pod.owner_name}" if pod.owner_kind else ""
            namespace, name, memory, utilization, uuids, _ = totals.get(
                pod.uid, (pod.namespace, pod.name, 0, None, set(), job)
            )
            sampled = process.sm_utilization_ratio
            uuids.add(gpu.uuid)
            totals[pod.uid] = (
                namespace,
                name,
                memory + (process.memory_used_bytes or 0),
                utilization if sampled is None else (utilization or 0.0) + sampled,
                uuids,
                job,
            )
    return {
        uid: PodUsage(
            namespace=namespace,
            name=name,
            uid=uid,
            memory_used_bytes=memory,
            # one pod on several GPUs: mean over its GPUs, so the ratio stays within 0..1
            utilization_ratio=None if utilization is None else round(min(1.0, utilization / max(1, len(uuids))), 4),
            gpus=tuple(sorted(uuids)),
            job=job,
        )
        for uid, (namespace, name, memory, utilization, uuids, job) in totals.items()
    }


def pod_annotations(usage: PodUsage, now: datetime) -> dict[str, str | None]:
    annotations: dict[str, str | None] = {
        MEMORY_ANNOTATION: str(usage.memory_used_bytes),
        GPUS_ANNOTATION: ",".join(usage.gpus),
        UPDATED_AT_ANNOTATION: now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        JOB_ANNOTATION: usage.job or None,
        # no sample this cycle: the annotation is removed (unknown), never written as 0 (idle)
        UTILIZATION_ANNOTATION: None if usage.utilization_ratio is None else f"{usage.utilization_ratio:.4g}",
    }
    return annotations


def topology_annotation(links: Iterable[Link]) -> str:
    """The node annotation value: JSON list of `{"a", "b", "level"}`, sorted, compact."""
    rows = sorted((link.a, link.b, link.level.value) for link in links)
    return json.dumps([{"a": a, "b": b, "level": level} for a, b, level in rows], separators=(",", ":"))


def sharing_annotation(gpus: Iterable[GpuSnapshot]) -> str:
    """The node annotation value: compact JSON of each GPU's UUID to its `sharing`, for GPUs that could tell."""
    return json.dumps(
        {g.uuid: g.sharing for g in sorted(gpus, key=lambda g: g.uuid) if g.sharing}, separators=(",", ":")
    )


def read_sharing_annotation(value: str | None) -> dict[str, str]:
    """`sharing_annotation`'s value back (UUID to mode); {} for an absent or malformed one (another writer's)."""
    try:
        parsed = json.loads(value or "{}")
    except ValueError:
        return {}
    if not isinstance(parsed, dict):
        return {}
    return {str(uuid): mode for uuid, mode in parsed.items() if isinstance(mode, str)}


class AnnotationPlanner:
    """Remembers what was published per pod and plans the next patches; not thread-safe (one annotator thread)."""

    def __init__(
        self,
        *,
        grace_seconds: float = 300.0,
        refresh_seconds: float = 300.0,
        memory_change_ratio: float = 0.05,
        memory_change_min_bytes: int = 64 << 20,
        utilization_change: float = 0.05,
    ) -> None:
        self.grace = timedelta(seconds=grace_seconds)
        self.refresh = timedelta(seconds=refresh_seconds)
        self.memory_change_ratio = memory_change_ratio
        self.memory_change_min_bytes = memory_change_min_bytes
        self.utilization_change = utilization_change
        self._published: dict[str, _Published] = {}

    def _changed(self, old: PodUsage, new: PodUsage) -> bool:
        if old.gpus != new.gpus or old.job != new.job:
            return True
        memory_delta = abs(new.memory_used_bytes - old.memory_used_bytes)
        threshold = max(self.memory_change_min_bytes, self.memory_change_ratio * old.memory_used_bytes)
        if memory_delta > threshold:
            return True
        if new.utilization_ratio is None or old.utilization_ratio is None:
            return new.utilization_ratio is not old.utilization_ratio
        return abs(new.utilization_ratio - old.utilization_ratio) > self.utilization_change

    def plan(self, snapshot: NodeSnapshot, now: datetime) -> list[PodPatch]:
        patches: list[PodPatch] = []
        current = pod_usage(snapshot)
        for uid, usage in current.items():
            published = self._published.get(uid)
            if (
                published is None
                or self._changed(published.usage, usage)
                or now - published.published_at >= self.refresh
            ):
                patches.append(PodPatch(usage.namespace, usage.name, uid, pod_annotations(usage, now)))
                self._published[uid] = _Published(usage=usage, published_at=now, last_seen_at=now)
            else:
                published.last_seen_at = now
        for uid, published in list(self._published.items()):
            if uid not in current and now - published.last_seen_at >= self.grace:
                removal: dict[str, str | None] = dict.fromkeys(POD_ANNOTATIONS)
                patches.append(PodPatch(published.usage.namespace, published.usage.name, uid, removal))
                del self._published[uid]
        return patches

    def forget(self, uid: str) -> None:
        """Drop what was published for a pod after a failed patch: a live pod is patched afresh next cycle."""
        self._published.pop(uid, None)
