"""The collector's own install objects in the session control plane, and its ServiceAccount's tokens: what the kube
tests of the collector's reads (test_collector_pod_source) and writes (test_collector_writes) run as."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.support.kube import ControlPlane, KubeApi, kubectl, which_kubectl

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COLLECTOR_NS = "gpuadvisor-collector"
COLLECTOR_SA = "gpuadvisor-collector"


def apply_deployed(plane: ControlPlane, wanted: set[tuple[str, str]]) -> None:
    """Server-side apply the objects of `deploy/` (as `kubectl kustomize` renders it) named in `wanted` as (kind,
    name) pairs; each must be there."""
    which_kubectl()
    rendered = [d for d in yaml.safe_load_all(kubectl(plane, "kustomize", str(DEPLOY))) if d]
    objects = [o for o in rendered if (o["kind"], o["metadata"]["name"]) in wanted]
    assert len(objects) == len(wanted), sorted(wanted - {(o["kind"], o["metadata"]["name"]) for o in objects})
    args = ["apply", "--server-side", "--field-manager=gpuadvisor-tests", "-f", "-"]
    kubectl(plane, *args, stdin=yaml.safe_dump_all(objects))


def collector_token(admin: KubeApi, bound_pod: dict[str, Any] | None) -> str:
    """A token of the collector's ServiceAccount, bound to `bound_pod` when given (the API server then puts the
    pod's node name in the token's user info, as for the DaemonSet's pods), an unbound one otherwise."""
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if bound_pod is not None:
        meta = bound_pod["metadata"]
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    answer = admin.create(f"/api/v1/namespaces/{COLLECTOR_NS}/serviceaccounts/{COLLECTOR_SA}/token", request)
    token: str = answer["status"]["token"]
    return token
