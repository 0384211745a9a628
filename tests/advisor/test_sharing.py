"""Interference by sharing mode: the physical priors, the model's use of them, and the node's mode in scoring."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.cluster.state import ClusterState
from advisor.features import SideColumns
from advisor.predictors import HeuristicInterference, UsageProfile
from advisor.settings import AdvisorSettings
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
TOKEN = "s3cret"


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


def test_a_nodes_mode_comes_from_its_snapshot_then_its_labels_else_time_slicing_assumed() -> None:
    mps_label = {"nvidia.com/gpu.sharing-strategy": "mps"}
    assert node_sharing(None) == (TIME_SLICING, "assumed")
    assert node_sharing(mps_label) == (MPS, "label")
    assert node_sharing({"nvidia.com/gpu.sharing-strategy": "time-slicing"}) == (TIME_SLICING, "label")
    assert node_sharing({"nvidia.com/mig.strategy": "single"}) == (MIG, "label")
    assert node_sharing({}, has_mig_devices=True) == (MIG, "snapshot")
    # the snapshot's positive facts win over a conflicting label
    assert node_sharing({"nvidia.com/gpu.sharing-strategy": "time-slicing"}, ["mps", "time-slicing"]) == (
        MPS,
        "snapshot",
    )
    assert node_sharing(mps_label, ["mig"]) == (MIG, "snapshot")
    # a default compute mode without MPS clients is read from an absence: a label saying mps ranks above it
    assert node_sharing(mps_label, ["time-slicing"]) == (MPS, "label")
    assert node_sharing({}, ["time-slicing", ""]) == (TIME_SLICING, "snapshot")
    assert node_sharing({}, ["", ""]) == (TIME_SLICING, "assumed")  # exclusive mode, or an older collector
    assert "assumed" in describe_sharing([(TIME_SLICING, "assumed"), (TIME_SLICING, "assumed")])
    assert describe_sharing([(MPS, "label")]) == "mps on 1 node (node label)"
    assert describe_sharing([(MIG, "snapshot")]) == "mig on 1 node (snapshot: the collector's reading of the GPUs)"


def _with_sharing(body: dict[str, Any], *modes: str) -> dict[str, Any]:
    """`body` (a NodeSnapshot as JSON) with its GPUs' `sharing` set, as a collector that reads it sends."""
    gpus = [{**gpu, "sharing": mode} for gpu, mode in zip(body["gpus"], modes, strict=True)]
    return {**body, "gpus": gpus}


def test_the_cluster_state_rebuilds_a_node_when_its_sharing_label_changes() -> None:
    state = ClusterState()
    state.ingest(NodeSnapshot.model_validate(snapshot("n1", busy={0: [process("p", sm=0.9)]})))
    assert (state.nodes["n1"].sharing_mode, state.nodes["n1"].sharing_source) == (TIME_SLICING, "assumed")
    state.set_node_labels("n1", {"nvidia.com/gpu.sharing-strategy": "mps"})
    assert (state.nodes["n1"].sharing_mode, state.nodes["n1"].sharing_source) == (MPS, "label")


def test_the_node_state_takes_the_snapshots_mode_over_a_conflicting_label() -> None:
    state = ClusterState()
    state.set_node_labels("n1", {"nvidia.com/gpu.sharing-strategy": "time-slicing"})
    state.ingest(NodeSnapshot.model_validate(_with_sharing(snapshot("n1", gpus=2), "mps", "time-slicing")))
    assert (state.nodes["n1"].sharing_mode, state.nodes["n1"].sharing_source) == (MPS, "snapshot")
    state.ingest(NodeSnapshot.model_validate(_with_sharing(snapshot("n1", gpus=2), "time-slicing", "time-slicing")))
    assert (state.nodes["n1"].sharing_mode, state.nodes["n1"].sharing_source) == (TIME_SLICING, "label")


def test_score_says_which_source_decided_and_old_snapshots_still_ingest(tmp_path: Path) -> None:
    state = ClusterState()
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/a.db", no_kube=True, api_token=TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    state.set_node_labels("mps-by-label", {"nvidia.com/gpu.sharing-strategy": "mps"})
    state.set_node_labels("mig-read", {"nvidia.com/gpu.sharing-strategy": "time-slicing"})
    with TestClient(create_app(settings, state=state)) as client:
        old = snapshot("old", gpus=1)
        assert "sharing" not in old["gpus"][0]  # what a collector before the field sends
        for body in (old, snapshot("mps-by-label", gpus=1), _with_sharing(snapshot("mig-read", gpus=1), "mig")):
            assert client.post("/v1/telemetry", json=body, headers=auth).status_code < 300
        scored = client.post("/v1/score", json={"pod": {"gpus": 1}}).json()
    assert {s["node"] for s in scored["scores"]} == {"old", "mps-by-label", "mig-read"}
    assert scored["models"]["sharing"] == (
        "mig on 1 node (snapshot: the collector's reading of the GPUs); mps on 1 node (node label); "
        "time-slicing on 1 node (assumed: default compute mode, no nvidia.com/gpu.sharing-strategy label or "
        "snapshot reading)"
    )
