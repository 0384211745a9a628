"""The bridge from the simulator's arrays to the service's scorer, so the `advisor` policy is the real advice.

`advisor.placement.scorer.Scorer` takes `NodeState`s; building one per node per pod would dominate a run of
10,000 pods over 1,213 nodes, and most nodes are in one of a few hundred distinct states (same GPU model, topology and
free shares). The score of a node is a pure function of its state, so `StateInterner` keeps one `NodeState` per distinct
state and the policies score one representative of each, then place on the first node in that state.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from advisor.placement.fragmentation import IntArray
from advisor.placement.types import GpuState, NodeState, Resident, Topology
from advisor.sim.model import GPU_MILLI, SimNode
from collector.snapshot import LinkLevel

_BW_PER_SM_RATIO = 0.6


def topology_of(node: SimNode) -> Topology:
    """NVLink inside each `nvlink_groups` group, SYSTEM between groups; PCIe host bridge everywhere without groups."""
    if not node.nvlink_groups:
        return Topology.uniform(node.gpus, LinkLevel.PCIE_HOSTBRIDGE)
    links = [(a, b, LinkLevel.NVLINK) for group in node.nvlink_groups for a in group for b in group if a < b]
    return Topology.from_links(node.gpus, links)


class StateInterner:
    """One `NodeState` per distinct (GPU model, topology, per-GPU residents) state, and each node's state id."""

    def __init__(self, nodes: Sequence[SimNode]) -> None:
        self._nodes = nodes
        self._topologies: dict[tuple[int, tuple[tuple[int, ...], ...]], Topology] = {}
        self._ids: dict[tuple[object, ...], int] = {}
        self.states: list[NodeState] = []
        self.node_state = np.zeros(len(nodes), dtype=np.int64)

    def topology(self, node: SimNode) -> Topology:
        key = (node.gpus, node.nvlink_groups)
        topo = self._topologies.get(key)
        if topo is None:
            topo = self._topologies[key] = topology_of(node)
        return topo

    def update(
        self, index: int, gpus: Sequence[tuple[int, tuple[Resident, ...]]], gangs: frozenset[str] = frozenset()
    ) -> None:
        """Set node `index`'s GPUs as (allocated milli, residents) per GPU index, and the gangs it runs members of."""
        node = self._nodes[index]
        key: tuple[object, ...] = (node.gpu_model, node.gpus, node.nvlink_groups, tuple(gpus), gangs)
        state_id = self._ids.get(key)
        if state_id is None:
            state = NodeState(
                name=node.name,
                gpus=tuple(
                    GpuState(index=g, model=node.gpu_model, allocated_milli=milli, residents=residents)
                    for g, (milli, residents) in enumerate(gpus)
                ),
                topology=self.topology(node),
                observed_at_seconds=0.0,
                gangs=gangs,
            )
            state_id = self._ids[key] = len(self.states)
            self.states.append(state)
        self.node_state[index] = state_id

    def distinct(self, candidates: IntArray) -> tuple[list[NodeState], IntArray]:
        """The distinct states among `candidates`, and for each candidate the position of its state in that list."""
        ids, inverse = np.unique(self.node_state[candidates], return_inverse=True)
        return [self.states[int(i)] for i in ids], inverse


def share_residents(allocated_milli: float) -> tuple[Resident, ...]:
    """Telemetry as the advisor would see a GPU whose shares are `allocated_milli` taken: one process per GPU with
    SM use equal to its share (memory bandwidth 0.6 × that, the scorer's own default)."""
    if allocated_milli <= 0 or allocated_milli >= GPU_MILLI:
        return ()
    sm = allocated_milli / GPU_MILLI
    return (
        Resident(
            pod="shares",
            gpu_milli=int(allocated_milli),
            sm_utilization_ratio=sm,
            memory_bandwidth_utilization_ratio=sm * _BW_PER_SM_RATIO,
        ),
    )
