"""Each node's GPU links on the advisor's /metrics: one series per pair, following the latest snapshot."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from advisor.api.topology_metrics import TopologyCollector
from advisor.cluster.state import ClusterState
from collector.snapshot import NodeSnapshot
from tests.advisor.factories import snapshot, two_socket_links


@dataclass
class Source:
    state: ClusterState


def scrape(state: ClusterState) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(TopologyCollector(Source(state)))
    return registry


def link(registry: CollectorRegistry, node: str, a: int, b: int, level: str) -> float | None:
    labels = {"node": node, "gpu_a": str(a), "gpu_b": str(b), "level": level}
    return registry.get_sample_value("gpuadvisor_advisor_gpu_link_info", labels)


def test_every_pair_of_every_node_is_one_series_with_its_level() -> None:
    state = ClusterState()
    state.ingest(NodeSnapshot.model_validate(snapshot("n1", gpus=4, links=two_socket_links(4))))
    state.ingest(NodeSnapshot.model_validate(snapshot("n2", gpus=2)))
    registry = scrape(state)
    assert link(registry, "n1", 0, 1, "NVLINK") == 1
    assert link(registry, "n1", 1, 2, "NUMA") == 1
    assert link(registry, "n1", 1, 2, "NVLINK") is None
    assert link(registry, "n2", 0, 1, "NVLINK") == 1
    samples = [s for family in registry.collect() for s in family.samples]
    assert len(samples) == 6 + 1


def test_a_new_snapshot_replaces_the_links_and_a_removed_node_disappears() -> None:
    state = ClusterState()
    state.ingest(NodeSnapshot.model_validate(snapshot("n1", gpus=2)))
    pcie = [{"a": 1, "b": 0, "level": "PCIE_SWITCH"}]
    state.ingest(NodeSnapshot.model_validate(snapshot("n1", gpus=2, links=pcie)))
    registry = scrape(state)
    assert link(registry, "n1", 0, 1, "NVLINK") is None
    assert link(registry, "n1", 0, 1, "PCIE_SWITCH") == 1
    state.remove_node("n1")
    assert not [s for family in scrape(state).collect() for s in family.samples]
