"""GPUs from Dynamic Resource Allocation in the advisor's state and requests (advisor/cluster/dra.py), without a
cluster: ResourceSlices and ResourceClaims shaped as NVIDIA's driver and the scheduler write them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.cluster.dra import DraIndex, claim_of, devices_of_slice, with_claims
from advisor.cluster.kube import allocation_from_pod, pending_from_pod
from advisor.cluster.pods import PodSpecError
from advisor.cluster.state import ClusterState
from advisor.placement.types import PodRequest
from advisor.settings import AdvisorSettings
from collector.snapshot import NodeSnapshot
from tests.advisor.factories import snapshot
from tests.support.dra import (
    A100_PRODUCT,
    DRIVER,
    GPU_CLASS,
    MIG_CLASS,
    allocated,
    claim,
    claim_template,
    device_class,
    gpu_device,
    mig_device,
    pod_with_claims,
    resource_slice,
)

NS = "ml"
NODE = "n1"


def index(*claims: dict[str, Any], gpus: int = 4) -> DraIndex:
    dra = DraIndex()
    dra.replace_slices([resource_slice(NODE, [gpu_device(NODE, i) for i in range(gpus)])])
    dra.replace_classes(
        [device_class(GPU_CLASS, "gpu", extended_resource="nvidia.com/gpu"), device_class(MIG_CLASS, "mig")]
    )
    dra.replace_claims(list(claims))
    return dra


def state_with(dra: DraIndex, *pods: dict[str, Any]) -> ClusterState:
    state = ClusterState()
    state.ingest(NodeSnapshot.model_validate(snapshot(NODE, gpus=4)))
    allocations = [a for a in (allocation_from_pod(p) for p in pods) if a is not None]
    state.replace_pods(allocations, [])
    state.replace_claimed(dra.held_by_pods())
    state.replace_mig(dra.mig_by_node())
    return state


def allocated_milli(state: ClusterState) -> list[int]:
    return [g.allocated_milli for g in state.nodes[NODE].gpus]


def bound(pod: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        **pod,
        "metadata": {**pod["metadata"], "namespace": NS},
        "spec": {**pod["spec"], "nodeName": NODE},
        "status": {"phase": "Running", **(status or {})},
    }


def test_a_slice_gives_each_gpu_with_the_drivers_attributes() -> None:
    devices = devices_of_slice(resource_slice(NODE, [gpu_device(NODE, 0), mig_device(NODE, 1, "3g.40gb", 4, "40Gi")]))
    gpu, mig = devices
    assert (gpu.kind, gpu.uuid, gpu.product, gpu.node, gpu.pool) == (
        "gpu",
        f"GPU-{NODE}-0",
        "NVIDIA H100 80GB HBM3",
        NODE,
        NODE,
    )
    assert gpu.capacity[f"{DRIVER}/memory"] == 80 * 2**30
    assert (mig.kind, mig.gpu_uuid, mig.profile) == ("mig", f"GPU-{NODE}-1", "3g.40gb")


def test_a_gpu_allocated_through_a_claim_is_taken_on_exactly_that_gpu_and_freed_with_the_claim() -> None:
    held = allocated(claim("one", NS), NODE, ["gpu-2"], pods=["p"])
    dra = index(held)
    pod = bound(pod_with_claims("p", {"gpu": "one"}))
    state = state_with(dra, pod)
    assert allocated_milli(state) == [0, 0, 1000, 0]
    allocation = {a.pod: a for a in state.allocations()}[f"{NS}/p"]
    assert allocation.gpus == 1

    dra.set_claim(f"{NS}/one", None)  # the claim is deleted
    state.replace_claimed(dra.held_by_pods())
    assert allocated_milli(state) == [0, 0, 0, 0]
    assert state.allocations() == []


def test_a_gpu_through_the_extended_resource_mapping_counts_once() -> None:
    # KEP-5004: the pod keeps nvidia.com/gpu: 2; the scheduler's claim holds the two devices.
    pod = bound(
        {
            "metadata": {"name": "ext"},
            "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        },
        {
            "extendedResourceClaimStatus": {
                "resourceClaimName": "ext-extended-resources-abcde",
                "requestMappings": [
                    {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-0"}
                ],
            }
        },
    )
    extended = allocated(claim("ext-extended-resources-abcde", NS, 2), NODE, ["gpu-0", "gpu-3"], pods=["ext"])
    extended["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    state = state_with(index(extended), pod)
    assert allocated_milli(state) == [1000, 0, 0, 1000]
    assert [a.gpus for a in state.allocations()] == [2]
    assert claim_of(extended).extended

    # Without the claim's status mapping (a device-plugin node), the pod's own resource counts, as before.
    plain = bound({"metadata": {"name": "plain"}, "spec": pod["spec"]})
    assert allocated_milli(state_with(index(), plain)) == [1000, 1000, 0, 0]


def test_a_mig_instance_takes_its_share_of_the_parent_gpu() -> None:
    dra = DraIndex()
    dra.replace_slices(
        [
            resource_slice(
                NODE,
                [
                    gpu_device(NODE, 0),
                    mig_device(NODE, 1, "3g.40gb", 4, "40Gi"),
                    mig_device(NODE, 1, "1g.10gb", 0, "10Gi"),
                ],
            )
        ]
    )
    dra.replace_claims([allocated(claim("m", NS), NODE, ["gpu-1-mig-3-4-3"], pods=["p"])])
    state = state_with(dra, bound(pod_with_claims("p", {"gpu": "m"})))
    assert allocated_milli(state) == [0, 428, 0, 0]
    instances = state.nodes[NODE].mig_instances
    assert sorted((i.gpu, i.profile, i.taken) for i in instances) == [(1, "1g.10gb", False), (1, "3g.40gb", True)]


def test_an_unallocated_claim_or_an_unknown_device_holds_nothing() -> None:
    dra = index(claim("pending", NS), allocated(claim("gone", NS), NODE, ["gpu-9"], pods=["q"]))
    assert dra.held_by_pods() == {}


def test_claims_by_name_and_by_template_ask_for_gpus_of_the_models_their_selectors_accept() -> None:
    dra = index(claim("two", NS, 2))
    a100_only = f"device.attributes['{DRIVER}'].productName == '{A100_PRODUCT}'"
    dra.replace_templates(
        [
            claim_template("h100", NS, selectors=[f"device.attributes['{DRIVER}'].architecture == 'Hopper'"]),
            claim_template("a100", NS, selectors=[a100_only]),
            claim_template(
                "big", NS, selectors=[f"device.capacity['{DRIVER}'].memory.compareTo(quantity('40Gi')) >= 0"]
            ),
        ]
    )
    by_name = dra.claim_ask(NS, pod_with_claims("p", {"gpu": "two"})["spec"])
    assert (by_name.gpus, by_name.gpu_models, by_name.notes) == (2, ("h100",), ())
    by_template = dra.claim_ask(NS, pod_with_claims("p", {"gpu": "h100"}, templates=True)["spec"])
    assert (by_template.gpus, by_template.gpu_models) == (1, ("h100",))
    by_memory = dra.claim_ask(NS, pod_with_claims("p", {"gpu": "big"}, templates=True)["spec"])
    assert (by_memory.gpus, by_memory.gpu_models) == (1, ("h100",))
    # No A100 in the cluster: the claim asks for no GPU the cluster has (nothing to score it on).
    assert dra.claim_ask(NS, pod_with_claims("p", {"gpu": "a100"}, templates=True)["spec"]).gpus == 0


def test_a_selector_the_evaluator_cannot_judge_leaves_the_model_open_and_says_so() -> None:
    dra = index()
    dra.replace_templates(
        [
            claim_template(
                "odd", NS, selectors=[f"device.attributes['{DRIVER}'].driverVersion.isGreaterThan(semver('1.0.0'))"]
            )
        ]
    )
    ask = dra.claim_ask(NS, pod_with_claims("p", {"gpu": "odd"}, templates=True)["spec"])
    assert (ask.gpus, ask.gpu_models) == (1, ())
    assert any("not evaluated" in n for n in ask.notes)


def test_a_missing_claim_is_noted_and_a_malformed_reference_is_an_error() -> None:
    ask = index().claim_ask(NS, pod_with_claims("p", {"gpu": "nowhere"})["spec"])
    assert ask.gpus == 0
    assert ask.notes == (f"ResourceClaim {NS}/nowhere not found",)
    with pytest.raises(PodSpecError, match=r"spec.resourceClaims\[0\]: neither"):
        index().claim_ask(NS, {"resourceClaims": [{"name": "gpu"}]})


def test_a_claim_asking_mig_instances_asks_their_profile() -> None:
    dra = DraIndex()
    dra.replace_slices(
        [resource_slice(NODE, [mig_device(NODE, 0, "1g.10gb", 0, "10Gi"), mig_device(NODE, 0, "3g.40gb", 4, "40Gi")])]
    )
    dra.replace_classes([device_class(MIG_CLASS, "mig")])
    dra.replace_templates(
        [
            claim_template(
                "small",
                NS,
                device_class_name=MIG_CLASS,
                selectors=[f"device.attributes['{DRIVER}'].profile == '1g.10gb'"],
            )
        ]
    )
    ask = dra.claim_ask(NS, pod_with_claims("p", {"gpu": "small"}, templates=True)["spec"])
    assert (ask.gpus, dict(ask.mig)) == (0, {"1g.10gb": 1})


def test_a_pending_pod_with_claims_is_queued_with_its_gpus() -> None:
    dra = index(claim("two", NS, 2))
    pod = {**pod_with_claims("p", {"gpu": "two"}), "status": {"phase": "Pending"}}
    pod["metadata"]["namespace"] = NS
    assert pending_from_pod(pod) is None  # without the index, a claim is not read
    pending = pending_from_pod(pod, dra)
    assert pending is not None
    assert pending.request.gpus == 2
    assert pending.request.gpu_models == ("h100",)


def test_claims_and_a_node_selector_that_accept_no_common_model_are_refused() -> None:
    ask = index(claim("two", NS, 2)).claim_ask(NS, pod_with_claims("p", {"gpu": "two"})["spec"])
    with pytest.raises(PodSpecError, match="no GPU can satisfy both"):
        with_claims(PodRequest(name="p", gpu_models=("a100",)), ask)


def test_the_score_says_how_a_pods_claims_were_read(tmp_path: Path) -> None:
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/a.db", no_kube=True, api_token="t")
    with TestClient(create_app(settings)) as client:
        headers = {"Authorization": "Bearer t"}
        client.post("/v1/telemetry", json=snapshot(NODE, gpus=4), headers=headers).raise_for_status()
        pod = pod_with_claims("p", {"gpu": "missing"})
        pod["metadata"]["namespace"] = NS
        response = client.post("/v1/score", json={"pod": pod, "nodes": [NODE]})
    assert response.status_code == 200, response.text
    assert response.json()["models"]["claims"] == f"ResourceClaim {NS}/missing not found"


def test_a_malformed_claim_status_is_read_as_none_rather_than_failing() -> None:
    spec = pod_with_claims("p", {"gpu": "two"}, templates=True)["spec"]
    ask = index().claim_ask(NS, spec, {"resourceClaimStatuses": "not a list"})
    assert ask.notes == (f"ResourceClaimTemplate {NS}/two not found",)
    pod = bound(pod_with_claims("p", {"gpu": "two"}), {"extendedResourceClaimStatus": {"requestMappings": [1, "x"]}})
    allocation = allocation_from_pod(pod)
    assert allocation is not None
    assert allocation.gpus == 0
