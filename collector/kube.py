"""The collector's Kubernetes adapter (the only collector module using the kubernetes client).

- `KubeletPodIndex`: the pods of this node that the kubelet's pod-resources API says hold a GPU (`collector.
  podresources`), each read by name from the API server (`get`) for what the kubelet does not tell: UID, labels,
  owners, container IDs. The collector's RBAC then needs no `list` or `watch` on pods: it cannot enumerate the
  cluster's pods.
- `PodIndex`: the fallback where no kubelet socket answers (development, `make up`, a kubelet without the API): pods
  of this node by list + watch on `spec.nodeName` (which needs `list`/`watch` on pods cluster-wide).
- Both resolve a pod's top-level owner through ownerReferences (ReplicaSet → Deployment, Job → its
  TrialRun/CronJob/…; PyTorchJob, MPIJob, Volcano Job and TrialRun are top-level). An unreachable API server or
  kubelet never empties an index: the last one is kept, errors are counted (kind `kube` or `podresources`) and the
  source is asked again, with exponential backoff.
- `PodAnnotator`: applies `collector.annotations` plans as JSON merge patches, on its own thread.
- `NodeReader`: this node's object, whose labels and allocatable GPUs the GPU-access check compares with NVML.

Shared by every Kubernetes adapter of the project (`profiler.kube`, `advisor.cluster.kube` import it; the collector
is the lowest layer): loading the client's credentials (`load_client_config`, `make_api_client`) and the
translation of the client's errors into the error tree of `collector.kube_errors` (`kube_error`; the tree's names
are importable from here too).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from collector.annotations import AnnotationPlanner, sharing_annotation, topology_annotation
from collector.keys import SHARING_ANNOTATION, TOPOLOGY_ANNOTATION
from collector.kube_errors import (
    KubeError,
    KubePermanentError,
    KubeTemporaryError,
    KubeUnavailableError,
    error_kind,
)
from collector.kubelet_pods import DeviceAllocation, KubeletPod, PodResourcesUnavailableError, gpu_allocations
from collector.pods import PodInfo, controller_of, pod_info_from_manifest
from collector.snapshot import NodeSnapshot
from collector.stats import CollectorStats

log = logging.getLogger(__name__)

__all__ = [  # the error tree re-exported: callers written before `collector.kube_errors` import it from here
    "MERGE_PATCH",
    "TRANSIENT_ERRORS",
    "KubeError",
    "KubePermanentError",
    "KubeTemporaryError",
    "KubeUnavailableError",
    "KubeletPodIndex",
    "NodeReader",
    "OwnerResolver",
    "PodAnnotator",
    "PodIndex",
    "kube_error",
    "load_client_config",
    "make_api_client",
]

MERGE_PATCH = "application/merge-patch+json"
# failures after which the watch is retried or a patch re-planned (API down, timeouts, HTTP errors)
TRANSIENT_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError)


def kube_error(action: str, e: Exception) -> KubeError:
    """`e` (an `ApiException` or a network error from urllib3 / the OS) as this tree's error, its message naming
    `action`; the caller raises it `from e`."""
    if isinstance(e, ApiException):
        reason = e.reason or ""
        with contextlib.suppress(ValueError, AttributeError):
            reason = json.loads(e.body or "{}").get("message") or reason
        return error_kind(e.status)(f"{action}: HTTP {e.status} {reason}".rstrip())
    return KubeTemporaryError(f"{action}: cannot reach the Kubernetes API ({e.__class__.__name__})")


def load_client_config() -> None:
    """Load the kubernetes client's credentials: in-cluster (a service account), else the local kubeconfig
    (`$KUBECONFIG` read now: the client reads it once at import, before a test or wrapper could set it)."""
    try:
        k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
    except ConfigException:
        try:
            k8s_config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]
        except (ConfigException, OSError) as e:
            raise KubeUnavailableError(
                f"Kubernetes API not configured: no service account and no kubeconfig ({e})"
            ) from e


def make_api_client(host: str | None = None) -> k8s.ApiClient:
    """An API client: for `host` (tests, proxies), else in-cluster configuration, else the local kubeconfig."""
    if host is not None:
        configuration = k8s.Configuration()
        configuration.host = host
        return k8s.ApiClient(configuration)
    load_client_config()
    return k8s.ApiClient()


def _json(response: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(response.data)
    return data


class NodeReader:
    """This node's object, for the GPU-access check (`collector.access`); None (counted, logged once) while the API
    cannot answer."""

    def __init__(self, api: k8s.ApiClient, node: str, *, stats: CollectorStats) -> None:
        self._core = k8s.CoreV1Api(api)
        self.node = node
        self._stats = stats
        self._failing = False

    def __call__(self) -> dict[str, Any] | None:
        try:
            node = _json(self._core.read_node(self.node, _preload_content=False, _request_timeout=10))
        except TRANSIENT_ERRORS as e:
            self._stats.add_error("kube")
            if not self._failing:
                self._failing = True
                log.warning("cannot read node %s (GPU-access check waits for it): %s", self.node, e)
            return None
        self._failing = False
        return node


class OwnerResolver:
    """Top-level controller of a pod, following controller ownerReferences through ReplicaSets and batch Jobs."""

    MAX_DEPTH = 4

    def __init__(self, api: k8s.ApiClient, *, stats: CollectorStats) -> None:
        apps = k8s.AppsV1Api(api)
        batch = k8s.BatchV1Api(api)
        self._readers: dict[tuple[str, str], Callable[..., Any]] = {
            ("apps/v1", "ReplicaSet"): apps.read_namespaced_replica_set,
            ("batch/v1", "Job"): batch.read_namespaced_job,
        }
        self._stats = stats
        self._parents: dict[tuple[str, str, str, str], tuple[str, str, str] | None] = {}

    def resolve(self, namespace: str, metadata: Mapping[str, Any]) -> tuple[str, str]:
        """(kind, name) of the top-level owner; ("", "") for a pod without a controller."""
        ref = controller_of(metadata)
        if ref is None:
            return "", ""
        for _ in range(self.MAX_DEPTH):
            parent = self._parent(namespace, ref)
            if parent is None:
                break
            ref = parent
        return ref[1], ref[2]

    def _parent(self, namespace: str, ref: tuple[str, str, str]) -> tuple[str, str, str] | None:
        api_version, kind, name = ref
        reader = self._readers.get((api_version, kind))
        if reader is None:
            return None  # PyTorchJob, MPIJob, Volcano Job, TrialRun, Deployment, …: top-level
        key = (namespace, api_version, kind, name)
        if key in self._parents:
            return self._parents[key]
        try:
            owner = _json(reader(name, namespace, _preload_content=False))
        except ApiException as e:
            if e.status != 404:
                self._stats.add_error("kube")
                log.warning("cannot read %s %s/%s: %s", kind, namespace, name, e.reason)
            return None  # not cached: retried when the pod changes
        parent = controller_of(owner.get("metadata") or {})
        self._parents[key] = parent
        return parent


class PodIndex:
    """Pods of `node` by UID (the collector's `PodLookup`), kept current by a watch on a background thread."""

    def __init__(
        self,
        api: k8s.ApiClient,
        node: str,
        *,
        stats: CollectorStats,
        backoff_initial_seconds: float = 1.0,
        backoff_max_seconds: float = 60.0,
        watch_timeout_seconds: int = 300,
    ) -> None:
        self._core = k8s.CoreV1Api(api)
        self.node = node
        self._stats = stats
        self._owners = OwnerResolver(api, stats=stats)
        self._pods: dict[str, PodInfo] = {}
        self._backoff_initial_seconds = backoff_initial_seconds
        self._backoff_max_seconds = backoff_max_seconds
        self._watch_timeout_seconds = watch_timeout_seconds
        self._stop = threading.Event()
        self._watch: k8s_watch.Watch | None = None
        self._thread: threading.Thread | None = None
        self.synced = threading.Event()

    def get(self, uid: str) -> PodInfo | None:
        return self._pods.get(uid)

    def __len__(self) -> int:
        return len(self._pods)

    def _info(self, pod: Mapping[str, Any]) -> PodInfo | None:
        metadata = pod.get("metadata") or {}
        if (pod.get("spec") or {}).get("nodeName") != self.node or not metadata.get("uid"):
            return None
        kind, name = self._owners.resolve(str(metadata.get("namespace", "")), metadata)
        return pod_info_from_manifest(pod, kind, name)

    def refresh(self) -> str:
        """List this node's pods and replace the index; returns the list's resourceVersion. Raises on API errors."""
        listing = _json(
            self._core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={self.node}", _preload_content=False, _request_timeout=30
            )
        )
        pods: dict[str, PodInfo] = {}
        for pod in listing.get("items") or ():
            info = self._info(pod)
            if info is not None:
                pods[info.uid] = info
        self._pods = pods
        self.synced.set()
        return str((listing.get("metadata") or {}).get("resourceVersion", ""))

    def apply_event(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """Apply one watch event (ADDED, MODIFIED, DELETED) to the index."""
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        if event_type == "DELETED":
            self._pods.pop(uid, None)
            return
        info = self._info(pod)
        if info is not None:
            self._pods[info.uid] = info
        else:
            self._pods.pop(uid, None)

    def _watch_once(self) -> None:
        resource_version = self.refresh()
        self._watch = k8s_watch.Watch()  # type: ignore[no-untyped-call]
        for event in self._watch.stream(  # type: ignore[no-untyped-call]
            self._core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={self.node}",
            resource_version=resource_version or None,
            timeout_seconds=self._watch_timeout_seconds,
            deserialize=False,
            _request_timeout=(10, self._watch_timeout_seconds + 30),
        ):
            if self._stop.is_set():
                break
            if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                self.apply_event(event["type"], event.get("object") or {})

    def run(self) -> None:
        """List and watch until `stop()`; on errors keep the index, count, and retry with backoff."""
        backoff_seconds = self._backoff_initial_seconds
        failing = False
        while not self._stop.is_set():
            try:
                self._watch_once()
                backoff_seconds = self._backoff_initial_seconds
                if failing:
                    log.info("pod watch on node %s recovered", self.node)
                    failing = False
            except TRANSIENT_ERRORS as e:
                if self._stop.is_set():
                    break
                self._stats.add_error("kube")
                if not failing:
                    log.warning("pod watch failed (keeping %d known pods, retrying): %s", len(self._pods), e)
                    failing = True
                self._stop.wait(backoff_seconds)
                backoff_seconds = min(self._backoff_max_seconds, backoff_seconds * 2)

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="collector-pod-index", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()  # type: ignore[no-untyped-call]
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None


@dataclass(frozen=True, slots=True)
class _Read:
    """A pod read by name from the API server: as the kubelet listed it then, and its PodInfo (None: the API server
    has no such pod on this node — it was deleted, or a namesake now runs elsewhere)."""

    listed: KubeletPod
    info: PodInfo | None
    at_seconds: float


class KubeletPodIndex:
    """Pods of `node` by UID (the collector's `PodLookup`): which pods are here and which hold a GPU come from the
    kubelet (`lister`, e.g. `PodResourcesClient.list`, asked every `interval_seconds` on a background thread), and
    each pod holding a GPU is read once by name from the API server.

    A pod the kubelet lists without a GPU is read only after a GPU process was seen in a pod the index does not know
    (`get` missed: a container that reaches GPUs without asking for one). A pod is read again when the kubelet's
    listing of it changes, or after a miss when it was read more than `reread_after_seconds` ago (a pod deleted and
    created again under its name has a new UID); it is forgotten once the kubelet no longer lists it.
    """

    def __init__(
        self,
        api: k8s.ApiClient,
        node: str,
        lister: Callable[[], Sequence[KubeletPod]],
        *,
        stats: CollectorStats,
        interval_seconds: float = 5.0,
        reread_after_seconds: float = 60.0,
        backoff_max_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not interval_seconds > 0:
            raise ValueError(f"interval_seconds: expected > 0, got {interval_seconds}")
        self._core = k8s.CoreV1Api(api)
        self.node = node
        self._lister = lister
        self._stats = stats
        self._owners = OwnerResolver(api, stats=stats)
        self._interval_seconds = interval_seconds
        self._reread_after_seconds = reread_after_seconds
        self._backoff_max_seconds = max(backoff_max_seconds, interval_seconds)
        self._clock = clock
        self._reads: dict[tuple[str, str], _Read] = {}
        self._pods: dict[str, PodInfo] = {}
        self._allocations: tuple[DeviceAllocation, ...] = ()
        self._missed = threading.Event()
        self._api_failing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.synced = threading.Event()

    def get(self, uid: str) -> PodInfo | None:
        info = self._pods.get(uid)
        if info is None:
            self._missed.set()
        return info

    def __len__(self) -> int:
        return len(self._pods)

    def allocations(self) -> list[tuple[DeviceAllocation, PodInfo | None]]:
        """Every GPU device the kubelet last said it allocated, with its pod as the API server gave it (None: not
        read, or no longer there)."""
        reads = self._reads
        found: list[tuple[DeviceAllocation, PodInfo | None]] = []
        for allocation in self._allocations:
            read = reads.get((allocation.namespace, allocation.pod))
            found.append((allocation, read.info if read is not None else None))
        return found

    def refresh(self) -> int:
        """Ask the kubelet for its pods and read from the API server those that need it; returns how many were read.
        Raises PodResourcesUnavailableError when the kubelet does not answer (the index is then kept); a pod the API
        server cannot be asked about now is counted (kind `kube`) and asked about on the next refresh."""
        listed = self._lister()
        missed = self._missed.is_set()
        self._missed.clear()
        now = self._clock()
        kept: dict[tuple[str, str], _Read] = {}
        reads = 0
        for pod in listed:
            key = (pod.namespace, pod.name)
            known = self._reads.get(key)
            if known is None:
                wanted = missed or pod.holds_gpu()
            else:
                wanted = known.listed != pod or (missed and now - known.at_seconds >= self._reread_after_seconds)
            if not wanted:
                if known is not None:
                    kept[key] = known
                continue
            reads += 1
            read = self._read_pod(pod, now)
            if read is not None:
                kept[key] = read
            elif known is not None:
                kept[key] = known
        self._reads = kept
        self._pods = {read.info.uid: read.info for read in kept.values() if read.info is not None}
        self._allocations = gpu_allocations(listed)
        self.synced.set()
        return reads

    def _read_pod(self, pod: KubeletPod, now: float) -> _Read | None:
        try:
            manifest = _json(
                self._core.read_namespaced_pod(pod.name, pod.namespace, _preload_content=False, _request_timeout=10)
            )
        except TRANSIENT_ERRORS as e:
            if isinstance(e, ApiException) and e.status == 404:
                return _Read(pod, None, now)  # deleted; the kubelet lets go of it shortly
            self._stats.add_error("kube")
            if not self._api_failing:
                self._api_failing = True
                log.warning("cannot read pod %s/%s (retried on the next refresh): %s", pod.namespace, pod.name, e)
            return None
        self._api_failing = False
        metadata = manifest.get("metadata") or {}
        if (manifest.get("spec") or {}).get("nodeName") != self.node or not metadata.get("uid"):
            return _Read(pod, None, now)
        kind, name = self._owners.resolve(pod.namespace, metadata)
        return _Read(pod, pod_info_from_manifest(manifest, kind, name), now)

    def run(self) -> None:
        """Refresh every `interval_seconds` until `stop()`; while the kubelet does not answer keep the index, count
        (kind `podresources`), and ask again with backoff."""
        delay = self._interval_seconds if self.synced.is_set() else 0.0
        failing = False
        while not self._stop.wait(delay):
            try:
                self.refresh()
            except PodResourcesUnavailableError as e:
                self._stats.add_error("podresources")
                if not failing:
                    failing = True
                    log.warning("kubelet pod list failed (keeping %d known pods, retrying): %s", len(self._pods), e)
                delay = min(self._backoff_max_seconds, max(delay, self._interval_seconds) * 2)
                continue
            if failing:
                failing = False
                log.info("kubelet pod list on node %s recovered", self.node)
            delay = self._interval_seconds

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="collector-kubelet-pods", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None


class PodAnnotator:
    """Writes pod GPU-use annotations and the node topology annotation (a `SnapshotSink`; patches on its own thread)."""

    def __init__(
        self,
        api: k8s.ApiClient,
        node: str,
        *,
        stats: CollectorStats,
        grace_seconds: float = 300.0,
        planner: AnnotationPlanner | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._core = k8s.CoreV1Api(api)
        self.node = node
        self._stats = stats
        self._planner = planner if planner is not None else AnnotationPlanner(grace_seconds=grace_seconds)
        self._clock = clock
        self._node_published: dict[str, str] | None = None
        self._pending: queue.Queue[NodeSnapshot | None] = queue.Queue(maxsize=1)
        self._thread: threading.Thread | None = None

    def submit(self, snapshot: NodeSnapshot) -> None:
        """Keep only the newest snapshot: annotations describe the present, older ones are worthless."""
        while True:
            try:
                self._pending.put_nowait(snapshot)
                return
            except queue.Full:
                try:
                    self._pending.get_nowait()
                except queue.Empty:
                    continue

    def apply(self, snapshot: NodeSnapshot) -> int:
        """Plan and send the patches for one snapshot; returns how many patches succeeded."""
        done = 0
        for patch in self._planner.plan(snapshot, self._clock()):
            body = {"metadata": {"uid": patch.uid, "annotations": patch.annotations}}
            try:
                self._core.patch_namespaced_pod(
                    patch.name,
                    patch.namespace,
                    body,
                    _content_type=MERGE_PATCH,
                    _request_timeout=10,
                    _preload_content=False,
                )
                done += 1
            except TRANSIENT_ERRORS as e:
                self._planner.forget(patch.uid)
                if isinstance(e, ApiException) and e.status in (404, 409):
                    continue  # the pod is gone (or replaced by a namesake): nothing to annotate
                self._stats.add_error("annotate")
                log.warning("cannot annotate pod %s/%s: %s", patch.namespace, patch.name, e)
        node_annotations = {
            TOPOLOGY_ANNOTATION: topology_annotation(snapshot.links),
            SHARING_ANNOTATION: sharing_annotation(snapshot.gpus),
        }
        if node_annotations != self._node_published:
            try:
                self._core.patch_node(
                    self.node,
                    {"metadata": {"annotations": node_annotations}},
                    _content_type=MERGE_PATCH,
                    _request_timeout=10,
                    _preload_content=False,
                )
                self._node_published = node_annotations
                done += 1
            except TRANSIENT_ERRORS as e:
                self._stats.add_error("annotate")
                log.warning("cannot annotate node %s: %s", self.node, e)
        return done

    def _run(self) -> None:
        while True:
            snapshot = self._pending.get()
            if snapshot is None:
                return
            self.apply(snapshot)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="collector-annotator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        while True:
            try:
                self._pending.get_nowait()
            except queue.Empty:
                break
        self._pending.put(None)
        self._thread.join(timeout=15)
        self._thread = None
