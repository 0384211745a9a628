"""Request bodies as the upstream callers write them, for tests and benchmarks.

Each builder follows the Go types the caller encodes with `encoding/json`, field for field:
- kube-scheduler's HTTP extender: `k8s.io/kube-scheduler/extender/v1` ExtenderArgs (`Pod`, `Nodes`, `NodeNames`: no
  JSON tags, so Go field names; `Nodes` and `NodeNames` null when unset) around a full `k8s.io/api/core/v1` Pod and
  NodeList (their own lowerCamel tags);
- Volcano's extender plugin (`volcano-sh/volcano` pkg/scheduler/plugins/extender): PredicateRequest
  `{"task", "node"}` and PrioritizeRequest `{"task", "nodes"}` of `api.TaskInfo` / `api.NodeInfo` (no JSON tags:
  `UID`, `Name`, `Resreq`, `Pod`, `Tasks`, `Node`, …; a NodeInfo carries its resident tasks, each with its full Pod);
- the device plugin API `k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1` PreferredAllocationRequest
  (`container_requests`, `available_deviceIDs`, `must_include_deviceIDs`, `allocation_size`: the proto names, which
  are also its Go JSON tags).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]
CREATED = "2026-11-24T09:00:00Z"
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"


def container(
    name: str = "main",
    *,
    limits: Mapping[str, Any] | None = None,
    requests: Mapping[str, Any] | None = None,
    restart_policy: str | None = None,
) -> Obj:
    """A v1.Container as the API server returns it (defaults filled in); `restart_policy` for init containers."""
    out: Obj = {
        "name": name,
        "image": "registry.example/train:1.0",
        "command": ["python", "train.py"],
        "resources": {
            **({"limits": dict(limits)} if limits else {}),
            # the API server defaults requests to limits for extended resources
            **({"requests": dict(requests if requests is not None else limits or {})} if limits or requests else {}),
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    if restart_policy is not None:
        out["restartPolicy"] = restart_policy
    return out


def pod(
    name: str = "train-0",
    *,
    namespace: str = "ml",
    containers: Sequence[Obj] | None = None,
    init_containers: Sequence[Obj] = (),
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_name: str | None = None,
    scheduler: str = "gpuadvisor-scheduler",
    node_selector: Mapping[str, str] | None = None,
) -> Obj:
    """A full v1.Pod (Pending unless `node_name`): what the scheduler and Volcano put in their requests."""
    spec: Obj = {
        "volumes": [
            {"name": "kube-api-access-x7k2p", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
        ],
        "containers": list(containers if containers is not None else [container(limits={"nvidia.com/gpu": "1"})]),
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": scheduler,
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if init_containers:
        spec["initContainers"] = list(init_containers)
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if node_name:
        spec["nodeName"] = node_name
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"6f1c2a4e-0000-4000-8000-{abs(hash((namespace, name))) % 10**12:012d}",
            "resourceVersion": "918273",
            "creationTimestamp": CREATED,
            "labels": {"gpuadvisor.io/workload": "resnet50-bs64", **(labels or {})},
            "annotations": dict(annotations or {}),
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": name.rsplit("-", 1)[0],
                    "uid": "0b9e-job",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
        "status": _running_status(spec) if node_name else {"phase": "Pending", "qosClass": "BestEffort"},
    }


def _running_status(spec: Obj) -> Obj:
    """A running pod's status as the kubelet reports it: conditions and one status per container."""
    conditions = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": CREATED}
        for kind in ("Initialized", "Ready", "PodScheduled")
    ]
    statuses = [
        {
            "name": c["name"],
            "state": {"running": {"startedAt": CREATED}},
            "ready": True,
            "restartCount": 0,
            "image": c["image"],
            "containerID": "containerd://" + "f" * 64,
            "started": True,
        }
        for c in spec["containers"]
    ]
    return {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": "10.0.0.7",
        "podIP": "10.244.3.9",
        "startTime": CREATED,
        "containerStatuses": statuses,
        "qosClass": "Burstable",
    }


def node(name: str, *, gpus: int = 8, product: str = GPU_PRODUCT) -> Obj:
    """A full v1.Node with the fields a scheduler not `nodeCacheCapable` sends and must get back unchanged."""
    resources = {"cpu": "96", "memory": "1056763112Ki", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {
            "name": name,
            "uid": f"node-uid-{name}",
            "resourceVersion": "7340012",
            "creationTimestamp": "2026-01-02T03:04:05Z",
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpus),
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "finalizers": ["example.com/node-drain-guard"],
            "ownerReferences": [
                {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine", "name": f"machine-{name}", "uid": "m-1"}
            ],
        },
        "spec": {"podCIDR": "10.244.3.0/24", "providerID": f"aws:///us-east-1a/i-{name}"},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastHeartbeatTime": "2026-11-24T09:00:00Z",
                    "lastTransitionTime": "2026-01-02T03:05:00Z",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": "ec2",
                "kernelVersion": "6.8.0",
                "osImage": "Ubuntu 24.04 LTS",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": "v1.32.4",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def extender_args(pod_obj: Obj, *, node_names: Sequence[str] | None = None, nodes: Sequence[Obj] | None = None) -> Obj:
    """ExtenderArgs: `NodeNames` with `nodeCacheCapable: true`, else the full `Nodes` list (the other one null)."""
    return {
        "Pod": pod_obj,
        "Nodes": {"metadata": {}, "items": list(nodes)} if nodes is not None else None,
        "NodeNames": list(node_names) if node_names is not None else None,
    }


def _resource(milli_cpu: float, memory_bytes: float, scalars: Mapping[str, float] | None = None) -> Obj:
    """Volcano's api.Resource (`MilliCPU`, `Memory`, `ScalarResources` in milli-units, `MaxTaskNum`)."""
    return {"MilliCPU": milli_cpu, "Memory": memory_bytes, "ScalarResources": dict(scalars or {}), "MaxTaskNum": 0}


def volcano_task(pod_obj: Obj, *, gpus: int = 1) -> Obj:
    """Volcano's api.TaskInfo of a pod (the embedded TransactionContext's fields promoted to the top level)."""
    meta = pod_obj["metadata"]
    request = _resource(4000, 32 * 2**30, {"nvidia.com/gpu": gpus * 1000})
    return {
        "UID": meta["uid"],
        "Job": f"{meta['namespace']}/{meta['name'].rsplit('-', 1)[0]}",
        "Name": meta["name"],
        "Namespace": meta["namespace"],
        "TaskRole": "worker",
        "Resreq": request,
        "InitResreq": request,
        "NodeName": pod_obj["spec"].get("nodeName", ""),
        "EvictionOccurred": False,
        "JobAllocatedHyperNode": "",
        "Status": 16 if pod_obj["spec"].get("nodeName") else 1,
        "LastTransaction": None,
        "Priority": 0,
        "VolumeReady": False,
        "Preemptable": False,
        "BestEffort": False,
        "HasRestartableInitContainer": any(
            c.get("restartPolicy") == "Always" for c in pod_obj["spec"].get("initContainers", [])
        ),
        "SchGated": False,
        "RevocableZone": "",
        "NumaInfo": None,
        "Pod": pod_obj,
        "CustomBindErrHandlerSucceeded": False,
    }


def volcano_node(name: str, *, gpus: int = 8, tasks: int = 8) -> Obj:
    """Volcano's api.NodeInfo: the v1.Node, resource sums and `Tasks` (each resident with its full Pod)."""
    residents = [
        volcano_task(
            pod(
                f"{name}-res-{i}",
                namespace="team",
                node_name=name,
                containers=[container(limits={"nvidia.com/gpu": "1"})],
            )
        )
        for i in range(tasks)
    ]
    allocatable = _resource(96000, 1082125426688, {"nvidia.com/gpu": gpus * 1000, "pods": 110000})
    used = _resource(4000 * tasks, 32 * 2**30 * tasks, {"nvidia.com/gpu": min(tasks, gpus) * 1000})
    return {
        "Name": name,
        "Node": node(name, gpus=gpus),
        "State": {"Phase": 1, "Reason": ""},
        "Releasing": _resource(0, 0),
        "Pipelined": _resource(0, 0),
        "Idle": allocatable,
        "Used": used,
        "Allocatable": allocatable,
        "Capacity": allocatable,
        "ResourceUsage": {"CPUUsageAvg": {}, "MEMUsageAvg": {}},
        "Tasks": {t["UID"]: t for t in residents},
        "NumaInfo": None,
        "NumaChgFlag": 0,
        "NumaSchedulerInfo": None,
        "RevocableZone": "",
        "Others": {"GpuShare": {"Name": name, "Device": {}}},
        "OversubscriptionNode": False,
        "OfflineJobEvicting": False,
        "OversubscriptionResource": _resource(0, 0),
        "ImageStates": {"registry.example/train:1.0": {"Size": 8123456789, "NumNodes": 500}},
    }


def volcano_prioritize(task: Obj, nodes: Sequence[Obj]) -> Obj:
    """PrioritizeRequest `{"task": TaskInfo, "nodes": [NodeInfo]}`."""
    return {"task": task, "nodes": list(nodes)}


def volcano_predicate(task: Obj, node_info: Obj) -> Obj:
    """PredicateRequest `{"task": TaskInfo, "node": NodeInfo}`: one call per candidate node."""
    return {"task": task, "node": node_info}


def preferred_allocation(
    node_name: str, available: Sequence[str], must_include: Sequence[str], size: int, *, containers: int = 1
) -> Obj:
    """GetPreferredAllocation's PreferredAllocationRequest as JSON, plus the node it runs on (the kubelet's device
    manager calls the plugin on that node; the request itself names no node)."""
    request = {
        "available_deviceIDs": list(available),
        "must_include_deviceIDs": list(must_include),
        "allocation_size": size,
    }
    return {"node": node_name, "container_requests": [request] * containers}
