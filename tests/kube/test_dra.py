"""GPUs from Dynamic Resource Allocation against the real API server and scheduler: a DeviceClass (backing
`nvidia.com/gpu`, KEP-5004), a ResourceSlice per node shaped as NVIDIA's driver publishes it, pods with claims by name
and by template; kube-scheduler's own DynamicResources plugin allocates the devices, and the advisor's state and
scores follow. No kubelet or controller manager runs here: the tests do what they would (start a pod, make a
template's claim, release a claim once its pod is gone)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.advisor.factories import mig_snapshot, snapshot
from tests.kube.conftest import Advisor
from tests.support.dra import (
    A100_PRODUCT,
    DRIVER,
    GPU_CLASS,
    H100_PRODUCT,
    MIG_CLASS,
    claim,
    claim_template,
    device_class,
    gpu_device,
    mig_device,
    pod_with_claims,
    resource_slice,
)
from tests.support.kube import KubeApi, KubeApiError, create_node, gpu_node, namespace
from tests.support.net import wait_until

pytestmark = [pytest.mark.kube, pytest.mark.dra, pytest.mark.timeout(300)]

NS = "dra"
H100_NODE, A100_NODE = "dra-h100", "dra-a100"
TAINT = {"key": "gpuadvisor.io/dra-test", "value": "true", "effect": "NoSchedule"}
RESOURCE = "/apis/resource.k8s.io/v1"
Obj = dict[str, Any]


def dra_node(name: str, product: str) -> Obj:
    """A node whose GPUs come only through DRA: no device plugin, so `nvidia.com/gpu` is 0 there and the scheduler
    serves that resource from the DeviceClass mapped to it. Tainted, so only this module's pods land on it."""
    node = gpu_node(name, gpus=0, product=product.replace(" ", "-"))
    node["spec"] = {"taints": [TAINT]}
    return node


def post_telemetry(advisor: Advisor) -> None:
    with advisor.client() as client:
        for node, model in ((H100_NODE, H100_PRODUCT), (A100_NODE, A100_PRODUCT)):
            client.post("/v1/telemetry", json=snapshot(node, gpus=4, model=model)).raise_for_status()


def allocated(advisor: Advisor, node: str) -> list[int]:
    """The advisor's allocated milli per GPU of `node` (after fresh telemetry, so the node is current)."""
    post_telemetry(advisor)
    with advisor.client() as client:
        detail = client.get(f"/v1/nodes/{node}").json()
    return [int(g["allocated_milli"]) for g in sorted(detail["gpus"], key=lambda g: g["index"])]


def eventually_allocated(advisor: Advisor, node: str, expected: list[int], timeout_s: float = 60.0) -> None:
    last: list[list[int]] = [[]]

    def matches() -> bool:
        last[0] = allocated(advisor, node)
        return last[0] == expected

    assert wait_until(matches, timeout_s=timeout_s, interval_s=0.5), f"advisor has {last[0]} on {node}, want {expected}"


def start_pod(api: KubeApi, name: str) -> Obj:
    """What the kubelet does once the pod is bound: it runs."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return api.merge_patch(
        f"/api/v1/namespaces/{NS}/pods/{name}/status", {"status": {"phase": "Running", "startTime": now}}
    )


def bound(api: KubeApi, name: str) -> Obj:
    return api.wait_for(f"/api/v1/namespaces/{NS}/pods/{name}", lambda p: bool(p["spec"].get("nodeName")))


def release_claim(api: KubeApi, name: str) -> None:
    """What the resource claim controller does once the claim's pod is gone: unreserve it, lift its finalizer (the
    scheduler's delete protection) and delete it."""
    path = f"{RESOURCE}/namespaces/{NS}/resourceclaims/{name}"
    try:
        api.merge_patch(f"{path}/status", {"status": {"reservedFor": None}})
        api.merge_patch(path, {"metadata": {"finalizers": None}})
        api.delete(path)
    except KubeApiError as e:
        if e.status_code != 404:
            raise


def delete_pod(api: KubeApi, name: str) -> None:
    api.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}", params={"gracePeriodSeconds": "0"})


def devices_of(api: KubeApi, claim_name: str) -> list[str]:
    got = api.wait_for(
        f"{RESOURCE}/namespaces/{NS}/resourceclaims/{claim_name}",
        lambda c: bool((c.get("status") or {}).get("allocation")),
    )
    return [r["device"] for r in got["status"]["allocation"]["devices"]["results"]]


def milli_on(devices: list[str], gpus: int = 4) -> list[int]:
    taken = {int(d.removeprefix("gpu-")) for d in devices}
    return [1000 if i in taken else 0 for i in range(gpus)]


@pytest.fixture(scope="module")
def dra_cluster(api: KubeApi, advisor: Advisor) -> Iterator[KubeApi]:
    namespace(api, NS)
    api.create(f"{RESOURCE}/deviceclasses", device_class(GPU_CLASS, "gpu", extended_resource="nvidia.com/gpu"))
    for node, product in ((H100_NODE, H100_PRODUCT), (A100_NODE, A100_PRODUCT)):
        create_node(api, dra_node(node, product))
        # The API server taints a new node not-ready; create_node lifts every taint: put ours back.
        api.merge_patch(f"/api/v1/nodes/{node}", {"spec": {"taints": [TAINT]}})
        api.create(f"{RESOURCE}/resourceslices", resource_slice(node, [gpu_device(node, i, product) for i in range(4)]))
    post_telemetry(advisor)
    try:
        yield api
    finally:
        for p in api.get(f"/api/v1/namespaces/{NS}/pods")["items"]:
            delete_pod(api, p["metadata"]["name"])
        for c in api.get(f"{RESOURCE}/namespaces/{NS}/resourceclaims")["items"]:
            release_claim(api, c["metadata"]["name"])
        for node in (H100_NODE, A100_NODE):
            api.delete(f"{RESOURCE}/resourceslices/{node}-{DRIVER}")
            api.delete(f"/api/v1/nodes/{node}")
        api.delete(f"{RESOURCE}/deviceclasses/{GPU_CLASS}")


def pod_spec_extra(scheduler: str) -> Obj:
    return {
        "schedulerName": scheduler,
        "tolerations": [{**TAINT, "operator": "Equal"}],
        "terminationGracePeriodSeconds": 0,
    }


def test_a_claim_by_name_is_allocated_by_the_scheduler_counted_by_the_advisor_and_freed_with_the_claim(
    dra_cluster: KubeApi, advisor: Advisor, scheduler: str
) -> None:
    api = dra_cluster
    h100 = f"device.attributes['{DRIVER}'].productName == '{H100_PRODUCT}'"
    api.create(f"{RESOURCE}/namespaces/{NS}/resourceclaims", claim("one-h100", NS, selectors=[h100]))
    api.create(
        f"/api/v1/namespaces/{NS}/pods", pod_with_claims("by-name", {"gpu": "one-h100"}, **pod_spec_extra(scheduler))
    )
    assert bound(api, "by-name")["spec"]["nodeName"] == H100_NODE  # the selector rules the A100 node out
    start_pod(api, "by-name")
    devices = devices_of(api, "one-h100")
    eventually_allocated(advisor, H100_NODE, milli_on(devices))

    delete_pod(api, "by-name")
    release_claim(api, "one-h100")
    eventually_allocated(advisor, H100_NODE, [0, 0, 0, 0])


def test_a_claim_from_a_template_is_scored_before_and_counted_after_allocation(
    dra_cluster: KubeApi, advisor: Advisor, scheduler: str
) -> None:
    api = dra_cluster
    a100 = f"device.attributes['{DRIVER}'].productName == '{A100_PRODUCT}'"
    api.create(
        f"{RESOURCE}/namespaces/{NS}/resourceclaimtemplates", claim_template("two-a100", NS, 2, selectors=[a100])
    )
    pod = pod_with_claims("by-template", {"gpus": "two-a100"}, templates=True, **pod_spec_extra(scheduler))
    pod["metadata"]["namespace"] = NS

    # The advisor reads the template (through its watch) and scores the pod as two A100 GPUs.
    def scored() -> dict[str, Any]:
        with advisor.client() as client:
            post_telemetry(advisor)
            response = client.post("/v1/score", json={"pod": pod, "nodes": [H100_NODE, A100_NODE]})
        assert response.status_code == 200, response.text
        return {s["node"]: s for s in response.json()["scores"]}

    assert wait_until(lambda: scored()[A100_NODE]["gpus"] != [], timeout_s=60, interval_s=0.5), scored()
    scores = scored()
    assert scores[A100_NODE]["feasible"]
    assert len(scores[A100_NODE]["gpus"]) == 2
    assert not scores[H100_NODE]["feasible"]

    created = api.create(f"/api/v1/namespaces/{NS}/pods", pod)
    # The resource claim controller's part: the pod's claim made from the template, owned by the pod.
    generated = claim("by-template-gpus-x7k2p", NS, 2, selectors=[a100])
    generated["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpus"}
    generated["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "by-template",
            "uid": created["metadata"]["uid"],
            "controller": True,
        }
    ]
    api.create(f"{RESOURCE}/namespaces/{NS}/resourceclaims", generated)
    api.merge_patch(
        f"/api/v1/namespaces/{NS}/pods/by-template/status",
        {"status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "by-template-gpus-x7k2p"}]}},
    )
    assert bound(api, "by-template")["spec"]["nodeName"] == A100_NODE
    start_pod(api, "by-template")
    eventually_allocated(advisor, A100_NODE, milli_on(devices_of(api, "by-template-gpus-x7k2p")))

    delete_pod(api, "by-template")
    release_claim(api, "by-template-gpus-x7k2p")
    eventually_allocated(advisor, A100_NODE, [0, 0, 0, 0])


def test_nvidia_gpu_served_through_the_device_class_counts_once(
    dra_cluster: KubeApi, advisor: Advisor, scheduler: str
) -> None:
    api = dra_cluster
    resources = {"cpu": "1", "nvidia.com/gpu": "2"}
    api.create(
        f"/api/v1/namespaces/{NS}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "extended"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": H100_NODE},
                "containers": [
                    {"name": "main", "image": "x", "resources": {"requests": resources, "limits": resources}}
                ],
                **pod_spec_extra(scheduler),
            },
        },
    )
    pod = bound(api, "extended")
    mapping = api.wait_for(
        f"/api/v1/namespaces/{NS}/pods/extended",
        lambda p: bool((p.get("status") or {}).get("extendedResourceClaimStatus")),
    )["status"]["extendedResourceClaimStatus"]
    assert pod["spec"]["nodeName"] == H100_NODE
    start_pod(api, "extended")
    claim_name = mapping["resourceClaimName"]
    devices = devices_of(api, claim_name)
    assert len(devices) == 2
    # The pod keeps `nvidia.com/gpu: 2` and its claim holds two devices: two GPUs taken, not four.
    eventually_allocated(advisor, H100_NODE, milli_on(devices))

    delete_pod(api, "extended")
    release_claim(api, claim_name)
    eventually_allocated(advisor, H100_NODE, [0, 0, 0, 0])


def test_a_pending_pod_seen_before_its_claim_is_read_again_when_the_claim_appears(
    dra_cluster: KubeApi, advisor: Advisor
) -> None:
    """A pod asks one 2g.20gb by resource and one 3g.40gb through a claim that does not exist yet. The advisor's
    queue holds its 2g.20gb at once; when the claim is created the pod is read again and its 3g.40gb counts too. It
    is seen through a MIG pod's score on a node with a free 1g.10gb, 2g.20gb and 3g.40gb: the instances no pending
    profile fits go from two to one to none. The pod names no running scheduler, so it stays pending."""
    api = dra_cluster
    slices_node, scored_node = "dra-mig-slices", "dra-mig"
    api.create(f"{RESOURCE}/deviceclasses", device_class(MIG_CLASS, "mig"))
    # NVIDIA's driver publishes the MIG devices somewhere: what the claim's selector is judged against.
    api.create(
        f"{RESOURCE}/resourceslices",
        resource_slice(slices_node, [mig_device(slices_node, 0, "3g.40gb", 0, "40Gi")]),
    )
    scored_pod = {
        "metadata": {"name": "scored", "namespace": NS},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
    }

    def stranded() -> str:
        with advisor.client() as client:
            client.post(
                "/v1/telemetry", json=mig_snapshot(scored_node, [["1g.10gb", "2g.20gb", "3g.40gb"]])
            ).raise_for_status()
            response = client.post("/v1/score", json={"pod": scored_pod, "nodes": [scored_node]})
        assert response.status_code == 200, response.text
        (score,) = response.json()["scores"]
        return str(score["reason"])

    def eventually(count: int) -> None:
        want = f"{count} free instance(s) no pending pod's profile fits"
        assert wait_until(lambda: want in stranded(), timeout_s=60, interval_s=0.5), (want, stranded())

    try:
        eventually(2)
        late = pod_with_claims("late-claim", {"mig": "late-mig"}, schedulerName="no-such-scheduler")
        late["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-2g.20gb": "1"}
        api.create(f"/api/v1/namespaces/{NS}/pods", late)
        eventually(1)  # the advisor has the pod, its claim still unknown
        profile = f"device.attributes['{DRIVER}'].profile == '3g.40gb'"
        api.create(
            f"{RESOURCE}/namespaces/{NS}/resourceclaims",
            claim("late-mig", NS, device_class_name=MIG_CLASS, selectors=[profile]),
        )
        eventually(0)
    finally:
        delete_pod(api, "late-claim")
        release_claim(api, "late-mig")
        api.delete(f"{RESOURCE}/resourceslices/{slices_node}-{DRIVER}")
        api.delete(f"{RESOURCE}/deviceclasses/{MIG_CLASS}")
