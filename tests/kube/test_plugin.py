"""gpuadvisor-scheduler (the GPUAdvisor scheduler-framework plugin, k8s/plugin/gpuadvisor) with the profile of
deploy/plugin/, against the real API server and the advisor: whole-GPU, multi-GPU and share pods are bound where the
advisor's /v1/score says, with the advisor down pods still schedule, and a burst of pods does not double-book a GPU
(Reserve sends the pods just placed with the next score requests).

As in test_scheduling.py no kubelet runs; each test makes its own nodes under its own group label."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.advisor.factories import process, snapshot, two_socket_links
from tests.kube.conftest import Advisor, start_advisor
from tests.kube.test_scheduling import NAMESPACE, bound_node, create_pod, make_nodes, pod, report
from tests.support.kube import ControlPlane, KubeApi, namespace
from tests.support.net import free_port, wait_until
from tests.support.plugin import SchedulerProcess, plugin_scheduler

pytestmark = [pytest.mark.plugin, pytest.mark.timeout(300)]

PLUGIN_SCHEDULER = "gpuadvisor-plugin"
Obj = dict[str, Any]


@pytest.fixture(scope="module", autouse=True)
def ml_namespace(api: KubeApi) -> None:
    namespace(api, NAMESPACE)


@pytest.fixture(scope="module")
def scheduler(
    plane: ControlPlane, advisor: Advisor, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SchedulerProcess]:
    with plugin_scheduler(plane, advisor.url, PLUGIN_SCHEDULER, tmp_path_factory.mktemp("plugin")) as started:
        yield started


def v1_scores(advisor: Advisor, obj: Obj, nodes: list[str]) -> dict[str, float]:
    """The advisor's 0..100 per node for `obj`, asked as the plugin asks."""
    with advisor.client() as client:
        response = client.post("/v1/score", json={"pod": obj, "nodes": nodes, "unknown_nodes": "neutral"})
    assert response.status_code == 200, response.text
    return {s["node"]: s["score"] for s in response.json()["scores"]}


def advisor_has(advisor: Advisor, nodes: list[str]) -> bool:
    with advisor.client() as client:
        listed = client.get("/v1/nodes").json()
    return set(nodes) <= {n["name"] for n in listed["nodes"]}


def best_of(scores: dict[str, float]) -> str:
    best = max(scores, key=lambda n: scores[n])
    assert list(scores.values()).count(scores[best]) == 1, f"the advisor ties: {scores}"
    return best


def test_whole_gpu_pod_is_bound_where_the_advisor_scores_best_with_one_call(
    api: KubeApi, advisor: Advisor, scheduler: SchedulerProcess
) -> None:
    group, names = "plugin-whole", ["plugin-whole-busy", "plugin-whole-idle"]
    make_nodes(api, group, names)
    # 6 of 8 GPUs busy (pods the API server does not know): kube-scheduler's LeastAllocated sees two empty nodes,
    # the advisor packs onto the busy one.
    held = {i: [process(f"outside-{i}", namespace="other", sm=0.9)] for i in range(6)}
    report(advisor, snapshot(names[0], busy=held), snapshot(names[1]))
    assert wait_until(lambda: advisor_has(advisor, names), timeout_s=30)
    asked = pod("plugin-one-gpu", group, PLUGIN_SCHEDULER, {"nvidia.com/gpu": "1"})
    best = best_of(v1_scores(advisor, asked, names))
    assert best == names[0]
    calls = scheduler.metric("gpuadvisor_plugin_advisor_calls_total", result="ok")
    create_pod(api, asked)
    assert bound_node(api, "plugin-one-gpu") == best
    assert scheduler.metric("gpuadvisor_plugin_advisor_calls_total", result="ok") == calls + 1


def test_multi_gpu_pod_is_bound_where_its_gpus_are_nvlinked(
    api: KubeApi, advisor: Advisor, scheduler: SchedulerProcess
) -> None:
    group, names = "plugin-multi", ["plugin-multi-numa", "plugin-multi-nvl"]
    make_nodes(api, group, names)
    numa_busy = {i: [process(f"numa-{i}", namespace="other")] for i in (0, 1, 4, 5)}
    nvl_busy = {i: [process(f"nvl-{i}", namespace="other")] for i in (4, 5, 6, 7)}
    report(
        advisor,
        snapshot(names[0], links=two_socket_links(), busy=numa_busy),
        snapshot(names[1], links=two_socket_links(), busy=nvl_busy),
    )
    assert wait_until(lambda: advisor_has(advisor, names), timeout_s=30)
    asked = pod("plugin-four-gpus", group, PLUGIN_SCHEDULER, {"nvidia.com/gpu": "4"})
    best = best_of(v1_scores(advisor, asked, names))
    assert best == names[1]
    create_pod(api, asked)
    assert bound_node(api, "plugin-four-gpus") == best


def test_share_pods_are_bound_where_the_advisor_scores_best(
    api: KubeApi, advisor: Advisor, scheduler: SchedulerProcess
) -> None:
    group, names = "plugin-share", ["plugin-share-a", "plugin-share-b"]
    make_nodes(api, group, names)
    report(advisor, snapshot(names[0]), snapshot(names[1], busy={0: [process("other-share", sm=0.3)]}))
    assert wait_until(lambda: advisor_has(advisor, names), timeout_s=30)
    for name, requests in [
        ("plugin-milli", {"gpuadvisor.io/gpu-milli": "500"}),
        ("plugin-hami", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}),
    ]:
        asked = pod(name, group, PLUGIN_SCHEDULER, requests)
        best = best_of(v1_scores(advisor, asked, names))
        create_pod(api, asked)
        assert bound_node(api, name) == best


@pytest.fixture(scope="module")
def blind_advisor(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Advisor]:
    """An advisor without the pod watch (`GPUADVISOR_NO_KUBE`): it learns of bound pods only from telemetry, as
    when the watch lags. Only the plugin's assumed pods tell it what the scheduler has just placed."""
    started = start_advisor(plane, tmp_path_factory.mktemp("blind-advisor"), ("GPUADVISOR_NO_KUBE", "true"))
    try:
        yield started
    finally:
        started.process.stop()


def test_a_burst_does_not_double_book_the_last_free_gpu(
    api: KubeApi, plane: ControlPlane, blind_advisor: Advisor, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The API server sees 8 free GPUs on every node; the advisor knows 7 of `pack`'s are taken by pods outside it,
    and does not watch pods. It packs onto `pack` while it has a free GPU: of a burst exactly one pod may go there
    (the first is sent to the advisor as assumed with every later request); without Reserve's assumed pods every
    pod of the burst would."""
    group = "plugin-burst"
    names = ["plugin-burst-pack", "plugin-burst-spare-1", "plugin-burst-spare-2"]
    make_nodes(api, group, names)
    taken = {i: [process(f"taken-{i}", namespace="other", sm=0.9)] for i in range(7)}
    report(blind_advisor, snapshot(names[0], busy=taken), snapshot(names[1]), snapshot(names[2]))
    assert wait_until(lambda: advisor_has(blind_advisor, names), timeout_s=30)
    first = pod("plugin-burst-0", group, PLUGIN_SCHEDULER, {"nvidia.com/gpu": "1"})
    assert best_of(v1_scores(blind_advisor, first, names)) == names[0]
    burst = [f"plugin-burst-{i}" for i in range(4)]
    with plugin_scheduler(plane, blind_advisor.url, "gpuadvisor-plugin-burst", tmp_path_factory.mktemp("burst")):
        for name in burst:
            create_pod(api, pod(name, group, "gpuadvisor-plugin-burst", {"nvidia.com/gpu": "1"}))
        placed = [bound_node(api, name) for name in burst]
    assert placed.count(names[0]) == 1, placed


def test_with_the_advisor_down_pods_still_schedule(
    api: KubeApi, plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> None:
    group = "plugin-down"
    make_nodes(api, group, ["plugin-down-1", "plugin-down-2"])
    dead = f"http://127.0.0.1:{free_port()}"
    workdir: Path = tmp_path_factory.mktemp("plugin-down")
    with plugin_scheduler(plane, dead, "gpuadvisor-plugin-down", workdir, failureThreshold=2) as down:
        names = [f"plugin-unadvised-{i}" for i in range(4)]
        for name in names:
            create_pod(api, pod(name, group, "gpuadvisor-plugin-down", {"nvidia.com/gpu": "1"}))
        assert all(bound_node(api, name) in {"plugin-down-1", "plugin-down-2"} for name in names)
        # two calls failed, then the breaker opened: the other pods cost no call
        assert down.metric("gpuadvisor_plugin_advisor_calls_total", result="error") == 2
        assert down.metric("gpuadvisor_plugin_fallbacks_total", reason="circuit_open") == 2
        log = down.process.log.read_text()
        assert log.count("the advisor does not answer") == 1


def test_plugin_metrics_are_on_the_schedulers_endpoint(scheduler: SchedulerProcess) -> None:
    text = httpx.get(
        f"{scheduler.url}/metrics", headers={"Authorization": "Bearer gpuadvisor-test-admin-token"}, verify=False
    ).text
    for name in ("gpuadvisor_plugin_advisor_call_duration_seconds", "gpuadvisor_plugin_assumed_pods"):
        assert name in text


def test_with_the_filter_arg_nodes_the_advisor_refuses_are_filtered_with_its_reasons(
    api: KubeApi, plane: ControlPlane, advisor: Advisor, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The API server sees 8 free GPUs on every node. The advisor knows `small` has 2 GPUs (can never host 4) and
    `busy` has all 8 taken by pods outside it (no room now): with `filter: true` a 4-GPU pod stays pending with the
    advisor's reasons, where without the filter NodeResourcesFit alone would bind it; a node that fits, once it
    appears, gets it."""
    group = "plugin-filter"
    small, busy, roomy = "plugin-filter-small", "plugin-filter-busy", "plugin-filter-roomy"
    make_nodes(api, group, [small, busy])
    taken = {i: [process(f"filter-taken-{i}", namespace="other", sm=0.9)] for i in range(8)}
    report(advisor, snapshot(small, gpus=2), snapshot(busy, busy=taken))
    assert wait_until(lambda: advisor_has(advisor, [small, busy]), timeout_s=30)
    workdir: Path = tmp_path_factory.mktemp("plugin-filter")
    with plugin_scheduler(plane, advisor.url, "gpuadvisor-plugin-filter", workdir, filter=True) as filtering:
        create_pod(api, pod("plugin-filtered", group, "gpuadvisor-plugin-filter", {"nvidia.com/gpu": "4"}))
        refused = api.wait_for(
            f"/api/v1/namespaces/{NAMESPACE}/pods/plugin-filtered",
            lambda p: any(
                c["type"] == "PodScheduled" and c["status"] == "False" for c in p["status"].get("conditions", [])
            ),
        )
        (condition,) = [c for c in refused["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert "gpuadvisor: the node has 2 GPUs, the pod asks for 4" in condition["message"], condition
        assert condition["message"].count("gpuadvisor: ") == 2, condition
        assert filtering.metric("gpuadvisor_plugin_filtered_nodes_total", verdict="unresolvable") >= 1
        assert filtering.metric("gpuadvisor_plugin_filtered_nodes_total", verdict="unschedulable") >= 1
        report(advisor, snapshot(roomy))
        assert wait_until(lambda: advisor_has(advisor, [roomy]), timeout_s=30)
        make_nodes(api, group, [roomy])  # a new node: the framework tries the pod again
        assert bound_node(api, "plugin-filtered") == roomy
