"""Interference by sharing mode: the physical priors, the model's use of them, and the node's mode in scoring."""

from __future__ import annotations

import numpy as np
import pytest

from advisor.cluster.state import ClusterState
from advisor.features import SideColumns
from advisor.predictors import HeuristicInterference, UsageProfile
from advisor.sharing import (
    MIG,
    MPS,
    TIME_SLICING,
    describe_sharing,
    mig_prior,
    node_sharing,
    sharing_mode,
    sharing_prior,
    time_slicing_prior,
    util_sum_prior,
)
from collector.snapshot import NodeSnapshot
from tests.advisor.factories import process, snapshot


def side(sm: float, bw: float = 0.1) -> SideColumns:
    one = np.array([1.0])
    return SideColumns(one * 100, one * 32, one * sm, one * bw, one * 1e9, one * np.nan)


LIGHT, HEAVY = side(0.12), side(0.9)


def test_under_time_slicing_a_light_process_loses_half_next_to_a_heavy_one() -> None:
    """What was measured by hand on an H100 in its default compute mode (issues 32, 33): the light side ≈ 0.5, the
    heavy side ≈ 0.8, two heavy ones ≈ 0.45–0.57 each; the utilisation sum (~1) says almost no slowdown."""
    assert time_slicing_prior(LIGHT, HEAVY)[0] == pytest.approx(0.49, abs=0.03)
    assert time_slicing_prior(HEAVY, LIGHT)[0] == pytest.approx(0.79, abs=0.03)
    assert 0.45 <= time_slicing_prior(HEAVY, HEAVY)[0] <= 0.57
    assert util_sum_prior(LIGHT, HEAVY)[0] > 0.95  # the old picture, kept for MPS
    assert mig_prior(LIGHT, HEAVY)[0] > 0.95  # isolated instances


def test_each_row_gets_its_own_modes_prior() -> None:
    a = SideColumns(
        *(
            np.repeat(c, 4)
            for c in (
                LIGHT.solo_throughput,
                LIGHT.batch_size,
                LIGHT.sm_util,
                LIGHT.mem_bw_util,
                LIGHT.mem_bytes,
                LIGHT.amp,
            )
        )
    )
    b = SideColumns(
        *(
            np.repeat(c, 4)
            for c in (
                HEAVY.solo_throughput,
                HEAVY.batch_size,
                HEAVY.sm_util,
                HEAVY.mem_bw_util,
                HEAVY.mem_bytes,
                HEAVY.amp,
            )
        )
    )
    out = sharing_prior(a, b, ["time-slicing", "mps", "mig", ""])
    assert out[0] == time_slicing_prior(LIGHT, HEAVY)[0]
    assert out[1] == out[3] == util_sum_prior(LIGHT, HEAVY)[0]
    assert out[2] == mig_prior(LIGHT, HEAVY)[0]
    assert [sharing_mode(v) for v in ("Time-Slicing", "MPS", "mig", "none", "", None)] == [
        TIME_SLICING,
        MPS,
        MIG,
        "",
        "",
        "",
    ]


def test_the_heuristic_takes_turns_on_a_time_sliced_gpu() -> None:
    heuristic = HeuristicInterference()
    heavy = process_like(0.9)
    concurrent = heuristic.slowdowns("h100", "light", UsageProfile(0.12, 0.05), [heavy])
    turns = heuristic.slowdowns("h100", "light", UsageProfile(0.12, 0.05), [heavy], sharing="time-slicing")
    assert concurrent[0] < 1.2
    assert turns[0] == pytest.approx(1 / 0.49, rel=0.05)  # the light pod loses half
    assert turns[1] == pytest.approx(1 / 0.79, rel=0.05)  # the heavy resident a fifth


class process_like:  # noqa: N801 - a ResidentLike value
    def __init__(self, sm: float) -> None:
        self.workload = "heavy"
        self.sm_utilization_ratio = sm
        self.memory_bandwidth_utilization_ratio = 0.3


def test_a_nodes_mode_comes_from_its_labels_and_mig_devices_else_time_slicing_assumed() -> None:
    assert node_sharing(None, has_mig_devices=False) == (TIME_SLICING, True)
    assert node_sharing({"nvidia.com/gpu.sharing-strategy": "mps"}, has_mig_devices=False) == (MPS, False)
    assert node_sharing({"nvidia.com/gpu.sharing-strategy": "time-slicing"}, has_mig_devices=False) == (
        TIME_SLICING,
        False,
    )
    assert node_sharing({"nvidia.com/mig.strategy": "single"}, has_mig_devices=False) == (MIG, False)
    assert node_sharing({}, has_mig_devices=True) == (MIG, False)
    assert "assumed" in describe_sharing([(TIME_SLICING, True), (TIME_SLICING, True)])
    assert describe_sharing([(MPS, False)]) == "mps on 1 node (read from the node)"


def test_the_cluster_state_rebuilds_a_node_when_its_sharing_label_changes() -> None:
    state = ClusterState()
    state.ingest(NodeSnapshot.model_validate(snapshot("n1", busy={0: [process("p", sm=0.9)]})))
    assert (state.nodes["n1"].sharing_mode, state.nodes["n1"].sharing_assumed) == (TIME_SLICING, True)
    state.set_node_labels("n1", {"nvidia.com/gpu.sharing-strategy": "mps"})
    assert (state.nodes["n1"].sharing_mode, state.nodes["n1"].sharing_assumed) == (MPS, False)
