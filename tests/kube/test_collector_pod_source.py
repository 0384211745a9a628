"""The collector's pods from the kubelet's pod-resources API (podresources-standin: upstream's generated service on a
unix socket) and the real API server, with the collector's own ServiceAccount, RBAC (deploy/collector/rbac.yaml: `get`
and `patch` on pods, no `list` or `watch`) and a token bound to its pod on its node, as the DaemonSet runs it.

The kubelet says which pods of the node hold which GPUs (whole, time-sliced replicas, MIG); the collector reads those
pods by name for their UID, labels, owner and containers, and nothing else: it could not list pods if it tried.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from collector.kube import KubeletPodIndex, PodIndex
from collector.kubelet_pods import PodResourcesUnavailableError
from collector.podresources import PodResourcesClient
from collector.snapshot import NodeSnapshot, PodRef
from collector.stats import CollectorStats
from tests.collector.conftest import write_proc
from tests.support.collector_rbac import COLLECTOR_NS, COLLECTOR_SA, apply_deployed, collector_token
from tests.support.fake_nvml import FakeGpu, FakeNvmlConfig, FakeProcess, build_library, fake_nvml_env, write_config
from tests.support.kube import (
    ControlPlane,
    KubeApi,
    KubeApiError,
    create_node,
    gpu_node,
    kubernetes_client,
    namespace,
    write_kubeconfig,
)
from tests.support.podresources import Kubelet, kubelet, pod

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

WORKLOADS = "pod-source"
NODE = "ps-n1"
GIB = 1 << 30
Obj = dict[str, Any]

# what the kubelet of NODE says its pods hold, as NVIDIA's device plugin names the devices
KUBELET_PODS = [
    pod(WORKLOADS, "whole-0", main=[("nvidia.com/gpu", ["GPU-0a1b"])]),
    pod(WORKLOADS, "sliced-0", main=[("nvidia.com/gpu", ["GPU-2c3d::1"])]),
    pod(WORKLOADS, "mig-0", main=[("nvidia.com/mig-1g.10gb", ["MIG-5e6f"])]),
    pod(WORKLOADS, "cpu-0", main=[]),
    pod(WORKLOADS, "vanished-0", main=[("nvidia.com/gpu", ["GPU-0a1b"])]),  # deleted; the kubelet lags behind
]


@dataclass(frozen=True)
class Pods:
    collector: KubeApi  # the collector's token, bound to its pod on NODE
    uids: dict[str, str]  # pod name -> UID, as the API server made them


def _container_id(name: str) -> str:
    return (name.encode().hex() * 64)[:64]


def _workload_pod(name: str, job: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": WORKLOADS,
            "labels": {"gpuadvisor.io/workload": "resnet50-bs64"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job["metadata"]["name"],
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": NODE, "restartPolicy": "Never", "containers": [{"name": "main", "image": "train"}]},
    }


def _collector_token(api: KubeApi) -> str:
    """The collector's ServiceAccount token bound to its pod on NODE (the node name rides in the token)."""
    collector_pod = api.create(
        f"/api/v1/namespaces/{COLLECTOR_NS}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "collector-ps-n1"},
            "spec": {
                "nodeName": NODE,
                "serviceAccountName": COLLECTOR_SA,
                "containers": [{"name": "collector", "image": "gpuadvisor"}],
            },
        },
    )
    return collector_token(api, collector_pod)


@pytest.fixture(scope="module")
def pods(plane: ControlPlane, api: KubeApi) -> Pods:
    apply_deployed(
        plane,
        {
            ("Namespace", COLLECTOR_NS),
            ("ServiceAccount", COLLECTOR_SA),
            ("ClusterRole", "gpuadvisor-collector"),
            ("ClusterRoleBinding", "gpuadvisor-collector"),
        },
    )
    namespace(api, WORKLOADS)
    create_node(api, gpu_node(NODE, gpus=3))
    job = api.create(
        f"/apis/batch/v1/namespaces/{WORKLOADS}/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train"},
            "spec": {
                "suspend": True,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "train"}]}},
            },
        },
    )
    uids = {}
    for name in ("whole-0", "sliced-0", "mig-0", "cpu-0"):
        created = api.create(f"/api/v1/namespaces/{WORKLOADS}/pods", _workload_pod(name, job))
        uids[name] = created["metadata"]["uid"]
        status = {"name": "main", "containerID": f"containerd://{_container_id(name)}", "image": "train"}
        status |= {"imageID": "", "ready": True, "restartCount": 0, "state": {"running": {}}}
        api.merge_patch(
            f"/api/v1/namespaces/{WORKLOADS}/pods/{name}/status", {"status": {"containerStatuses": [status]}}
        )
    return Pods(api.as_token(_collector_token(api)), uids)


@pytest.fixture
def standin() -> Iterator[Kubelet]:
    with kubelet(KUBELET_PODS) as started:
        yield started


def _index(
    pods: Pods, standin: Kubelet, stats: CollectorStats, clock: Callable[[], float] = time.monotonic
) -> tuple[KubeletPodIndex, PodResourcesClient]:
    client = PodResourcesClient(standin.socket, timeout_seconds=10)
    return KubeletPodIndex(kubernetes_client(pods.collector), NODE, client.list, stats=stats, clock=clock), client


def test_the_collector_cannot_list_pods_and_reads_only_the_pods_holding_gpus(pods: Pods, standin: Kubelet) -> None:
    for path in ("/api/v1/pods", f"/api/v1/namespaces/{WORKLOADS}/pods"):
        with pytest.raises(KubeApiError) as refused:
            pods.collector.get(path)
        assert refused.value.status_code == 403
    stats = CollectorStats()
    index, client = _index(pods, standin, stats)
    try:
        assert index.refresh() == 4  # whole, sliced, MIG and the vanished one; not the pod without a GPU
        for name in ("whole-0", "sliced-0", "mig-0"):
            info = index.get(pods.uids[name])
            assert info is not None, name
            assert (info.namespace, info.name, info.owner_kind, info.owner_name) == (WORKLOADS, name, "Job", "train")
            assert info.workload == "resnet50-bs64"
            assert info.container_name(_container_id(name)) == "main"
        assert len(index) == 3
        assert stats.view().errors == {}  # a pod the API server no longer has is no error
        holders = {(a.pod, a.device_id): info.uid if info else None for a, info in index.allocations()}
        assert holders == {
            ("whole-0", "GPU-0a1b"): pods.uids["whole-0"],
            ("sliced-0", "GPU-2c3d::1"): pods.uids["sliced-0"],
            ("mig-0", "MIG-5e6f"): pods.uids["mig-0"],
            ("vanished-0", "GPU-0a1b"): None,
        }
        assert index.refresh() == 0  # nothing read twice
    finally:
        client.close()


def test_a_gpu_process_in_a_pod_without_a_gpu_gets_its_pod_read(pods: Pods, standin: Kubelet) -> None:
    index, client = _index(pods, standin, CollectorStats())
    try:
        index.refresh()
        assert index.get(pods.uids["cpu-0"]) is None  # a miss: read on the next refresh
        assert index.refresh() == 1  # the pod without a GPU (the others were read less than a minute ago)
        info = index.get(pods.uids["cpu-0"])
        assert info is not None
        assert info.name == "cpu-0"
    finally:
        client.close()


def test_a_pod_created_again_under_its_name_is_read_again(api: KubeApi, pods: Pods, standin: Kubelet) -> None:
    """A StatefulSet's pod replaced on the same node: the kubelet lists the same name and devices, the cgroups name a
    new UID; the index reads the pod again once its reading is a minute old."""
    path = f"/api/v1/namespaces/{WORKLOADS}/pods/again-0"
    spec = {"nodeName": NODE, "containers": [{"name": "main", "image": "train"}]}
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "again-0"}, "spec": spec}
    first = api.create(f"/api/v1/namespaces/{WORKLOADS}/pods", manifest)["metadata"]["uid"]
    standin.serve([*KUBELET_PODS, pod(WORKLOADS, "again-0", main=[("nvidia.com/gpu", ["GPU-9c9d"])])])
    now = [1000.0]
    index, client = _index(pods, standin, CollectorStats(), clock=lambda: now[0])
    try:
        index.refresh()
        assert index.get(first) is not None
        api.request("DELETE", path, params={"gracePeriodSeconds": "0"})
        second = api.create(f"/api/v1/namespaces/{WORKLOADS}/pods", manifest)["metadata"]["uid"]
        assert index.get(second) is None  # a miss
        now[0] += 30
        assert index.refresh() == 1  # only the never-read pod without a GPU; again-0 was read 30 s ago
        assert index.get(second) is None
        now[0] += 31
        index.refresh()
        info = index.get(second)
        assert info is not None
        assert info.name == "again-0"
        assert index.get(first) is None
    finally:
        client.close()
        api.request("DELETE", path, params={"gracePeriodSeconds": "0"})


def test_pods_the_kubelet_lets_go_of_are_forgotten_and_a_silent_kubelet_empties_nothing(
    pods: Pods, standin: Kubelet
) -> None:
    stats = CollectorStats()
    index, client = _index(pods, standin, stats)
    try:
        index.refresh()
        standin.serve(KUBELET_PODS[1:])
        index.refresh()
        assert index.get(pods.uids["whole-0"]) is None
        assert index.get(pods.uids["sliced-0"]) is not None
        standin.process.terminate()
        standin.process.wait(timeout=30)
        with pytest.raises(PodResourcesUnavailableError):
            index.refresh()
        assert index.get(pods.uids["sliced-0"]) is not None
    finally:
        client.close()


def test_the_fallback_list_is_refused_by_the_collectors_rbac(pods: Pods) -> None:
    """Without a kubelet socket the collector lists its node's pods: the shipped RBAC does not allow it (the
    operator adds `list`/`watch` where a kubelet lacks the API, docs/operations.md)."""
    index = PodIndex(kubernetes_client(pods.collector), NODE, stats=CollectorStats())
    with pytest.raises(ApiException) as refused:
        index.refresh()
    assert refused.value.status == 403


def test_collector_run_names_the_pods_from_the_kubelet(
    plane: ControlPlane, pods: Pods, standin: Kubelet, tmp_path: Path
) -> None:
    """`gpuadvisor collector run --once` as the DaemonSet runs it (stand-in NVML, fixture /proc): processes of the
    pods holding GPUs carry namespace, name, container and owner."""
    config = FakeNvmlConfig(
        gpus=[
            FakeGpu(uuid="GPU-0a1b", processes=[FakeProcess(2001, 6 * GIB)]),
            FakeGpu(uuid="GPU-2c3d", pci_bus_id="00000000:18:00.0", processes=[FakeProcess(2002, 2 * GIB)]),
        ]
    )
    cgroup = "0::/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{}.scope\n"
    proc = write_proc(
        tmp_path / "proc",
        {
            2001: cgroup.format(pods.uids["whole-0"].replace("-", "_"), _container_id("whole-0")),
            2002: cgroup.format(pods.uids["sliced-0"].replace("-", "_"), _container_id("sliced-0")),
        },
    )
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", plane.url, pods.collector.token, plane.ca_file)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUADVISOR_") and k != "KUBECONFIG"}
    clean.pop("KUBERNETES_SERVICE_HOST", None)
    env = {
        **clean,
        **fake_nvml_env(build_library(), write_config(config, tmp_path / "nvml.conf")),
        "KUBECONFIG": str(kubeconfig),
        "GPUADVISOR_POD_RESOURCES_SOCKET": str(standin.socket),
    }
    argv = ["collector", "run", "--once", "--format", "json", "--node", NODE, "--proc-root", str(proc)]
    result = subprocess.run(
        [sys.executable, "-m", "advisor.cli", *argv], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "pod source: the kubelet's pod-resources API" in result.stderr
    snapshot = NodeSnapshot.model_validate_json(result.stdout)
    refs = {p.pid: p.pod for g in snapshot.gpus for p in g.processes}
    for pid, name in ((2001, "whole-0"), (2002, "sliced-0")):
        assert refs[pid] == PodRef(
            namespace=WORKLOADS,
            name=name,
            uid=pods.uids[name],
            container="main",
            workload="resnet50-bs64",
            owner_kind="Job",
            owner_name="train",
        ), json.dumps(snapshot.model_dump(mode="json"))
