"""kube-scheduler with the profile of deploy/scheduler/ and the advisor as its extender, all real: where GPU pods are
bound, that a pod the advisor's filter passes over is bound once room appears, and that with the advisor down the
profile's `ignorable: true` lets scheduling go on.

No kubelet runs: the scheduler binds, and the tests set a pod's status where the advisor must see it Running. Each
test makes its own nodes, labelled with its own group, and its pods select that group, so tests do not share room.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.advisor.factories import mig_snapshot, snapshot
from tests.kube.conftest import SCHEDULER_NAME, Advisor, start_advisor
from tests.support.kube import (
    ControlPlane,
    KubeApi,
    control_plane,
    create_node,
    gpu_node,
    kube_bin_dir,
    kube_scheduler,
    namespace,
)
from tests.support.net import free_port, wait_until

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

NAMESPACE = "ml"
GROUP_LABEL = "test.gpuadvisor.io/group"
Obj = dict[str, Any]


@pytest.fixture(scope="module", autouse=True)
def ml_namespace(api: KubeApi) -> None:
    namespace(api, NAMESPACE)


def pod(name: str, group: str, scheduler: str, requests: Mapping[str, str], *, node: str | None = None) -> Obj:
    """A pod of one container asking for `requests` (limits the same, as extended resources require)."""
    resources = {"cpu": "2", "memory": "8Gi", **requests}
    spec: Obj = {
        "schedulerName": scheduler,
        "nodeSelector": {GROUP_LABEL: group},
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": "main", "image": "trainer:latest", "resources": {"requests": resources, "limits": resources}}
        ],
    }
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def create_pod(api: KubeApi, obj: Obj) -> Obj:
    return api.create(f"/api/v1/namespaces/{NAMESPACE}/pods", obj)


def bound_node(api: KubeApi, name: str, timeout_s: float = 60.0) -> str:
    found = api.wait_for(
        f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", lambda p: bool(p["spec"].get("nodeName")), timeout_s
    )
    node: str = found["spec"]["nodeName"]
    return node


def set_running(api: KubeApi, name: str) -> None:
    """What the kubelet would write once the pod's containers started."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    api.merge_patch(
        f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/status",
        {"status": {"phase": "Running", "startTime": now, "conditions": [{"type": "Ready", "status": "True"}]}},
    )


def make_nodes(api: KubeApi, group: str, names: list[str], **node_args: Any) -> None:
    for name in names:
        create_node(api, gpu_node(name, labels={GROUP_LABEL: group}, **node_args))


def report(advisor: Advisor, *snapshots: Obj) -> None:
    """Telemetry as the nodes' collectors push it."""
    with advisor.client() as client:
        for body in snapshots:
            response = client.post("/v1/telemetry", json=body)
            assert response.status_code in {200, 202, 204}, response.text


def advisor_scores(advisor: Advisor, obj: Obj, nodes: list[str]) -> dict[str, int]:
    """The extender's 0..10 per node for `obj`, asked the way the scheduler asks it (nodeCacheCapable: names only)."""
    with advisor.client() as client:
        response = client.post("/extender/prioritize", json={"Pod": obj, "NodeNames": nodes})
    assert response.status_code == 200, response.text
    return {h["Host"]: h["Score"] for h in response.json()}


def extender_calls(advisor: Advisor) -> float:
    """How many extender prioritize requests the advisor has answered (its request metrics)."""
    text = httpx.get(f"{advisor.url}/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("gpuadvisor_advisor_request") and "/extender/prioritize" in line and "_count" in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def advisor_knows(advisor: Advisor, nodes: list[str], running: Mapping[str, int]) -> bool:
    """Whether the advisor's node state has every node with the GPUs `running` pods hold (its watch caught up)."""
    with advisor.client() as client:
        listed = client.get("/v1/nodes", params={"detail": "true"}).json()
    by_name = {n["name"]: n for n in listed["nodes"]}
    if not all(n in by_name for n in nodes):
        return False
    for node, milli in running.items():
        allocated = sum(g.get("allocated_milli", 0) for g in by_name[node].get("gpus", []))
        if allocated < milli:
            return False
    return True


def resident(obj: Obj, *, sm: float = 0.5, memory_bytes: int = 8 << 30) -> Obj:
    """A process of pod `obj` as the node's collector reports it (NVML process, attributed to the pod's UID)."""
    meta = obj["metadata"]
    return {
        "pid": 4242,
        "memory_used_bytes": memory_bytes,
        "sm_utilization_ratio": sm,
        "pod": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"], "container": "main"},
    }


def test_whole_gpu_pods_go_where_the_advisor_scores_best_against_the_plugins_least_allocated(
    api: KubeApi, advisor: Advisor, scheduler: str
) -> None:
    group = "whole"
    names = ["whole-busy", "whole-idle"]
    make_nodes(api, group, names)
    # 6 of whole-busy's 8 GPUs are held by a running pod: kube-scheduler's NodeResourcesFit (LeastAllocated over
    # cpu, memory and nvidia.com/gpu) prefers the idle node; the advisor packs.
    holder = create_pod(api, pod("holder", group, scheduler, {"nvidia.com/gpu": "6"}, node="whole-busy"))
    set_running(api, "holder")
    held = {i: [resident(holder, sm=0.9)] for i in range(6)}
    report(advisor, snapshot("whole-busy", busy=held), snapshot("whole-idle"))
    assert wait_until(lambda: advisor_knows(advisor, names, {"whole-busy": 6000}), timeout_s=30)

    asked = pod("one-gpu", group, scheduler, {"nvidia.com/gpu": "1"})
    scores = advisor_scores(advisor, asked, names)
    best = max(scores, key=lambda n: scores[n])
    assert sorted(scores.values()) != [scores[best]] * len(scores), f"the advisor ties: {scores}"
    assert best == "whole-busy", scores
    calls = extender_calls(advisor)
    create_pod(api, asked)
    assert bound_node(api, "one-gpu") == best
    assert extender_calls(advisor) > calls


def test_a_gpu_share_pod_is_bound_where_the_advisor_scores_best(api: KubeApi, advisor: Advisor, scheduler: str) -> None:
    group = "share"
    names = ["share-a", "share-b"]
    make_nodes(api, group, names)
    for name in names:  # as gpushare's and Volcano's device plugins advertise their shares: 80 GiB, 10 per GPU
        status = {"allocatable": {"aliyun.com/gpu-mem": "640", "volcano.sh/vgpu-number": "80"}}
        api.merge_patch(f"/api/v1/nodes/{name}/status", {"status": status | {"capacity": status["allocatable"]}})
    # share-a already runs a half-GPU share (ours: no node advertises gpuadvisor.io/gpu-milli, so kube-scheduler
    # does not count it; the advisor does, through its pod watch)
    half = create_pod(api, pod("half", group, scheduler, {"gpuadvisor.io/gpu-milli": "500"}, node="share-a"))
    set_running(api, "half")
    report(advisor, snapshot("share-a", busy={0: [resident(half)]}), snapshot("share-b"))
    assert wait_until(lambda: advisor_knows(advisor, names, {"share-a": 500}), timeout_s=30)
    for name, requests in [
        ("milli", {"gpuadvisor.io/gpu-milli": "400"}),
        ("hami", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}),
        ("gpushare", {"aliyun.com/gpu-mem": "8"}),
        ("vgpu", {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "8000"}),
    ]:
        asked = pod(name, group, scheduler, requests)
        scores = advisor_scores(advisor, asked, names)
        top = {n for n, score in scores.items() if score == max(scores.values())}
        calls = extender_calls(advisor)
        create_pod(api, asked)
        assert bound_node(api, name) in top, scores
        assert extender_calls(advisor) > calls, "the scheduler did not ask the advisor"
    # ours, at least, the advisor ranks: the half-used GPU of share-a takes the 400-milli share (best fit)
    assert api.get(f"/api/v1/namespaces/{NAMESPACE}/pods/milli")["spec"]["nodeName"] == "share-a"


def test_a_mixed_strategy_mig_pod_is_sent_to_the_advisor_and_bound_where_it_scores_best(
    api: KubeApi, advisor: Advisor, scheduler: str
) -> None:
    group = "mig"
    names = ["mig-a", "mig-b"]
    for name in names:
        # the device plugin's mixed strategy: each profile its own resource, no whole GPUs left to count
        node = gpu_node(name, gpus=0, product="NVIDIA-A100-SXM4-80GB", labels={GROUP_LABEL: group})
        node["status"]["allocatable"] |= {"nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-3g.40gb": "2"}
        node["status"]["capacity"] = node["status"]["allocatable"]
        create_node(api, node)
    layout = [["1g.10gb", "1g.10gb", "3g.40gb"], ["3g.40gb"]]
    report(advisor, mig_snapshot("mig-a", layout), mig_snapshot("mig-b", list(reversed(layout))))
    assert wait_until(lambda: advisor_knows(advisor, names, {}), timeout_s=30)
    asked = pod("mig-small", group, scheduler, {"nvidia.com/mig-1g.10gb": "1"})
    scores = advisor_scores(advisor, asked, names)
    top = {n for n, score in scores.items() if score == max(scores.values())}
    calls = extender_calls(advisor)
    create_pod(api, asked)
    assert bound_node(api, "mig-small") in top, scores
    # kube-scheduler sends a pod to an extender only for a resource its managedResources names
    assert extender_calls(advisor) > calls, "the scheduler did not ask the advisor about a MIG pod"


@pytest.fixture
def one_node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeApi, Advisor, str]]:
    """A cluster of its own with one GPU node, its advisor and scheduler. Here the pod selects no node: had any
    node failed one of kube-scheduler's plugins (a node selector, a taint), the scheduler would retry the pod only on
    events that plugin cares about, and a pod deletion is not one of NodeAffinity's."""
    workdir = tmp_path_factory.mktemp("one-node")
    with control_plane(kube_bin_dir(), workdir) as own:
        started = start_advisor(own, workdir)
        try:
            with kube_scheduler(own, f"{started.url}/extender", SCHEDULER_NAME, workdir):
                namespace(own.api, NAMESPACE)
                yield own.api, started, SCHEDULER_NAME
        finally:
            started.process.stop()


def test_a_pod_the_advisors_filter_passes_over_is_bound_once_room_appears(
    one_node_cluster: tuple[KubeApi, Advisor, str],
) -> None:
    api, advisor, scheduler = one_node_cluster
    create_node(api, gpu_node("room-1", gpus=1))
    # 700 of the only GPU's 1000 milli are taken by a running share: kube-scheduler's own plugins see room (they do
    # not count gpuadvisor.io/gpu-milli), the advisor's filter does not.
    first = create_pod(api, unselective(pod("first", "", scheduler, {"gpuadvisor.io/gpu-milli": "700"}, node="room-1")))
    set_running(api, "first")
    report(advisor, snapshot("room-1", gpus=1, busy={0: [resident(first)]}))
    assert wait_until(lambda: advisor_knows(advisor, ["room-1"], {"room-1": 700}), timeout_s=30)
    create_pod(api, unselective(pod("waits", "", scheduler, {"gpuadvisor.io/gpu-milli": "700"})))
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/waits"
    unschedulable = api.wait_for(path, lambda p: scheduled_condition(p) is not None)
    assert "no healthy GPU has room for the requested share" in str(scheduled_condition(unschedulable))
    time.sleep(3)  # retried with backoff meanwhile: still not bound
    assert not api.get(path)["spec"].get("nodeName")

    # the first share ends: its process exits (the collector reports the GPU free), then the kubelet confirms the
    # pod's deletion, the event on which kube-scheduler retries the waiting pod
    report(advisor, snapshot("room-1", gpus=1))
    api.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/first", params={"gracePeriodSeconds": "0"})
    assert bound_node(api, "waits", timeout_s=90) == "room-1"


def unselective(obj: Obj) -> Obj:
    del obj["spec"]["nodeSelector"]
    return obj


def scheduled_condition(obj: Obj) -> str | None:
    """The message of a PodScheduled=False condition (the scheduler's reasons), None if there is none."""
    for condition in obj.get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return str(condition.get("message", ""))
    return None


@pytest.fixture(scope="module")
def scheduler_without_advisor(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second scheduler with the same profile whose extender URL answers nothing (the advisor is down)."""
    dead = f"http://127.0.0.1:{free_port()}/extender"
    workdir: Path = tmp_path_factory.mktemp("scheduler-down")
    with kube_scheduler(plane, dead, "gpuadvisor-scheduler-advisor-down", workdir):
        yield "gpuadvisor-scheduler-advisor-down"


def test_with_the_advisor_down_ignorable_lets_scheduling_go_on(api: KubeApi, scheduler_without_advisor: str) -> None:
    group = "down"
    make_nodes(api, group, ["down-1"])
    create_pod(api, pod("unadvised", group, scheduler_without_advisor, {"nvidia.com/gpu": "1"}))
    assert bound_node(api, "unadvised") == "down-1"
