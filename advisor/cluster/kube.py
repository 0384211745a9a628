"""Kubernetes adapter of the advisor: watch bound pods (→ GPU allocations, CPU/memory requests), nodes
(→ allocatable CPU/memory, labels, deletions) and pending GPU pods (→ the queue the filter holds nodes for).

The only advisor module that imports the kubernetes client. A background thread lists, then watches, pods with a
`spec.nodeName` (bound) and feeds `ClusterState.replace_pods` / `update_pod`: GPU pods that are Pending or Running
become allocations (with their `status.startTime`, from which the extender filter predicts when they leave), and
every pod not Succeeded or Failed (GPU or not, terminating included, as kube-scheduler counts it until it is gone)
that requests CPU or memory becomes a `PodResources` record. A second thread lists, then watches, nodes for their
`status.allocatable` cpu/memory and labels (for pods' node selectors in the extender filter) and forgets deleted
ones. A third (with `pending`, as the service runs it: the filter's holding and shortest-first queue, and the MIG
profiles that judge stranded instances, read the queue) lists, then watches, unbound Pending pods and feeds
`ClusterState.replace_pending` / `update_pending` with those that ask for GPUs (`PendingPod`: request, priority,
creation time, node selector and affinity); a pending pod with ResourceClaims is read again whenever a DRA object
changes, so one created before its claim gets its request when the claim appears. Errors are logged once per kind and
retried with a capped backoff, and counted by watch and kind (`WatchMetrics`: temporary or permanent, as the shared
error tree `collector.kube.kube_error` classes them); an expired resource version re-lists.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol, cast

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError, ProtocolError, ReadTimeoutError

from advisor.cluster.dra import DraIndex, served_by_claim, with_claims
from advisor.cluster.migask import with_mig_resources
from advisor.cluster.pods import (
    PodSpecError,
    accepted_gpu_models,
    allocatable_of,
    cpu_memory_request,
    placement_of_spec,
    pod_key,
    pod_request,
    rfc3339_seconds,
)
from advisor.cluster.state import ClusterState, PodAllocation, PodResources, allocation_of
from advisor.placement.queue import DEFAULT_SCHEDULER, PendingPod
from advisor.placement.types import PodRequest
from collector.kube import kube_error, load_client_config
from collector.kube_errors import KubeUnavailableError
from collector.pod_requests import container_resources

log = logging.getLogger(__name__)

_ACTIVE_PHASES = {"Pending", "Running"}
_TERMINATED_PHASES = {"Succeeded", "Failed"}
_WATCH_TIMEOUT_SECONDS = 300
_MAX_BACKOFF_SECONDS = 30.0
_HTTP_GONE = 410
_HTTP_NOT_FOUND = 404
_PENDING_SELECTOR = "spec.nodeName=,status.phase=Pending"
_DRA_GROUP = "resource.k8s.io"
_DRA_VERSION = "v1"
_DRA_PLURALS = ("deviceclasses", "resourceclaimtemplates", "resourceslices", "resourceclaims")


class WatchMetrics(Protocol):
    """What the watch reports, given from above (the service passes its `advisor.api.metrics.AdvisorMetrics`): the
    GPU-holding pods it knows of, and each failed list or watch by watch (pods, nodes, pending) and kind (temporary:
    the API server unreachable or overloaded; permanent: refused, e.g. RBAC forbids it — retried all the same, with
    backoff, since an operator may fix it)."""

    def set_allocations(self, count: int) -> None: ...

    def count_watch_error(self, watch: str, kind: str) -> None: ...


def allocation_from_pod(pod: Mapping[str, Any]) -> PodAllocation | None:
    """The GPU allocation of a pod object (API JSON form), or None when it holds no GPU or is not active/bound."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    node = spec.get("nodeName")
    if not node or phase not in _ACTIVE_PHASES or meta.get("deletionTimestamp"):
        return None
    try:
        request = _pod_request(meta, spec, pod.get("status"))
    except PodSpecError as e:
        log.warning("pod %s/%s: GPU request unreadable: %s", meta.get("namespace"), meta.get("name"), e)
        return None
    # A pod with ResourceClaims is kept even without GPU resources: its claims' GPUs are added to it (the cluster
    # state merges the two), with its start time, workload and gang from here.
    if not (request.whole_gpus or request.is_share or request.mig or spec.get("resourceClaims") or _served(pod)):
        return None
    return allocation_of(pod_key(meta.get("namespace", ""), meta.get("name", "")), request, node, _started_seconds(pod))


def _served(pod: Mapping[str, Any]) -> bool:
    return bool(served_by_claim(pod.get("status")))


def _gpu_request(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> PodRequest | None:
    """The pod's `PodRequest`, None when it asks for no GPU; `PodSpecError` when it cannot be read."""
    request = _pod_request(meta, spec, None)
    return request if request.whole_gpus or request.is_share else None


def _pod_request(meta: Mapping[str, Any], spec: Mapping[str, Any], status: Mapping[str, Any] | None) -> PodRequest:
    """The pod's `PodRequest` from its own resources, less those a ResourceClaim serves (KEP-5004: the scheduler's
    claim for them holds the devices, and the DRA watch counts them); `PodSpecError` when it cannot be read."""
    served = served_by_claim(status)
    containers = container_resources(spec.get("containers"), served)
    init_containers = container_resources(spec.get("initContainers"), served)
    request = pod_request(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        labels=meta.get("labels") or {},
        annotations=meta.get("annotations") or {},
        containers=containers,
        init_containers=init_containers,
        overhead=spec.get("overhead"),
        gpu_models=accepted_gpu_models(placement_of_spec(spec)),
    )
    return with_mig_resources(request, containers, init_containers)


def pending_from_pod(pod: Mapping[str, Any], dra: DraIndex | None = None) -> PendingPod | None:
    """A pod object (API JSON form) waiting to be scheduled with a GPU request, or None (bound, not Pending, being
    deleted, no GPU, or a request that cannot be read). With `dra`, GPUs asked through ResourceClaims count too."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or (pod.get("status") or {}).get("phase") != "Pending" or meta.get("deletionTimestamp"):
        return None
    try:
        request = _pod_request(meta, spec, pod.get("status"))
        if dra is not None and spec.get("resourceClaims"):
            request = with_claims(request, dra.claim_ask(meta.get("namespace", ""), spec, pod.get("status")))
    except PodSpecError:
        return None  # the bound pod's watch logs it once it is scheduled
    if not (request.whole_gpus or request.is_share or request.mig):
        return None
    priority = spec.get("priority")
    return PendingPod(
        pod=request.name,
        request=request,
        scheduler=spec.get("schedulerName") or DEFAULT_SCHEDULER,
        priority=priority if isinstance(priority, int) else 0,
        created_seconds=_time_of(pod, meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        placement=placement_of_spec(spec),
    )


def _started_seconds(pod: Mapping[str, Any]) -> float | None:
    """`status.startTime` (RFC 3339; the client's serialiser writes `+00:00` for `Z`) as Unix seconds, the clock of
    `ClusterState.now`; None when absent (not started yet) or unreadable (logged: the pod then counts as never
    leaving its GPUs)."""
    return _time_of(pod, (pod.get("status") or {}).get("startTime"), "status.startTime")


def _time_of(pod: Mapping[str, Any], raw: object, field: str) -> float | None:
    """An RFC 3339 time of `pod` as Unix seconds; None when absent or unreadable (logged)."""
    if raw is None:
        return None
    seconds = rfc3339_seconds(raw)
    if seconds is None:
        meta = pod.get("metadata") or {}
        log.warning("pod %s/%s: %s %r is not an RFC 3339 time", meta.get("namespace"), meta.get("name"), field, raw)
    return seconds


def resources_from_pod(pod: Mapping[str, Any]) -> PodResources | None:
    """The CPU/memory a pod object holds on its node, or None when it is unbound, terminated or requests neither."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    if not node or (pod.get("status") or {}).get("phase") in _TERMINATED_PHASES:
        return None
    try:
        cpu, memory = cpu_memory_request(
            container_resources(spec.get("containers")),
            container_resources(spec.get("initContainers")),
            spec.get("overhead"),
        )
    except PodSpecError as e:
        log.warning("pod %s/%s: CPU/memory request unreadable: %s", meta.get("namespace"), meta.get("name"), e)
        return None
    if cpu == 0 and memory == 0:
        return None
    return PodResources(pod_key(meta.get("namespace", ""), meta.get("name", "")), node, cpu, memory)


_Objects = Callable[[list[dict[str, Any]]], None]
_Object = Callable[[dict[str, Any]], None]


def _dra_handlers(dra: DraIndex, plural: str) -> tuple[_Objects, _Object, _Object]:
    """How a re-list, an added or changed object, and a deleted one of kind `plural` reach the DRA index."""
    if plural == "resourceslices":
        return dra.replace_slices, lambda o: dra.set_slice(_name(o), o), lambda o: dra.set_slice(_name(o), None)
    if plural == "resourceclaims":
        return dra.replace_claims, lambda o: dra.set_claim(_key(o), o), lambda o: dra.set_claim(_key(o), None)
    if plural == "deviceclasses":
        return dra.replace_classes, lambda o: dra.set_class(_name(o), o), lambda o: dra.set_class(_name(o), None)
    return (
        dra.replace_templates,
        lambda o: dra.set_template(_key(o), o),
        lambda o: dra.set_template(_key(o), None),
    )


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return pod_key(str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def allocatable_from_node(node: Mapping[str, Any]) -> tuple[int, int] | None:
    """A node object's `status.allocatable` (milli-CPU, MiB), None when it lacks cpu or memory."""
    allocatable = (node.get("status") or {}).get("allocatable")
    return allocatable_of(allocatable) if isinstance(allocatable, Mapping) else None


def _allocatable_of_model(node: Any) -> tuple[int, int] | None:
    """`allocatable_from_node` of a client `V1Node` without serialising the whole object (images, conditions, …)."""
    status = getattr(node, "status", None)
    allocatable = getattr(status, "allocatable", None)
    return allocatable_of(allocatable) if isinstance(allocatable, Mapping) else None


class JsonWatch(watch.Watch):
    """A watch whose events hold each object as the API server's JSON (a dict: API JSON form, every field it sent)
    rather than the client's model. Building a V1Pod from each event and turning it back into a dict cost ~1.5 ms of
    the advisor's CPU per pod event, every binding brings one or two (the bound and the pending pods' watches), and
    the advisor shares its cores with the scheduler it serves (bench/scheduler_throughput.py). Error events (410 Gone)
    are raised by the client as before."""

    def get_return_type(self, func: Callable[..., Any]) -> None:
        return None  # the client then leaves `object` as decoded JSON


class KubeWatch:
    """Daemon threads (bound pods, nodes, and with `pending` unbound GPU pods) keeping `state` in step with the
    cluster until `stop()`."""

    def __init__(
        self,
        state: ClusterState,
        metrics: WatchMetrics,
        api: client.CoreV1Api,
        *,
        read_timeout_seconds: float = _WATCH_TIMEOUT_SECONDS + 30,
        pending: bool = True,
        dra: DraIndex | None = None,
        objects: client.CustomObjectsApi | None = None,
    ) -> None:
        self._state = state
        self._dra = dra
        self._objects = objects
        self._metrics = metrics
        self._api = api
        # A silent watch stream ends after this long, so `stop()` takes effect within it and a half-open connection
        # to the API server is noticed (the server itself closes watches after _WATCH_TIMEOUT_SECONDS).
        self._request_timeout = (10.0, read_timeout_seconds)
        self._serializer = client.ApiClient()
        self._stop = threading.Event()
        # Pending pods with ResourceClaims (their API objects): read again whenever a claim, template, class or slice
        # changes, so a pod seen before its claim existed gets its request once the claim appears. The lock keeps a
        # re-read from recording a pod the pending watch has just seen bound or deleted.
        self._claim_pods: dict[str, dict[str, Any]] = {}
        self._claim_pods_lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._loop, args=("pods", self._watch_pods), name="advisor-pods", daemon=True),
            threading.Thread(target=self._loop, args=("nodes", self._watch_nodes), name="advisor-nodes", daemon=True),
        ]
        if dra is not None and objects is not None:  # Dynamic Resource Allocation (resource.k8s.io/v1)
            for plural in _DRA_PLURALS:
                self._threads.append(
                    threading.Thread(
                        target=self._loop,
                        args=(plural, lambda p=plural: self._watch_dra(p)),
                        name=f"advisor-{plural}",
                        daemon=True,
                    )
                )
        if pending:  # only the filter's holding for blocked pods reads the queue
            self._threads.append(
                threading.Thread(
                    target=self._loop, args=("pending", self._watch_pending), name="advisor-pending", daemon=True
                )
            )

    def start(self) -> KubeWatch:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        """Ask both threads to finish and wait for them (at most one read timeout)."""
        self._stop.set()
        for t in self._threads:
            if t.is_alive():
                t.join(timeout=self._request_timeout[1] + 1.0)

    def _loop(self, name: str, body: Callable[[], None]) -> None:
        backoff = 1.0
        logged: set[str] = set()
        while not self._stop.is_set():
            try:
                body()
                backoff = 1.0
            except (ReadTimeoutError, ProtocolError):
                continue  # an idle stream timed out or the server closed it: list and watch again
            except Exception as e:  # any API or network failure: count it, log once per kind, retry
                failure = kube_error(f"watch {name}", e) if isinstance(e, ApiException | HTTPError | OSError) else None
                self._metrics.count_watch_error(name, "temporary" if failure and failure.temporary else "permanent")
                kind = type(e).__name__
                if kind not in logged:
                    log.warning("kubernetes watch failed (%s: %s); retrying", kind, failure or e)
                    logged.add(kind)
                self._stop.wait(backoff)
                backoff = min(_MAX_BACKOFF_SECONDS, backoff * 2)

    def _as_dict(self, pod: Any) -> dict[str, Any]:
        data: dict[str, Any] = self._serializer.sanitize_for_serialization(pod)  # type: ignore[no-untyped-call]
        return data

    def _watch_pods(self) -> None:
        listed = self._api.list_pod_for_all_namespaces(
            field_selector="spec.nodeName!=", _request_timeout=self._request_timeout
        )
        allocations: list[PodAllocation] = []
        resources: list[PodResources] = []
        for p in listed.items:
            obj = self._as_dict(p)
            if (a := allocation_from_pod(obj)) is not None:
                allocations.append(a)
            if (r := resources_from_pod(obj)) is not None:
                resources.append(r)
        self._state.replace_pods(allocations, resources)
        self._metrics.set_allocations(len(self._state.allocations()))

        def bound(key: str, obj: dict[str, Any] | None) -> None:
            self._state.update_pod(
                key, None if obj is None else allocation_from_pod(obj), None if obj is None else resources_from_pod(obj)
            )
            self._metrics.set_allocations(len(self._state.allocations()))

        self._stream_pods("spec.nodeName!=", listed, bound)

    def _stream_pods(self, selector: str, listed: Any, handle: Callable[[str, dict[str, Any] | None], None]) -> None:
        """Watch pods matching `selector` from `listed`'s resource version; `handle(key, object or None if deleted)`,
        the object as the API server sent it (`JsonWatch`)."""
        w = JsonWatch()  # type: ignore[no-untyped-call]
        try:
            for event in w.stream(  # type: ignore[no-untyped-call]
                self._api.list_pod_for_all_namespaces,
                field_selector=selector,
                resource_version=listed.metadata.resource_version if listed.metadata else None,
                timeout_seconds=_WATCH_TIMEOUT_SECONDS,
                _request_timeout=self._request_timeout,
            ):
                if self._stop.is_set():
                    return
                obj = event["object"]
                meta = obj.get("metadata") or {}
                handle(
                    pod_key(meta.get("namespace", ""), meta.get("name", "")),
                    None if event["type"] == "DELETED" else obj,
                )
        except ApiException as e:
            if e.status != _HTTP_GONE:
                raise
        finally:
            w.stop()  # type: ignore[no-untyped-call]

    def _watch_pending(self) -> None:
        """Pods not yet bound (the queue the extender filter holds nodes for)."""
        listed = self._api.list_pod_for_all_namespaces(
            field_selector=_PENDING_SELECTOR, _request_timeout=self._request_timeout
        )
        objs = {_key(o): o for o in (self._as_dict(p) for p in listed.items)}
        with self._claim_pods_lock:
            self._claim_pods = {k: o for k, o in objs.items() if (o.get("spec") or {}).get("resourceClaims")}
            pending = [p for p in (pending_from_pod(o, self._dra) for o in objs.values()) if p is not None]
            self._state.replace_pending(pending)
        # A pod that is bound leaves the selector: the API server sends it as DELETED.
        self._stream_pods(_PENDING_SELECTOR, listed, self._pending_changed)

    def _pending_changed(self, key: str, obj: dict[str, Any] | None) -> None:
        with self._claim_pods_lock:
            if obj is not None and (obj.get("spec") or {}).get("resourceClaims"):
                self._claim_pods[key] = obj
            else:
                self._claim_pods.pop(key, None)
            self._state.update_pending(key, None if obj is None else pending_from_pod(obj, self._dra))

    def _reread_claim_pods(self) -> None:
        """Read every pending pod with claims again against the DRA index as it is now."""
        with self._claim_pods_lock:
            for key, obj in self._claim_pods.items():
                self._state.update_pending(key, pending_from_pod(obj, self._dra))

    def _watch_dra(self, plural: str) -> None:
        """List, then watch, one kind of resource.k8s.io/v1 object into the DRA index; after a change of slices or
        claims, what each pod's claims hold goes to the cluster state."""
        dra, objects = self._dra, self._objects
        assert dra is not None
        assert objects is not None
        replace, put, remove = _dra_handlers(dra, plural)
        holdings = plural in ("resourceslices", "resourceclaims")
        try:
            listed = cast(
                "dict[str, Any]",
                objects.list_cluster_custom_object(
                    _DRA_GROUP, _DRA_VERSION, plural, _request_timeout=self._request_timeout
                ),
            )
        except ApiException as e:
            if e.status != _HTTP_NOT_FOUND:
                raise
            # A cluster older than Kubernetes 1.34 serves no resource.k8s.io/v1: nothing to follow; look again later.
            log.info("resource.k8s.io/v1 %s not served: GPUs from DRA claims are not followed", plural)
            self._stop.wait(_WATCH_TIMEOUT_SECONDS)
            return
        replace(listed.get("items") or [])
        self._reread_claim_pods()
        if holdings:
            self._state.replace_claimed(dra.held_by_pods())
            self._state.replace_mig(dra.mig_by_node())
        w = watch.Watch()  # type: ignore[no-untyped-call]
        try:
            for event in w.stream(  # type: ignore[no-untyped-call]
                objects.list_cluster_custom_object,
                _DRA_GROUP,
                _DRA_VERSION,
                plural,
                resource_version=(listed.get("metadata") or {}).get("resourceVersion"),
                timeout_seconds=_WATCH_TIMEOUT_SECONDS,
                _request_timeout=self._request_timeout,
            ):
                if self._stop.is_set():
                    return
                if event["type"] == "ERROR":
                    raise ApiException(status=(event.get("object") or {}).get("code") or _HTTP_GONE)
                obj: dict[str, Any] = event["object"]
                if event["type"] == "DELETED":
                    remove(obj)
                else:
                    put(obj)
                self._reread_claim_pods()
                if holdings:
                    self._state.replace_claimed(dra.held_by_pods())
                    self._state.replace_mig(dra.mig_by_node())
        except ApiException as e:
            if e.status != _HTTP_GONE:
                raise
        finally:
            w.stop()  # type: ignore[no-untyped-call]

    def _watch_nodes(self) -> None:
        listed = self._api.list_node(_request_timeout=self._request_timeout)
        allocatable: dict[str, tuple[int, int]] = {}
        labels: dict[str, dict[str, str]] = {}
        for n in listed.items:
            if n.metadata is None or not n.metadata.name:
                continue
            value = _allocatable_of_model(n)
            if value is not None:
                allocatable[n.metadata.name] = value
            labels[n.metadata.name] = n.metadata.labels or {}
        # A node deleted while no watch ran (the advisor paused, the API server restarting, a 410 after compaction)
        # sends no DELETED event: absent from the list, it is gone.
        for gone in self._state.listed_nodes() - labels.keys():
            self._state.remove_node(gone)
        self._state.replace_allocatable(allocatable)
        self._state.replace_node_labels(labels)
        w = watch.Watch()  # type: ignore[no-untyped-call]
        try:
            for event in w.stream(  # type: ignore[no-untyped-call]
                self._api.list_node,
                resource_version=listed.metadata.resource_version if listed.metadata else None,
                timeout_seconds=_WATCH_TIMEOUT_SECONDS,
                _request_timeout=self._request_timeout,
            ):
                if self._stop.is_set():
                    return
                name = event["object"].metadata.name
                if event["type"] == "DELETED":
                    self._state.remove_node(name)
                else:
                    self._state.set_allocatable(name, _allocatable_of_model(event["object"]))
                    self._state.set_node_labels(name, event["object"].metadata.labels or {})
        except ApiException as e:
            if e.status != _HTTP_GONE:
                raise
        finally:
            w.stop()  # type: ignore[no-untyped-call]


def start_watch(
    state: ClusterState, metrics: WatchMetrics, *, pending: bool = True, dra: DraIndex | None = None
) -> KubeWatch | None:
    """Load in-cluster (else local kubeconfig) credentials and start watching (the pending pods only with `pending`,
    the Dynamic Resource Allocation objects into `dra` when given); None when neither is available."""
    try:
        load_client_config()
    except KubeUnavailableError as e:
        log.warning("no Kubernetes configuration (%s): allocations are inferred from telemetry only", e.__cause__)
        return None
    objects = client.CustomObjectsApi() if dra is not None else None
    return KubeWatch(state, metrics, client.CoreV1Api(), pending=pending, dra=dra, objects=objects).start()


NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"
"""The extra a bound ServiceAccount token carries naming the node of the pod it was issued to (Kubernetes 1.30+)."""


class TokenReviewer:
    """Which node a collector's ServiceAccount token speaks for, through the API server's TokenReview: the token must
    be valid for `audience`, belong to `service_account` (`system:serviceaccount:<namespace>:<name>`) and carry the
    node-name claim of a pod bound to a node. `api` is a `kubernetes.client.ApiClient` (`make_api_client`)."""

    def __init__(self, api: Any, *, service_account: str, audience: str) -> None:
        self._auth = client.AuthenticationV1Api(api)
        self.service_account = service_account
        self.audience = audience

    def node_of(self, token: str) -> str | None:
        """The node `token` speaks for, or None when it is no collector's valid token; raises `KubeError` when the
        API server cannot say (temporary ones may pass)."""
        body = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=[self.audience]))
        try:
            review = self._auth.create_token_review(body)
        except (ApiException, HTTPError, OSError) as e:
            raise kube_error("TokenReview", e) from e
        status = review.status
        user = status.user if status is not None else None
        if status is None or not status.authenticated or user is None or user.username != self.service_account:
            return None
        nodes = (user.extra or {}).get(NODE_NAME_CLAIM) or []
        return nodes[0] if len(nodes) == 1 and isinstance(nodes[0], str) and nodes[0] else None
