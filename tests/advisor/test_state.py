"""Cluster state from NodeSnapshots (and Kubernetes allocations): who holds which GPU, staleness, ordering."""

from __future__ import annotations

import gc
import json
from datetime import UTC, datetime, timedelta

import pytest

from advisor.cluster.state import KEEP_JSON_MAX_BYTES, ClusterState, PodAllocation
from collector.snapshot import NodeSnapshot
from tests.advisor.factories import GIB, process, snapshot, two_socket_links
from tests.support.clock import Clock


def ingest(state: ClusterState, raw: dict[str, object]) -> bool:
    return state.ingest(NodeSnapshot.model_validate(raw))


def test_a_gpu_with_one_pods_process_is_allocated_to_that_pod() -> None:
    state = ClusterState()
    ingest(state, snapshot("n1", busy={2: [process("train-0", sm=0.8)]}))
    node = state.nodes["n1"]
    assert node.free_gpus == 7
    assert node.gpus[2].allocated_milli == 1000
    assert [r.pod for r in node.gpus[2].residents] == ["ml/train-0"]
    assert node.gpus[2].residents[0].sm_utilization_ratio == 0.8


def test_pods_sharing_a_gpu_hold_shares_by_memory() -> None:
    state = ClusterState()
    ingest(
        state,
        snapshot("n1", busy={0: [process("a", memory_bytes=8 * GIB), process("b", memory_bytes=20 * GIB)]}),
    )
    gpu = state.nodes["n1"].gpus[0]
    assert gpu.allocated_milli == 100 + 250  # 8/80 → 100 milli, 20/80 → 250 milli
    assert {r.pod for r in gpu.residents} == {"ml/a", "ml/b"}


def test_memory_bandwidth_is_split_over_residents_by_sm_use() -> None:
    state = ClusterState()
    ingest(
        state,
        snapshot("n1", busy={0: [process("a", sm=0.6), process("b", sm=0.2)]}, bandwidth={0: 0.8}),
    )
    shares = {r.pod: r.memory_bandwidth_utilization_ratio for r in state.nodes["n1"].gpus[0].residents}
    assert shares == {"ml/a": pytest.approx(0.6), "ml/b": pytest.approx(0.2)}


def test_host_processes_hold_nothing_but_are_residents() -> None:
    raw = snapshot("n1")
    raw["gpus"][0]["processes"] = [{"pid": 7, "memory_used_bytes": GIB, "sm_utilization_ratio": 0.3}]  # type: ignore[index]
    state = ClusterState()
    ingest(state, raw)
    gpu = state.nodes["n1"].gpus[0]
    assert gpu.allocated_milli == 0
    assert [r.pod for r in gpu.residents] == ["host"]


def test_kube_allocations_reserve_granted_gpus_not_yet_in_use_and_record_gangs() -> None:
    state = ClusterState()
    ingest(state, snapshot("n1", busy={0: [process("w-0")]}))
    state.update_pod("ml/w-0", PodAllocation(pod="ml/w-0", node="n1", gpus=4, gang="job-a"), None)
    node = state.nodes["n1"]
    assert node.free_gpus == 4
    assert node.gangs == frozenset({"job-a"})
    state.update_pod("ml/w-0", None, None)
    assert state.nodes["n1"].free_gpus == 7
    assert state.nodes["n1"].gangs == frozenset()


def test_kube_share_allocation_sets_the_share() -> None:
    state = ClusterState()
    state.replace_pods([PodAllocation(pod="ml/a", node="n1", gpu_milli=300)], [])
    ingest(state, snapshot("n1", busy={0: [process("a")]}))
    assert state.nodes["n1"].gpus[0].allocated_milli == 300


def test_an_older_snapshot_arriving_late_is_dropped() -> None:
    state = ClusterState()
    now = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
    assert ingest(state, snapshot("n1", busy={0: [process("a")]}, timestamp=now))
    assert not ingest(state, snapshot("n1", timestamp=now - timedelta(seconds=5)))
    assert state.nodes["n1"].free_gpus == 7
    assert state.out_of_order_dropped == 1


def test_staleness_is_judged_by_arrival_on_this_replica() -> None:
    clock = Clock(5000.0)
    state = ClusterState(clock=clock)
    ingest(state, snapshot("n1", timestamp=datetime(2000, 1, 1, tzinfo=UTC)))
    assert state.nodes["n1"].observed_at_seconds == 5000.0


def test_links_become_the_topology_and_equal_topologies_are_shared() -> None:
    state = ClusterState()
    ingest(state, snapshot("a", links=two_socket_links()))
    ingest(state, snapshot("b", links=two_socket_links()))
    ingest(state, snapshot("c", links=[]))
    a, b, c = (state.nodes[n] for n in "abc")
    assert a.topology is b.topology
    assert [m.bit_count() for m in a.topology.islands] == [4, 4]
    assert not c.topology.known


def test_a_deleted_node_is_forgotten() -> None:
    state = ClusterState()
    ingest(state, snapshot("n1"))
    state.remove_node("n1")
    assert "n1" not in state.nodes
    assert state.record("n1") is None


def test_a_pods_start_time_goes_into_each_of_its_residents() -> None:
    state = ClusterState()
    state.replace_pods([PodAllocation(pod="ml/w", node="n1", gpus=2, workload="bert", started_seconds=1234.5)], [])
    ingest(state, snapshot("n1", busy={0: [process("w")], 1: [process("w"), process("seen-only")], 2: []}))
    gpus = state.nodes["n1"].gpus
    assert [(r.pod, r.started_seconds) for r in gpus[0].residents] == [("ml/w", 1234.5)]
    # A pod the watch does not know (telemetry only) has no start time.
    assert {r.pod: r.started_seconds for r in gpus[1].residents} == {"ml/w": 1234.5, "ml/seen-only": None}
    state.update_pod("ml/w", PodAllocation(pod="ml/w", node="n1", gpus=2, workload="bert"), None)
    assert state.nodes["n1"].gpus[0].residents[0].started_seconds is None


def test_a_relist_that_changes_nothing_keeps_each_nodes_state_and_one_that_does_rebuilds_only_that_node() -> None:
    state = ClusterState()
    for name in ("n1", "n2"):
        ingest(state, snapshot(name, busy={0: [process(f"{name}-a")]}))
    pods = [PodAllocation(pod="ml/n1-a", node="n1", gpus=1), PodAllocation(pod="ml/n2-a", node="n2", gpus=1)]
    state.replace_pods(pods, [])
    n1, n2 = state.nodes["n1"], state.nodes["n2"]
    state.replace_pods(list(pods), [])  # the watch re-lists: the same pods
    assert state.nodes["n1"] is n1
    assert state.nodes["n2"] is n2  # kept: the scorer's memo of it stays valid
    state.replace_pods([*pods, PodAllocation(pod="ml/late", node="n2", gpus=2)], [])
    assert state.nodes["n1"] is n1
    assert state.nodes["n2"] is not n2
    assert state.nodes["n2"].free_gpus == 5  # the two GPUs granted to ml/late are reserved


def test_the_snapshot_is_kept_as_its_json_and_read_back_whole() -> None:
    state = ClusterState()
    raw = snapshot("n1", busy={1: [process("a", sm=0.3)]}, links=two_socket_links())
    body = NodeSnapshot.model_validate(raw).model_dump_json().encode()
    assert state.ingest(NodeSnapshot.model_validate_json(body), body)
    record = state.record("n1")
    assert record is not None
    assert record.snapshot_json is body
    assert record.snapshot == NodeSnapshot.model_validate(raw)
    assert record.timestamp == record.snapshot.timestamp
    assert dict(record.uuids) == {g.index: g.uuid for g in record.snapshot.gpus}
    assert {(a, b, level) for a, b, level in record.links} == {
        (link.a, link.b, link.level.value) for link in record.snapshot.links
    }
    ingest(state, snapshot("n2"))  # without its JSON: encoded by the state
    again = state.record("n2")
    assert again is not None
    assert again.snapshot.node == "n2"


def test_the_state_freezes_the_collector_after_every_so_many_rebuilt_nodes() -> None:
    state = ClusterState(freeze_after_nodes=3)
    gc.unfreeze()
    try:
        ingest(state, snapshot("n1"))
        ingest(state, snapshot("n2"))
        assert gc.get_freeze_count() == 0
        ingest(state, snapshot("n3"))
        frozen = gc.get_freeze_count()
        assert frozen > 0
        ingest(state, snapshot("n4"))
        assert gc.get_freeze_count() == frozen  # not before three more
    finally:
        gc.unfreeze()


def test_a_snapshot_padded_with_ignored_fields_is_kept_re_encoded_not_as_received() -> None:
    state = ClusterState()
    raw = snapshot("n1", busy={0: [process("a")]})
    padded = json.dumps({**raw, "notes": "x" * (KEEP_JSON_MAX_BYTES + 1)}).encode()
    assert state.ingest(NodeSnapshot.model_validate_json(padded), padded)
    record = state.record("n1")
    assert record is not None
    assert len(record.snapshot_json) < KEEP_JSON_MAX_BYTES
    assert record.snapshot == NodeSnapshot.model_validate(raw)
