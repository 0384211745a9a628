"""Node CPU/memory in the cluster state: allocatable from the node, free after every bound pod's requests."""

from __future__ import annotations

from advisor.cluster.state import ClusterState, PodAllocation, PodResources
from collector.snapshot import NodeSnapshot
from tests.advisor.factories import snapshot


def cpu_memory(state: ClusterState, node: str) -> tuple[int | None, int | None, int | None, int | None]:
    n = state.nodes[node]
    return n.cpu_allocatable_milli, n.cpu_free_milli, n.memory_allocatable_mib, n.memory_free_mib


def with_nodes(*names: str) -> ClusterState:
    state = ClusterState()
    for name in names:
        state.ingest(NodeSnapshot.model_validate(snapshot(name)))
    return state


def test_cpu_and_memory_stay_unknown_until_allocatable_and_the_pods_are_both_known() -> None:
    state = with_nodes("n1")
    assert cpu_memory(state, "n1") == (None, None, None, None)
    state.set_allocatable("n1", (8000, 65536))
    assert cpu_memory(state, "n1") == (None, None, None, None)  # the pods' requests are not listed yet
    state.replace_pods([], [PodResources("ml/a", "n1", 1500, 4096)])
    assert cpu_memory(state, "n1") == (8000, 6500, 65536, 61440)
    state.set_allocatable("n1", None)
    assert cpu_memory(state, "n1") == (None, None, None, None)


def test_pod_events_move_free_cpu_and_memory_and_deleted_pods_are_forgotten() -> None:
    state = with_nodes("n1", "n2")
    state.replace_allocatable({"n1": (8000, 65536), "n2": (4000, 16384)})
    state.replace_pods([], [])
    gpu_pod = PodAllocation(pod="ml/train", node="n1", gpus=2)
    state.update_pod("ml/train", gpu_pod, PodResources("ml/train", "n1", 4000, 32768))
    state.update_pod("ml/web", None, PodResources("ml/web", "n1", 3000, 1024))
    assert cpu_memory(state, "n1") == (8000, 1000, 65536, 31744)
    assert state.nodes["n1"].free_gpus == 6
    # over-committed (allocatable shrank under running pods): free is 0, never negative
    state.update_pod("ml/big", None, PodResources("ml/big", "n1", 5000, 0))
    assert cpu_memory(state, "n1")[1] == 0
    state.update_pod("ml/big", None, None)
    # a pod that moves is counted once, on its new node
    state.update_pod("ml/web", None, PodResources("ml/web", "n2", 3000, 1024))
    assert cpu_memory(state, "n1") == (8000, 4000, 65536, 32768)
    assert cpu_memory(state, "n2") == (4000, 1000, 16384, 15360)
    state.update_pod("ml/train", None, None)
    state.update_pod("ml/web", None, None)
    assert cpu_memory(state, "n1") == (8000, 8000, 65536, 65536)
    assert state.nodes["n1"].free_gpus == 8
    assert state.pod_resources() == []
    assert state.allocations() == []
    assert state._requested == {}  # no per-node residue once its pods are gone


def test_an_unchanged_pod_or_allocatable_keeps_the_node_state_and_its_memo() -> None:
    state = with_nodes("n1")
    state.replace_allocatable({"n1": (8000, 65536)})
    state.replace_pods([], [PodResources("ml/a", "n1", 1000, 1)])
    before = state.nodes["n1"]
    state.update_pod("ml/a", None, PodResources("ml/a", "n1", 1000, 1))
    state.set_allocatable("n1", (8000, 65536))
    state.replace_allocatable({"n1": (8000, 65536)})
    assert state.nodes["n1"] is before


def test_a_re_list_replaces_every_pod_and_a_deleted_node_forgets_its_allocatable() -> None:
    state = with_nodes("n1")
    state.replace_allocatable({"n1": (8000, 65536)})
    state.replace_pods([], [PodResources("ml/a", "n1", 1000, 1), PodResources("ml/b", "n1", 1000, 1)])
    state.replace_pods([PodAllocation(pod="ml/c", node="n1", gpus=1)], [PodResources("ml/c", "n1", 500, 10)])
    assert cpu_memory(state, "n1") == (8000, 7500, 65536, 65526)
    assert state.nodes["n1"].free_gpus == 7
    state.remove_node("n1")
    state.ingest(NodeSnapshot.model_validate(snapshot("n1")))
    assert cpu_memory(state, "n1") == (None, None, None, None)
