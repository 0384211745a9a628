"""The collector's writes as the real API server judges them: the DaemonSet's own ServiceAccount and RBAC
(deploy/collector/rbac.yaml), a token bound to a collector pod on its node (so the token carries the node name, as a
projected token does), and the ValidatingAdmissionPolicy (deploy/collector/admission-policy.yaml) enforced by the
API server: annotations `gpuadvisor.io/*` of its own node and its pods, and nothing else.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from collector.kube import PodAnnotator
from collector.snapshot import GpuSnapshot, Link, LinkLevel, NodeSnapshot, PodRef, ProcessSnapshot
from collector.stats import CollectorStats
from tests.support.collector_rbac import COLLECTOR_SA, apply_deployed, collector_token
from tests.support.kube import (
    ControlPlane,
    KubeApi,
    KubeApiError,
    create_node,
    gpu_node,
    kubernetes_client,
    namespace,
)
from tests.support.net import wait_until

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

NS = "gpuadvisor-collector"
WORKLOADS = "collector-ml"
GIB = 1 << 30
Obj = dict[str, Any]


@dataclass(frozen=True)
class Cluster:
    plane: ControlPlane
    admin: KubeApi
    collector_n1: KubeApi  # the collector's token, bound to its pod on cw-n1
    collector_unbound: KubeApi  # the collector's token without a pod (so without a node)


def _pod(name: str, ns: str, node: str, *, service_account: str = "default", annotations: Obj | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app": name},
            "annotations": {"example.com/owner": "team-a", **(annotations or {})},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "owner",
                    "uid": "0b4f7a2e-0000-4000-8000-000000000001",
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "serviceAccountName": service_account,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": "train:latest"}],
        },
    }


@pytest.fixture(scope="module")
def cluster(plane: ControlPlane, api: KubeApi) -> Cluster:
    apply_deployed(
        plane,
        {
            ("Namespace", NS),
            ("ServiceAccount", COLLECTOR_SA),
            ("ClusterRole", "gpuadvisor-collector"),
            ("ClusterRoleBinding", "gpuadvisor-collector"),
            ("ValidatingAdmissionPolicy", "gpuadvisor-collector-node-scope"),
            ("ValidatingAdmissionPolicyBinding", "gpuadvisor-collector-node-scope"),
        },
    )
    namespace(api, WORKLOADS)
    for node in ("cw-n1", "cw-n2"):
        create_node(api, gpu_node(node))
    collector_pod = api.create(
        f"/api/v1/namespaces/{NS}/pods", _pod("collector-cw-n1", NS, "cw-n1", service_account=COLLECTOR_SA)
    )
    for name, node in (("train-0", "cw-n1"), ("train-1", "cw-n2")):
        api.create(f"/api/v1/namespaces/{WORKLOADS}/pods", _pod(name, WORKLOADS, node))
    bound = api.as_token(collector_token(api, collector_pod))
    unbound = api.as_token(collector_token(api, None))
    # The API server loads admission policies through an informer: wait until it enforces this one.
    assert wait_until(lambda: _refused(lambda: _merge(bound, "/api/v1/nodes/cw-n2", {"gpuadvisor.io/x": "1"})), 30)
    return Cluster(plane, api, bound, unbound)


def _merge(api: KubeApi, path: str, annotations: dict[str, str | None]) -> Obj:
    return api.merge_patch(path, {"metadata": {"annotations": annotations}})


def _refused(write: Callable[[], object]) -> KubeApiError | None:
    try:
        write()
    except KubeApiError as e:
        return e
    return None


def _refusal(write: Callable[[], object]) -> KubeApiError:
    """The API server's answer to a write it must refuse."""
    refused = _refused(write)
    assert refused is not None, "admitted"
    return refused


def _annotator(cluster: Cluster, node: str) -> tuple[PodAnnotator, CollectorStats]:
    """The collector's own annotator with the collector's token (its kubernetes client, as in the DaemonSet)."""
    stats = CollectorStats()
    return PodAnnotator(kubernetes_client(cluster.collector_n1), node, stats=stats), stats


def _snapshot(node: str, pod: Obj) -> NodeSnapshot:
    meta = pod["metadata"]
    ref = PodRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"], container="main")
    used = ProcessSnapshot(pid=41, memory_used_bytes=6 * GIB, sm_utilization_ratio=0.6, pod=ref)
    return NodeSnapshot(
        node=node,
        timestamp=datetime.now(UTC),
        gpus=(
            GpuSnapshot(index=0, uuid=f"GPU-{node}-0", processes=(used,)),
            GpuSnapshot(index=1, uuid=f"GPU-{node}-1"),
        ),
        links=(Link(a=0, b=1, level=LinkLevel.NVLINK),),
    )


def test_the_collector_annotates_the_pods_of_its_node_and_its_node(cluster: Cluster) -> None:
    pod = cluster.admin.get(f"/api/v1/namespaces/{WORKLOADS}/pods/train-0")
    annotator, stats = _annotator(cluster, "cw-n1")
    assert annotator.apply(_snapshot("cw-n1", pod)) == 2  # the pod and the node's topology
    assert stats.view().errors == {}
    annotated = cluster.admin.get(f"/api/v1/namespaces/{WORKLOADS}/pods/train-0")["metadata"]["annotations"]
    assert annotated["example.com/owner"] == "team-a"
    assert {k for k in annotated if k.startswith("gpuadvisor.io/")} >= {
        "gpuadvisor.io/gpus",
        "gpuadvisor.io/gpu-utilization",
    }
    node = cluster.admin.get("/api/v1/nodes/cw-n1")["metadata"]["annotations"]
    assert "gpuadvisor.io/gpu-topology" in node


def test_the_collector_cannot_annotate_another_node_nor_its_pods(cluster: Cluster) -> None:
    pod = cluster.admin.get(f"/api/v1/namespaces/{WORKLOADS}/pods/train-1")
    annotator, stats = _annotator(cluster, "cw-n2")  # its token is bound to its pod on cw-n1
    assert annotator.apply(_snapshot("cw-n2", pod)) == 0
    assert stats.view().errors == {"annotate": 2}
    assert not any(
        k.startswith("gpuadvisor.io/")
        for k in cluster.admin.get(f"/api/v1/namespaces/{WORKLOADS}/pods/train-1")["metadata"]["annotations"]
    )
    refused = _refusal(
        lambda: _merge(cluster.collector_n1, "/api/v1/nodes/cw-n2", {"gpuadvisor.io/gpu-topology": "{}"})
    )
    assert refused.status_code == 403
    assert 'may not change nodes of node "cw-n2"' in str(refused)


def test_a_token_without_its_node_may_write_nothing(cluster: Cluster) -> None:
    refused = _refusal(lambda: _merge(cluster.collector_unbound, "/api/v1/nodes/cw-n1", {"gpuadvisor.io/x": "1"}))
    assert refused.status_code == 403


@pytest.mark.parametrize(
    ("what", "change"),
    [
        ("another annotation", lambda o: o["metadata"]["annotations"].update({"example.com/owner": "team-b"})),
        ("a removed annotation", lambda o: o["metadata"]["annotations"].update({"example.com/owner": None})),
        ("a kubernetes.io annotation", lambda o: o["metadata"]["annotations"].update({"kubernetes.io/anything": "x"})),
        ("a label", lambda o: o["metadata"].update({"labels": {"gpuadvisor.io/workload": "other"}})),
        ("owner references", lambda o: o["metadata"].update({"ownerReferences": []})),
        ("a finalizer", lambda o: o["metadata"].update({"finalizers": ["example.com/keep"]})),
        ("the spec", lambda o: o.update({"spec": {"activeDeadlineSeconds": 60}})),
    ],
)
def test_any_other_change_to_its_own_pods_is_refused(
    cluster: Cluster, what: str, change: Callable[[Obj], None]
) -> None:
    path = f"/api/v1/namespaces/{WORKLOADS}/pods/train-0"
    patch: Obj = {"metadata": {"annotations": {}}}
    change(patch)
    before = cluster.admin.get(path)
    refused = _refusal(lambda: cluster.collector_n1.merge_patch(path, patch))
    assert refused.status_code == 403, refused
    # owner references: the API server's OwnerReferencesPermissionEnforcement (on here, as in hardened clusters)
    # refuses before the policy is asked; without it the policy refuses
    expected = "cannot set an ownerRef" if what == "owner references" else "may change only gpuadvisor.io/* annotations"
    assert expected in str(refused), refused
    after = cluster.admin.get(path)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_its_node_is_not_cordoned_nor_tainted_nor_relabelled(cluster: Cluster) -> None:
    for patch in (
        {"spec": {"unschedulable": True}},
        {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}},
        {"metadata": {"labels": {"nvidia.com/gpu.product": "fake"}}},
    ):
        refused = _refusal(lambda p=copy.deepcopy(patch): cluster.collector_n1.merge_patch("/api/v1/nodes/cw-n1", p))
        assert refused.status_code == 403, patch


def test_rbac_gives_the_collector_no_more_than_its_role(cluster: Cluster) -> None:
    """Pods are read by name only (the kubelet says which): no list or watch, cluster-wide or in a namespace, no
    delete, no Secrets — the API server's RBAC, not the policy, refuses."""
    for method, path in (
        ("GET", "/api/v1/pods"),
        ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dcw-n1"),
        ("GET", "/api/v1/pods?watch=true&timeoutSeconds=1"),
        ("GET", f"/api/v1/namespaces/{WORKLOADS}/pods"),
        ("DELETE", f"/api/v1/namespaces/{WORKLOADS}/pods/train-0"),
        ("GET", f"/api/v1/namespaces/{NS}/secrets"),
    ):
        refused = _refused(lambda m=method, p=path: cluster.collector_n1.request(m, p))
        assert refused is not None, f"{method} {path} admitted"
        assert refused.status_code == 403, path
        assert f"serviceaccount:{NS}:{COLLECTOR_SA}" in str(refused)
    assert cluster.collector_n1.get(f"/api/v1/namespaces/{WORKLOADS}/pods/train-0")["spec"]["nodeName"] == "cw-n1"
