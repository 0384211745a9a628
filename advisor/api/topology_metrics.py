"""Each node's GPU link topology on `/metrics`, for the node-detail dashboard's link matrix.

The collectors publish links only in their snapshots and a node annotation; the advisor already holds the latest
snapshot of every node, so it exports one info series per GPU pair (`level` = NVLINK … SYSTEM, the value is 1).
Built from the cluster state on every scrape: a node that disappears from the state disappears from /metrics.
Registered only with `GPUADVISOR_EXPORT_GPU_LINKS=true`: at 28 series per 8-GPU node it would be most of /metrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from advisor.cluster.state import ClusterState


class HasState(Protocol):
    """What the collector reads on each scrape (the app's `AppContext`)."""

    @property
    def state(self) -> ClusterState: ...


class TopologyCollector(Collector):
    """`gpuadvisor_advisor_gpu_link_info{node, gpu_a, gpu_b, level}` for every GPU pair of every node."""

    def __init__(self, source: HasState) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        links = GaugeMetricFamily(
            "gpuadvisor_advisor_gpu_link_info",
            "Best connection between two GPUs of a node (value 1), from the node's latest snapshot; gpu_a < gpu_b "
            "are GPU indices as in the collector's `gpu` label.",
            labels=["node", "gpu_a", "gpu_b", "level"],
        )
        for record in self._source.state.records():
            node = record.state.name
            for link_a, link_b, level in record.links:
                a, b = sorted((link_a, link_b))
                links.add_metric([node, str(a), str(b), level], 1.0)
        yield links
