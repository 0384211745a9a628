"""The job-history recorder: every finished pod that requested GPUs becomes an `executions` row.

These rows are the JCT model's labels. The recorder sees pods as plain JSON dicts (from a watch or a list),
averages the collector's utilisation annotation over the readings it saw while the pod ran, and writes with
the store's upsert, so seeing the same finished pod again never adds a second row. The profiler's own trial
pods are left out: they are short measurements, not jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from collector.keys import (
    GPU_PRODUCT_LABEL,
    TRIALRUN_LABEL,
    UPDATED_AT_ANNOTATION,
    USER_LABEL,
    UTILIZATION_ANNOTATION,
    WORKLOAD_LABEL,
)
from collector.pod_requests import PodSpecError, gpu_request_of_pod
from profiler.records import ExecutionRecord
from profiler.store import db, repo

QUEUE_KEYS = ("kueue.x-k8s.io/queue-name", "scheduling.volcano.sh/queue-name", "volcano.sh/queue-name")
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
DEFAULT_SOURCE = "k8s"

Obj = Mapping[str, Any]

log = logging.getLogger(__name__)


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _owner(meta: Obj) -> tuple[str, str]:
    for ref in meta.get("ownerReferences", []) or []:
        if ref.get("controller"):
            return str(ref.get("kind", "")), str(ref.get("name", ""))
    return "Pod", str(meta.get("name", ""))


def execution_from_pod(
    pod: Obj, node_labels: Mapping[str, str], *, mean_utilization_ratio: float | None, source: str = DEFAULT_SOURCE
) -> ExecutionRecord | None:
    """The execution record of a finished GPU pod, or None for pods that are not (yet) one."""
    meta = pod.get("metadata", {}) or {}
    status = pod.get("status", {}) or {}
    labels = meta.get("labels", {}) or {}
    annotations = meta.get("annotations", {}) or {}
    if status.get("phase") not in FINISHED_PHASES or TRIALRUN_LABEL in labels:
        return None
    try:  # what the scheduler read of it too (`collector.pod_requests`): whole GPUs or a share, in any notation
        asked = gpu_request_of_pod(pod)
    except PodSpecError as e:
        log.warning("pod %s/%s: GPU request unreadable, not recorded: %s", meta.get("namespace"), meta.get("name"), e)
        return None
    if not asked.asks_gpu:
        return None
    share = {} if asked.gpus else {"gpu_milli": asked.milli or None, "gpu_memory_bytes": asked.memory_bytes}
    finishes = [
        _time((cs.get("state", {}) or {}).get("terminated", {}).get("finishedAt"))
        for cs in status.get("containerStatuses", []) or []
        if (cs.get("state", {}) or {}).get("terminated")
    ]
    end = max((f for f in finishes if f is not None), default=None)
    submit = _time(meta.get("creationTimestamp"))
    if end is None or submit is None:
        return None
    namespace = str(meta.get("namespace", ""))
    owner_kind, owner_name = _owner(meta)
    queue = next(
        (str(labels.get(k) or annotations.get(k)) for k in QUEUE_KEYS if labels.get(k) or annotations.get(k)), ""
    )
    return ExecutionRecord(
        job_id=f"{namespace}/{owner_kind}/{owner_name}",
        submit_time=submit,
        start_time=_time(status.get("startTime")),
        end_time=end,
        workload=labels.get(WORKLOAD_LABEL),
        user=str(labels.get(USER_LABEL) or namespace),
        namespace=namespace,
        queue=queue,
        node=(pod.get("spec", {}) or {}).get("nodeName"),
        gpu_model=node_labels.get(GPU_PRODUCT_LABEL),
        gpu_count=asked.gpus or 1,  # a share runs on one GPU; `extra` says how much of it
        mean_utilization_ratio=mean_utilization_ratio,
        source=source,
        extra={"pod": meta.get("name"), "phase": status.get("phase"), "owner_kind": owner_kind, **share},
    )


class Recorder:
    """Watches pods: averages their utilisation annotation while they run, records them once they finish.

    A pod first seen already finished (e.g. after a restart of the recorder) gets its last annotated reading; when
    it has none, an existing row keeps the utilisation measured earlier.
    """

    def __init__(
        self,
        *,
        sessions: sessionmaker[Session],
        node_labels: Callable[[str], Mapping[str, str]],
        source: str = DEFAULT_SOURCE,
    ) -> None:
        self.sessions = sessions
        self.node_labels = node_labels
        self.source = source
        self._readings: dict[str, dict[str, float]] = {}
        self._recorded: set[str] = set()

    def _remember(self, uid: str, annotations: Mapping[str, Any]) -> None:
        stamp, value = annotations.get(UPDATED_AT_ANNOTATION), annotations.get(UTILIZATION_ANNOTATION)
        if stamp and value is not None:
            self._readings.setdefault(uid, {})[str(stamp)] = float(value)

    def observe(self, pod: Obj) -> ExecutionRecord | None:
        """Take one pod event; return (and store) its execution record when the pod has finished."""
        meta = pod.get("metadata", {}) or {}
        uid = str(meta.get("uid", ""))
        self._remember(uid, meta.get("annotations", {}) or {})
        if (pod.get("status", {}) or {}).get("phase") not in FINISHED_PHASES or uid in self._recorded:
            return None
        readings = self._readings.pop(uid, {})
        mean = sum(readings.values()) / len(readings) if readings else None
        node = (pod.get("spec", {}) or {}).get("nodeName")
        labels = self.node_labels(node) if node else {}
        record = execution_from_pod(pod, labels, mean_utilization_ratio=mean, source=self.source)
        if record is None:
            return None
        with db.transaction(self.sessions) as session:
            known = repo.execution_exists(session=session, source=record.source, job_id=record.job_id)
            if not (known and record.mean_utilization_ratio is None):
                repo.save_execution(session=session, execution=record)
        self._recorded.add(uid)
        return record

    def forget(self, pod: Obj) -> None:
        """Drop what is kept about a deleted pod."""
        uid = str((pod.get("metadata", {}) or {}).get("uid", ""))
        self._readings.pop(uid, None)
        self._recorded.discard(uid)
