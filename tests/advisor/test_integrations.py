"""kube-scheduler, Volcano and a device plugin calling the advisor with the bodies they really send
(`tests.support.upstream`: the upstream Go types' JSON field names), GPU shares in the ecosystem's names."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.api.schemas import V1Pod
from advisor.cluster.pods import GPU_RESOURCE_NAMES, PodSpecError
from advisor.cluster.state import ClusterState
from advisor.settings import AdvisorSettings
from tests.advisor.factories import GIB, process, snapshot, two_socket_links
from tests.support import upstream as up

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MIB = 2**20


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    """An advisor with five 8×H100 80 GB nodes: idle, 2 free, 2 GPUs lost, on two sockets with 4 free, and one whose
    GPU 0 is half taken by a share."""
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/a.db", no_kube=True, api_token=TOKEN)
    with TestClient(create_app(settings, state=ClusterState())) as c:
        for raw in (
            snapshot("idle"),
            snapshot("two-free", busy={i: [process(f"p{i}")] for i in range(6)}),
            snapshot("lost-two", unhealthy=(6, 7)),
            snapshot("sockets", links=two_socket_links(), busy={i: [process(f"q{i}")] for i in (1, 2, 3, 4)}),
        ):
            assert c.post("/v1/telemetry", json=raw, headers=AUTH).status_code == 202
        yield c


def _message(response: Any) -> str:
    """The first field error's message of a 422 (`{"detail": [{"loc", "msg", "type"}]}`)."""
    message: str = response.json()["detail"][0]["msg"]
    return message


def _read(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> Any:
    return V1Pod.model_validate(up.pod(containers=list(containers), init_containers=init)).to_request()


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        # (gpus, share milli, share memory bytes)
        ({"nvidia.com/gpu": "2"}, (2, 0, None)),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"}, (0, 0, 20000 * MIB)),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25"}, (0, 250, None)),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "8000"}, (0, 300, 8000 * MIB)),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}, (0, 1000, None)),  # every SM: a whole GPU
        ({"aliyun.com/gpu-mem": "10"}, (0, 0, 10 * GIB)),
        ({"volcano.sh/vgpu-number": "4"}, (4, 0, None)),
        ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "4096"}, (0, 0, 4096 * MIB)),
        ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "50"}, (0, 500, None)),
        ({"gpuadvisor.io/gpu-milli": "250"}, (0, 250, None)),
    ],
)
def test_gpu_requests_are_read_in_every_notation(limits: dict[str, str], expected: tuple[int, int, int | None]) -> None:
    pod = _read(up.container(limits={"cpu": "2", **limits}))
    assert (pod.gpus, pod.gpu_milli, pod.gpu_memory_bytes) == expected


def test_every_managed_resource_name_makes_a_gpu_pod() -> None:
    """deploy/scheduler/ lists GPU_RESOURCE_NAMES as managedResources: each must be one the advisor reads."""
    for name in GPU_RESOURCE_NAMES:
        pod = _read(up.container(limits={name: "10"}))
        assert pod.whole_gpus or pod.is_share, name


@pytest.mark.parametrize(
    ("limits", "field"),
    [
        ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"}, "nvidia.com/gpucores"),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "101"}, "nvidia.com/gpumem-percentage"),
        ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "300"}, "volcano.sh/vgpu-cores"),
        ({"gpuadvisor.io/gpu-milli": "1500"}, "gpuadvisor.io/gpu-milli"),
        ({"aliyun.com/gpu-mem": "-3"}, "aliyun.com/gpu-mem"),
        ({"aliyun.com/gpu-mem": "10", "volcano.sh/vgpu-number": "1"}, "several notations"),
    ],
)
def test_a_bad_share_is_a_4xx_naming_the_field(client: TestClient, limits: dict[str, str], field: str) -> None:
    with pytest.raises(PodSpecError, match=field.replace(".", r"\.")):
        _read(up.container(limits=limits))
    pod = up.pod(containers=[up.container(limits=limits)])
    response = client.post("/extender/filter", json=up.extender_args(pod, node_names=["idle"]))
    assert response.status_code == 422
    assert field in _message(response)


def test_sidecar_init_containers_add_to_the_containers_as_kube_counts_them() -> None:
    main = up.container(limits={"nvidia.com/gpu": "4", "cpu": "8"})
    sidecar = up.container("proxy", limits={"nvidia.com/gpu": "4", "cpu": "1"}, restart_policy="Always")
    setup = up.container("setup", limits={"nvidia.com/gpu": "2", "cpu": "16"})
    assert _read(main, init=(sidecar,)).gpus == 8  # runs beside main: 4 + 4
    assert _read(main, init=(up.container("setup", limits={"nvidia.com/gpu": "4"}),)).gpus == 4  # runs alone first
    pod = _read(main, init=(sidecar, setup))
    # setup runs beside the sidecar (4 + 2 GPUs, 1 + 16 CPUs); then main beside it (4 + 4, 8 + 1)
    assert (pod.gpus, pod.cpu_milli) == (8, 17000)


def _filter(client: TestClient, pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
    response = client.post("/extender/filter", json=up.extender_args(pod, node_names=names))
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    assert set(result.get("NodeNames") or []) | set(result["FailedNodes"]) | set(
        result["FailedAndUnresolvableNodes"]
    ) == set(names), "every candidate is answered"
    return result


def test_a_sidecar_pod_needing_eight_gpus_does_not_pass_on_six(client: TestClient) -> None:
    sidecar = up.container("proxy", limits={"nvidia.com/gpu": "4"}, restart_policy="Always")
    pod = up.pod(containers=[up.container(limits={"nvidia.com/gpu": "4"})], init_containers=[sidecar])
    result = _filter(client, pod, ["idle", "lost-two", "two-free"])
    assert result["NodeNames"] == ["idle"]
    assert "lost-two" in result["FailedAndUnresolvableNodes"]  # 6 healthy GPUs can never hold 8
    assert "two-free" in result["FailedNodes"]  # 8 GPUs, busy for now: preemption may help


def test_nodes_that_can_never_host_the_pod_are_unresolvable(client: TestClient) -> None:
    sixteen = up.pod(containers=[up.container(limits={"nvidia.com/gpu": "16"})])
    result = _filter(client, sixteen, ["idle", "two-free", "never-seen"])
    assert set(result["FailedAndUnresolvableNodes"]) == {"idle", "two-free"}
    assert "has 8 GPUs, the pod asks for 16" in result["FailedAndUnresolvableNodes"]["idle"]
    assert result["NodeNames"] == ["never-seen"]  # no telemetry: never vetoed

    a100 = up.pod(node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    result = _filter(client, a100, ["idle"])
    assert "is not one the pod accepts" in result["FailedAndUnresolvableNodes"]["idle"]
    h100 = up.pod(node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    assert _filter(client, h100, ["idle"])["NodeNames"] == ["idle"]


@pytest.mark.parametrize(
    ("limits", "fits"),
    [
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(100 * 1024)}, False),  # HAMi, more than 80 GB
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(20 * 1024)}, True),
        ({"aliyun.com/gpu-mem": "90"}, False),  # gpushare, GiB
        ({"aliyun.com/gpu-mem": "40"}, True),
        ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": str(96 * 1024)}, False),
        ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": str(8 * 1024)}, True),
    ],
)
def test_shares_too_big_for_any_gpu_are_unresolvable_and_right_sized_ones_pass(
    client: TestClient, limits: dict[str, str], fits: bool
) -> None:
    pod = up.pod(containers=[up.container(limits=limits)])
    result = _filter(client, pod, ["idle"])
    if fits:
        assert result["NodeNames"] == ["idle"]
    else:
        assert "GiB of memory for the share" in result["FailedAndUnresolvableNodes"]["idle"]
    scores = client.post("/extender/prioritize", json=up.extender_args(pod, node_names=["idle"])).json()
    assert scores[0]["Score"] == (10 if fits else 0)


def test_without_node_cache_the_passing_nodes_come_back_as_sent(client: TestClient) -> None:
    nodes = [up.node(n) for n in ("idle", "two-free", "lost-two")]
    pod = up.pod(containers=[up.container(limits={"nvidia.com/gpu": "4"})])
    sent = up.extender_args(pod, nodes=copy.deepcopy(nodes))
    response = client.post("/extender/filter", json=sent)
    assert response.status_code == 200
    result = response.json()
    assert result["Nodes"]["items"] == [nodes[0], nodes[2]]  # resourceVersion, finalizers, ownerReferences kept
    assert result["Nodes"]["metadata"] == {}
    assert set(result["FailedNodes"]) == {"two-free"}


def _volcano_nodes(*names: str) -> list[dict[str, Any]]:
    return [up.volcano_node(n, tasks=2) for n in names]


def test_volcano_prioritize_scores_every_node_info(client: TestClient) -> None:
    task = up.volcano_task(up.pod(containers=[up.container(limits={"nvidia.com/gpu": "2"})]), gpus=2)
    body = up.volcano_prioritize(task, _volcano_nodes("idle", "two-free", "never-seen"))
    response = client.post("/volcano/prioritize", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["errorMessage"] == ""
    scores = result["nodeScore"]
    assert set(scores) == {"idle", "two-free", "never-seen"}
    assert scores["two-free"] > scores["idle"]  # packing: the last two free GPUs
    assert scores["never-seen"] == 50.0


def test_volcano_predicate_vetoes_nodes_with_an_unresolvable_code(client: TestClient) -> None:
    def predicate(gpus: int, node: str) -> dict[str, Any]:
        task = up.volcano_task(up.pod(containers=[up.container(limits={"nvidia.com/gpu": str(gpus)})]), gpus=gpus)
        response = client.post("/volcano/predicate", json=up.volcano_predicate(task, up.volcano_node(node, tasks=2)))
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    assert predicate(2, "two-free") == {"status": "", "code": 0}
    full = predicate(4, "two-free")
    assert full["code"] == 2  # Unschedulable: GPUs may free up
    assert full["status"]
    assert predicate(16, "idle")["code"] == 3  # UnschedulableAndUnresolvable
    assert predicate(8, "lost-two")["code"] == 3
    assert predicate(8, "never-seen") == {"status": "", "code": 0}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/volcano/prioritize", {"task": {"Pod": up.pod()}, "nodes": [{"Name": 7}]}, "nodes[0].Name"),
        ("/volcano/prioritize", {"task": {}, "nodes": []}, "task.Pod"),
        ("/volcano/prioritize", b"{not json", "invalid JSON"),
        ("/volcano/prioritize", b'{"task": {}, "nodes": [{"Name": "a", "Tasks": {"x": NaN}}]}', "nodes.0.Tasks.x"),
        ("/volcano/predicate", {"task": {"Pod": up.pod()}}, "node.Name"),
        ("/volcano/predicate", {"task": {"Pod": {"spec": {"containers": "x"}}}, "node": {"Name": "a"}}, "task.Pod"),
    ],
)
def test_bad_volcano_bodies_are_a_4xx_naming_the_field(
    client: TestClient, path: str, body: dict[str, Any] | bytes, field: str
) -> None:
    if isinstance(body, bytes):
        response = client.post(path, content=body, headers={"Content-Type": "application/json"})
    else:
        response = client.post(path, json=body)
    assert response.status_code == 422
    assert _message(response).startswith(field)


def test_get_preferred_allocation_answers_device_ids_keeping_must_include(client: TestClient) -> None:
    """`sockets`: GPUs 0-3 and 4-7 NVLinked within, NUMA across; 0, 5, 6, 7 free."""
    uuids = [f"GPU-sockets-{i}" for i in range(8)]
    free = [uuids[i] for i in (0, 5, 6, 7)]
    body = up.preferred_allocation("sockets", free, [uuids[0]], 2)
    response = client.post("/v1/allocate", json=body)
    assert response.status_code == 200, response.text
    (answer,) = response.json()["container_responses"]
    assert answer["deviceIDs"][0] == uuids[0]
    assert len(answer["deviceIDs"]) == 2
    assert set(answer["deviceIDs"]) <= set(free)

    # without must-include: a pair on one NVLink island, never one GPU per socket
    (answer,) = client.post("/v1/allocate", json=up.preferred_allocation("sockets", free, [], 2)).json()[
        "container_responses"
    ]
    assert {int(d.rsplit("-", 1)[1]) // 4 for d in answer["deviceIDs"]} == {1}


def test_get_preferred_allocation_spreads_time_sliced_replicas_and_reads_protobuf_json(client: TestClient) -> None:
    replicas = [f"GPU-idle-{g}::{r}" for g in range(2) for r in range(4)]
    body = {
        "node": "idle",
        "containerRequests": [{"availableDeviceIDs": replicas, "mustIncludeDeviceIDs": [], "allocationSize": 2}],
    }
    (answer,) = client.post("/v1/allocate", json=body).json()["container_responses"]
    assert {d.split("::")[0] for d in answer["deviceIDs"]} == {"GPU-idle-0", "GPU-idle-1"}


def test_get_preferred_allocation_without_telemetry_keeps_the_kubelets_order(client: TestClient) -> None:
    body = up.preferred_allocation("never-seen", ["b", "a", "c"], ["c"], 2)
    (answer,) = client.post("/v1/allocate", json=body).json()["container_responses"]
    assert answer["deviceIDs"] == ["c", "b"]


@pytest.mark.parametrize(
    ("request_body", "field"),
    [
        (up.preferred_allocation("idle", ["a", "b"], ["z"], 1), "container_requests[0].must_include_deviceIDs[0]"),
        (up.preferred_allocation("idle", ["a", "b"], [], 3), "container_requests[0].allocation_size"),
        (up.preferred_allocation("idle", ["a", "b"], ["a", "b"], 1), "container_requests[0].allocation_size"),
    ],
)
def test_an_impossible_preferred_allocation_is_a_4xx_naming_the_field(
    client: TestClient, request_body: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/allocate", json=request_body)
    assert response.status_code == 422
    assert _message(response).startswith(field)
