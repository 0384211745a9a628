"""The profiler's only contact with Kubernetes: the kubernetes client behind `ClusterApi`, and kopf's wiring.

Objects cross this boundary as plain JSON dicts (the API server's own camelCase form), so the controller and
the recorder stay free of client types. Client errors become `KubeError`, split into permanent (bad request,
forbidden) and temporary (unreachable, server error, conflict during a race) so callers can retry the latter.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from urllib3.exceptions import HTTPError

from collector.kube import kube_error
from collector.kube_errors import KubeError, KubePermanentError
from profiler.controller import Controller, NamespaceForbiddenError, retry_status
from profiler.recorder import Recorder
from profiler.results import Phase
from profiler.spec import API_GROUP, API_VERSION, PLURAL, TrialRun

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class KubeForbiddenError(KubePermanentError, NamespaceForbiddenError):
    """HTTP 403: the ServiceAccount lacks the permission (RBAC); permanent until an admin grants it."""


def _error(action: str, e: Exception) -> KubeError:
    """`e` as the shared error tree's (`collector.kube.kube_error`); a 403 as `KubeForbiddenError` (the profiler or
    the advisor may not act in that namespace); an object the client refuses to send is a permanent error naming the
    offending field."""
    if isinstance(e, ApiException) and e.status == 403:
        return KubeForbiddenError(str(kube_error(action, e)))
    if isinstance(e, ValidationError):
        first = e.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        return KubePermanentError(f"{action}: invalid object at {where}: {first['msg']}")
    return kube_error(action, e)


def _retry_after_seconds(e: KubeError) -> float | None:
    """The delay the API server asked for with its answer's Retry-After header (whole seconds), if it gave one."""
    cause = e.__cause__
    headers = cause.headers if isinstance(cause, ApiException) else None
    value = headers.get("Retry-After") if headers is not None else None
    if value is None or not str(value).strip().isdigit():
        return None
    return float(str(value).strip())


# How long one API call of the controller, the recorder or the CLI may take before it counts as failed (temporary).
DEFAULT_REQUEST_TIMEOUT_SECONDS = 30.0

# kopf's own delay for a `TemporaryError` raised without one (kopf.TemporaryError's default).
KOPF_DEFAULT_DELAY_SECONDS = 60.0


def kopf_error(e: KubeError) -> kopf.TemporaryError | kopf.PermanentError:
    """A failed API call as kopf should treat the handler that made it: retried after a delay when temporary (a 503,
    a timeout) — the server's Retry-After when it sent one, else kopf's default — given up on when permanent (a 403
    will not heal by asking again)."""
    if e.temporary:
        delay = _retry_after_seconds(e)
        return kopf.TemporaryError(str(e)) if delay is None else kopf.TemporaryError(str(e), delay=delay)
    return kopf.PermanentError(str(e))


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _raw(response: Any) -> Obj:
    data: Obj = json.loads(response.data)
    return data


class KubeCluster:
    """`profiler.controller.ClusterApi` (plus what the recorder and the CLI need) over the kubernetes client."""

    def __init__(
        self, api: client.ApiClient, *, request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS
    ) -> None:
        # Every call has a deadline: a call that never returns (an API server gone without closing the connection)
        # would hold the controller's lock, so neither later reconciles nor a TrialRun's delete handler could run,
        # and the TrialRun would stay Terminating behind kopf's finalizer.
        self.timeout = request_timeout_seconds
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def list_nodes(self) -> list[Obj]:
        try:
            return list(
                _raw(self.core.list_node(_preload_content=False, _request_timeout=self.timeout)).get("items", [])
            )
        except (ApiException, HTTPError) as e:
            raise _error("list nodes", e) from e

    def node_labels(self, name: str) -> dict[str, str]:
        try:
            node = _raw(self.core.read_node(name, _preload_content=False, _request_timeout=self.timeout))
        except ApiException as e:
            if e.status == 404:
                return {}
            raise _error(f"read node {name}", e) from e
        except HTTPError as e:
            raise _error(f"read node {name}", e) from e
        return dict(node.get("metadata", {}).get("labels", {}) or {})

    def list_jobs(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
        try:
            response = self.batch.list_namespaced_job(
                namespace, label_selector=_selector(labels), _preload_content=False, _request_timeout=self.timeout
            )
        except (ApiException, HTTPError) as e:
            raise _error(f"list jobs in {namespace}", e) from e
        return list(_raw(response).get("items", []))

    def create_job(self, namespace: str, manifest: Obj) -> None:
        try:
            self.batch.create_namespaced_job(namespace, cast(Any, manifest), _request_timeout=self.timeout)
        except ApiException as e:
            if e.status == 409:
                return
            raise _error(f"create job {manifest['metadata']['name']}", e) from e
        except (HTTPError, ValidationError) as e:
            raise _error(f"create job {manifest['metadata']['name']}", e) from e

    def delete_job(self, namespace: str, name: str) -> None:
        try:
            self.batch.delete_namespaced_job(
                name, namespace, propagation_policy="Background", _request_timeout=self.timeout
            )
        except ApiException as e:
            if e.status == 404:
                return
            raise _error(f"delete job {name}", e) from e
        except HTTPError as e:
            raise _error(f"delete job {name}", e) from e

    def list_pods(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
        try:
            response = self.core.list_namespaced_pod(
                namespace, label_selector=_selector(labels), _preload_content=False, _request_timeout=self.timeout
            )
        except (ApiException, HTTPError) as e:
            raise _error(f"list pods in {namespace}", e) from e
        return list(_raw(response).get("items", []))

    def pod_log(self, namespace: str, name: str) -> str:
        """The pod's log, or "" while there is none yet (container not started, log already gone)."""
        try:
            response: Any = self.core.read_namespaced_pod_log(
                name, namespace, _preload_content=False, _request_timeout=self.timeout
            )
        except ApiException as e:
            if e.status in (400, 404):
                return ""
            raise _error(f"read log of pod {name}", e) from e
        except HTTPError as e:
            raise _error(f"read log of pod {name}", e) from e
        text: str = response.data.decode("utf-8", errors="replace")
        return text

    def submit_trialrun(self, run: TrialRun) -> Obj:
        """Create the TrialRun resource; a run of that name already existing is a permanent error."""
        try:
            response = self.custom.create_namespaced_custom_object(
                API_GROUP,
                API_VERSION,
                run.metadata.namespace,
                PLURAL,
                run.to_manifest(),
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        except ApiException as e:
            raise _error(f"create TrialRun {run.metadata.namespace}/{run.metadata.name}", e) from e
        except (HTTPError, ValidationError) as e:
            raise _error(f"create TrialRun {run.metadata.namespace}/{run.metadata.name}", e) from e
        return _raw(response)


def patchable(value: Any) -> Any:
    """`value` without the None-valued keys of the objects it holds, at any depth, list items included: a merge
    patch's null deletes a key (RFC 7386), and the API server drops those inside the lists it stores as well
    (json-patch's MergePatch prunes nulls from a value it adds), so a status patched with them reads back different
    from what was sent, which kopf logs as "Merge-patching finished with inconsistencies". Null list items stay (the
    server keeps them; a per-side figure not measured is null in its place)."""
    if isinstance(value, Mapping):
        return {k: patchable(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [patchable(v) for v in value]
    return value


def _plain(body: Mapping[str, Any]) -> Obj:
    """kopf's body view as the plain dict the controller expects."""
    data: Obj = json.loads(json.dumps({k: body[k] for k in body}, default=dict))
    return data


def configure_kopf(settings: kopf.OperatorSettings, **_: Any) -> None:
    """kopf's settings at start-up. No Kubernetes Events: what a user needs is in the TrialRun's status, and kopf
    would post one per handler log line (every timer tick) where its version posts log lines (older ones did so by
    default, kopf >= 1.45 only when `posting.loggers` is set). The ClusterRole (deploy/profiler/rbac.yaml) grants no
    `create events` accordingly."""
    settings.posting.enabled = False


def _store_probe(sessions: sessionmaker[Session]) -> Callable[..., dict[str, Any]]:
    """The liveness endpoint's `store` probe over `sessions`."""

    def store(**_: Any) -> dict[str, Any]:
        """Whether the store answers a trivial query: the endpoint's `store` entry. Reported, not raised: a store
        outage is not cured by restarting the profiler (whose start-up migration would then fail in a crash loop),
        and the controller carries on from the TrialRuns' status once the store is back."""
        started = time.monotonic()
        try:
            with sessions() as session:
                session.execute(text("SELECT 1"))
        except SQLAlchemyError as e:
            log.warning("store unreachable: %s", e.__class__.__name__)
            return {"reachable": False, "error": e.__class__.__name__}
        return {"reachable": True, "latency_seconds": round(time.monotonic() - started, 4)}

    return store


def build_registry(
    *,
    controller: Controller,
    recorder: Recorder | None,
    sessions: sessionmaker[Session],
    interval_seconds: float,
) -> kopf.OperatorRegistry:
    """kopf handlers: reconcile TrialRuns on create/resume/spec change and on a timer; record finished pods;
    report the store's health to the liveness endpoint.

    kopf logs in with the kubernetes client's credentials (in-cluster, else the kubeconfig), like
    `collector.kube.make_api_client`.
    """
    registry = kopf.OperatorRegistry()
    registry_kw: dict[str, Any] = {"registry": registry}
    kopf.on.login(**registry_kw)(kopf.login_via_client)

    kopf.on.startup(**registry_kw)(configure_kopf)

    # PERMANENT: any other failure answers HTTP 500 at once; kopf's default (retry after a delay) would hold the
    # probe's request open until the kubelet times it out.
    kopf.on.probe(id="store", errors=kopf.ErrorsMode.PERMANENT, **registry_kw)(_store_probe(sessions))

    def reconcile(body: kopf.Body, patch: kopf.Patch, retry: int = 0, **_: Any) -> None:
        current = body.get("status") or {}
        phase = current.get("phase")
        if phase in (Phase.SUCCEEDED, Phase.FAILED) and current.get("trials") is not None:
            return
        try:
            status = controller.reconcile(_plain(body))
        except KubeError as e:
            error = kopf_error(e)
            if isinstance(error, kopf.TemporaryError):
                # kopf keeps its retry record in an annotation nobody reads: say it in the status (kopf applies the
                # patch after a failed handler too), where `kubectl get trialrun` shows it.
                delay = error.delay if error.delay is not None else KOPF_DEFAULT_DELAY_SECONDS
                next_try = datetime.now(UTC) + timedelta(seconds=delay)
                waiting = retry_status(str(e), attempt=retry + 1, next_try=next_try, status=_plain(current))
                for key, value in waiting.items():
                    patch.status[key] = patchable(value)
            raise error from e
        if "retry" in current:
            status["retry"] = None  # the merge patch's way to remove it
        for key, value in status.items():
            patch.status[key] = patchable(value)

    def forget(name: str, namespace: str | None, uid: str, **_: Any) -> None:
        if namespace is None:  # TrialRuns are namespaced
            return
        try:
            controller.forget_run(namespace, name, uid)
        except KubeError as e:
            raise kopf_error(e) from e

    resource = (API_GROUP, API_VERSION, PLURAL)
    # The TrialRun's Jobs are deleted here, not only by the garbage collector (their owner references): kopf's
    # finalizer (which its timers need anyway) holds the deletion until this handler has run, retrying a temporary
    # failure, so the Jobs go where no garbage collector runs too, and the TrialRun's name is free for a new run
    # only once its Jobs are gone.
    kopf.on.delete(*resource, **registry_kw)(forget)
    kopf.on.create(*resource, **registry_kw)(reconcile)
    kopf.on.resume(*resource, **registry_kw)(reconcile)
    kopf.on.update(*resource, field="spec", **registry_kw)(reconcile)
    kopf.timer(*resource, interval=interval_seconds, idle=None, **registry_kw)(reconcile)

    if recorder is not None:

        def record(event: kopf.RawEvent, **_: Any) -> None:
            body = event["object"]
            if event["type"] == "DELETED":
                recorder.forget(body)
                return
            try:
                recorder.observe(body)
            except KubeError as e:
                raise kopf_error(e) from e

        kopf.on.event("", "v1", "pods", **registry_kw)(record)
    return registry


def run_operator(
    *,
    controller: Controller,
    recorder: Recorder | None,
    sessions: sessionmaker[Session],
    namespace: str | None,
    interval_seconds: float,
    liveness_endpoint: str,
) -> None:
    """Run the controller (and the recorder) until interrupted; `namespace=None` watches the whole cluster.

    kopf serves `liveness_endpoint` ("" for none): HTTP 200 with the probe handlers' results (the store's
    reachability among them) while its event loop and handler threads run, no answer when they are stuck.
    """
    registry = build_registry(
        controller=controller, recorder=recorder, sessions=sessions, interval_seconds=interval_seconds
    )
    # Every probe would log a success line (kopf) and an access line (aiohttp): keep only failures.
    for name in ("kopf.activities.probe", "aiohttp.access"):
        logging.getLogger(name).setLevel(logging.WARNING)
    kopf.run(
        registry=registry,
        standalone=True,
        clusterwide=namespace is None,
        namespaces=[namespace] if namespace else [],
        liveness_endpoint=liveness_endpoint or None,
    )
