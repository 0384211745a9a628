"""Dynamic Resource Allocation objects shaped as NVIDIA's DRA driver (`gpu.nvidia.com`) and Kubernetes write them:
a DeviceClass per device type, a ResourceSlice per node with its GPUs (and MIG instances), claims and templates.
Shared by the pure tests (tests/advisor/test_dra.py) and the control-plane ones (tests/kube/test_dra.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
H100_PRODUCT = "NVIDIA H100 80GB HBM3"
A100_PRODUCT = "NVIDIA A100-SXM4-40GB"

Obj = dict[str, Any]


def device_class(name: str, device_type: str, *, extended_resource: str | None = None) -> Obj:
    """A DeviceClass as NVIDIA's driver's Helm chart installs it (type `gpu` or `mig`), optionally backing an
    extended resource (KEP-5004)."""
    spec: Obj = {
        "selectors": [
            {
                "cel": {
                    "expression": (
                        f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{device_type}'"
                    )
                }
            }
        ]
    }
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def gpu_device(node: str, index: int, product: str = H100_PRODUCT, memory: str = "80Gi") -> Obj:
    """A whole GPU as the driver publishes it: UUIDs as tests/advisor/factories.snapshot gives them."""
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{node}-{index}"},
            "productName": {"string": product},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper" if "H100" in product else "Ampere"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "570.124.6"},
            "pcieBusID": {"string": f"0000:{index:02x}:00.0"},
        },
        "capacity": {"memory": {"value": memory}},
    }


def mig_device(node: str, gpu: int, profile: str, start: int, memory: str, *, product: str = A100_PRODUCT) -> Obj:
    """A MIG instance of GPU `gpu` as the driver publishes it (name gpu-<minor>-mig-<profile id>-<start>-<size>)."""
    slices = int(profile.split("g.", maxsplit=1)[0])
    return {
        "name": f"gpu-{gpu}-mig-{slices}-{start}-{slices}",
        "attributes": {
            "type": {"string": "mig"},
            "uuid": {"string": f"MIG-{node}-{gpu}-{start}"},
            "parentUUID": {"string": f"GPU-{node}-{gpu}"},
            "profile": {"string": profile},
            "productName": {"string": product},
            "architecture": {"string": "Ampere"},
        },
        "capacity": {"memory": {"value": memory}, "multiprocessors": {"value": str(14 * slices)}},
    }


def resource_slice(node: str, devices: Sequence[Obj]) -> Obj:
    """The node's one ResourceSlice (pool = the node's name, as the driver names it)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


def requests(count: int = 1, device_class_name: str = GPU_CLASS, selectors: Sequence[str] = ()) -> Obj:
    exactly: Obj = {"deviceClassName": device_class_name, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def claim(name: str, namespace: str, count: int = 1, **kwargs: Any) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": requests(count, **kwargs),
    }


def claim_template(name: str, namespace: str, count: int = 1, **kwargs: Any) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": requests(count, **kwargs)},
    }


def allocated(obj: Obj, node: str, devices: Sequence[str], pods: Sequence[str] = ()) -> Obj:
    """`obj` (a claim) with the status the scheduler writes when it allocates `devices` of `node` for `pods`."""
    return {
        **obj,
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": d} for d in devices]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods],
        },
    }


def pod_with_claims(name: str, claims: Mapping[str, str], *, templates: bool = False, **extra: Any) -> Obj:
    """A pod whose container uses `claims` (pod claim name → ResourceClaim or template name)."""
    key = "resourceClaimTemplateName" if templates else "resourceClaimName"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": n, key: c} for n, c in claims.items()],
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "resources": {"requests": {"cpu": "1"}, "claims": [{"name": n} for n in claims]},
                }
            ],
            **extra,
        },
    }
