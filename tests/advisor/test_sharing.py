"""Interference by sharing mode: the physical priors, the model's use of them, and the node's mode in scoring."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.cluster.state import ClusterState
from advisor.features import SideColumns
from advisor.predictors import (
    _GRID,
    _GRID_PERCENTS,
    _GRID_SETS_PER_CALL,
    _TURNS,
    HeuristicInterference,
    UsageProfile,
    _pack,
    _TurnMemo,
    prepare_turn_taking,
    resident_set_keys,
    turn_taking_slowdowns,
    turn_taking_slowdowns_by_set,
    turn_taking_slowdowns_of,
)
from advisor.settings import AdvisorSettings
from advisor.sharing import (
    DEFAULT_STEP_SECONDS,
    MIG,
    MPS,
    TIME_SLICING,
    describe_sharing,
    mig_prior,
    node_sharing,
    sharing_mode,
    sharing_prior,
    time_slicing_prior,
    turn_taking,
    turn_taking_one,
    util_sum_prior,
)
from collector.snapshot import NodeSnapshot
from tests.advisor.factories import process, snapshot


def side(sm: float, bw: float = 0.1, step_seconds: float = 0.32) -> SideColumns:
    """One side whose solo step takes `step_seconds` (32 samples per step)."""
    one = np.array([1.0])
    return SideColumns(one * 32 / step_seconds, one * 32, one * sm, one * bw, one * 1e9, one * np.nan)


LIGHT, HEAVY = side(0.12), side(0.9)
TOKEN = "s3cret"


def test_under_time_slicing_a_light_process_with_short_steps_waits_out_the_heavy_ones_slices() -> None:
    """The turn-taking physics (advisor.sharing's module doc): a light process (u = 0.12) whose steps are short
    against a time slice waits out a heavy one's turns and loses about half its speed, the heavy one little; the
    utilisation sum (~1) says almost no slowdown. With long steps the same light process loses little."""
    light_short, heavy = side(0.12, step_seconds=1.2e-3), side(0.9, step_seconds=0.01)
    assert 0.45 <= time_slicing_prior(light_short, heavy)[0] <= 0.6
    assert 0.85 <= time_slicing_prior(heavy, light_short)[0] <= 0.97
    assert util_sum_prior(light_short, heavy)[0] > 0.95  # the old picture, kept for MPS
    assert time_slicing_prior(side(0.12, step_seconds=0.1), side(0.9, step_seconds=0.1))[0] > 0.85
    saturated = side(1.0, step_seconds=0.1)
    assert 0.45 <= time_slicing_prior(saturated, saturated)[0] <= 0.5  # two turns and the switches
    assert 0.45 <= time_slicing_prior(side(0.9, step_seconds=0.01), heavy)[0] <= 0.57
    assert mig_prior(LIGHT, HEAVY)[0] > 0.95  # isolated instances


def test_contexts_taking_turns_never_get_more_gpu_time_than_there_is() -> None:
    """Over a grid of duty cycles and step times (0.2 ms to 1 s), the two sides' GPU time, u_a·x_a + u_b·x_b, never
    exceeds the GPU's, and a side with no GPU work neither waits nor delays the other."""
    util = np.linspace(0.0, 1.0, 11)
    steps = np.array([2e-4, 1e-3, 3e-3, 1e-2, 0.1, 1.0])
    ua, ub, ta, tb = (g.ravel() for g in np.meshgrid(util, util, steps, steps, indexing="ij"))
    xa, xb = turn_taking(ua, ta, ub, tb)
    assert np.all(ua * xa + ub * xb <= 1.0 + 1e-9)
    assert np.all((xa > 0) & (xa <= 1.0) & (xb > 0) & (xb <= 1.0))
    idle = ua == 0.0
    assert np.all(xa[idle] == 1.0)
    assert np.all(xb[idle] == 1.0)


def test_one_pair_in_plain_floats_is_the_same_model() -> None:
    cases = [(0.12, 1.2e-3, 0.9, 0.01), (1.0, 0.1, 1.0, 0.1), (0.0, 0.01, 1.0, 0.01), (0.35, 3e-3, 1.0, 1.0)]
    for ua, ta, ub, tb in cases:
        xa, xb = turn_taking(np.array([ua]), np.array([ta]), np.array([ub]), np.array([tb]))
        assert turn_taking_one(ua, ta, ub, tb) == (xa[0], xb[0])


def test_a_side_whose_step_is_unknown_steps_every_default_step() -> None:
    unknown = SideColumns(*(np.array([v]) for v in (np.nan, 0.0, 0.12, 0.1, 1e9, np.nan)))
    known = side(0.12, step_seconds=DEFAULT_STEP_SECONDS)
    assert time_slicing_prior(unknown, HEAVY)[0] == time_slicing_prior(known, HEAVY)[0]


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
    # Steps unknown (DEFAULT_STEP_SECONDS): the light pod keeps most of its speed, the heavy resident waits out
    # the light one's turns; the same as the pair's time-slicing prior.
    light, heavy_side = side(0.12, step_seconds=DEFAULT_STEP_SECONDS), side(0.9, step_seconds=DEFAULT_STEP_SECONDS)
    assert turns[0] == pytest.approx(1 / time_slicing_prior(light, heavy_side)[0])
    assert turns[1] == pytest.approx(1 / time_slicing_prior(heavy_side, light)[0])
    assert turns[1] > 1.1 > concurrent[1]
    saturated = heuristic.slowdowns("h100", "a", UsageProfile(1.0, 0.5), [process_like(1.0)], sharing="time-slicing")
    assert saturated[0] == pytest.approx(2.0, rel=0.05)  # two saturating contexts: about half each


def test_many_gpus_taking_turns_get_each_gpus_own_numbers_bit_for_bit() -> None:
    # Utilisations on the 1 % grid's half-way points (where rounding a float is decided by its last bits), repeated
    # values in both orders, and up to four residents; the array form must give every GPU its scalar answer exactly.
    rng = np.random.default_rng(7)
    edges = np.array([0.005, 0.015, 0.125, 0.135, 0.285, 0.675, 0.995, 1.005, 0.0, 1.0, 0.5])
    m, width = 400, 4
    pod = np.where(rng.random(m) < 0.5, rng.choice(edges, m), rng.random(m))
    residents = np.where(rng.random((width, m)) < 0.5, rng.choice(edges, (width, m)), rng.random((width, m)))
    counts = rng.integers(1, width + 1, m)
    residents[:, 0] = [0.3, 0.7, 0.0, 0.0]  # padding rows hold anything: they must not count
    counts[0] = 2
    residents[:, 1] = [0.7, 0.3, 9.0, 9.0]
    counts[1] = 2
    pod[1] = pod[0]
    pod_slow, resident_slow = turn_taking_slowdowns_of(pod, residents, counts)  # solved on arrays
    again = turn_taking_slowdowns_of(pod, residents, counts)  # from the memo
    for i in range(m):
        pod_sm, resident_sm = round(float(pod[i]), 2), sorted(round(r, 2) for r in residents[: counts[i], i].tolist())
        total = pod_sm + sum(resident_sm)
        step = DEFAULT_STEP_SECONDS
        speed = turn_taking_one(pod_sm, step, min(1.0, total - pod_sm), step)[0]
        slowest = min(turn_taking_one(r, step, min(1.0, total - r), step)[0] for r in resident_sm)
        assert (pod_slow[i], resident_slow[i]) == (1 / speed, 1 / slowest), i
        assert (again[0][i], again[1][i]) == (pod_slow[i], resident_slow[i])
        assert turn_taking_slowdowns(float(pod[i]), residents[: counts[i], i].tolist()) == (1 / speed, 1 / slowest)
    assert (pod_slow[0], resident_slow[0]) == (pod_slow[1], resident_slow[1])


def test_gpus_whose_utilisations_no_memo_key_holds_get_the_scalar_answer() -> None:
    # NaN, negative, -0.0 and utilisations of 40.95 or more have no integer key; GPUs with them are asked one at a
    # time, the others still together: every GPU gets `turn_taking_slowdowns`' own answer.
    odd = [float("nan"), -0.2, -0.0, 40.95, 55.0, 40.94]
    rng = np.random.default_rng(3)
    m, width = 60, 4
    pod = rng.random(m)
    residents = rng.random((width, m))
    counts = rng.integers(1, width + 1, m)
    for i, value in enumerate(odd):
        residents[0, 2 * i] = value  # a resident's
        pod[2 * i + 1] = value  # the pod's
    pod_slow, resident_slow = turn_taking_slowdowns_of(pod, residents, counts)
    for i in range(m):
        want = turn_taking_slowdowns(float(pod[i]), residents[: counts[i], i].tolist())
        np.testing.assert_array_equal([pod_slow[i], resident_slow[i]], want, err_msg=str(i))


def test_more_distinct_keys_than_the_memo_holds_are_all_answered() -> None:
    # 20,000 distinct (pod, resident) keys in one call: more than the memo keeps; every GPU still gets its answer.
    pod = np.repeat(np.arange(100) / 100, 200)
    residents = np.tile(np.arange(200) / 100, 100)[None, :]
    pod_slow, resident_slow = turn_taking_slowdowns_of(pod, residents, np.ones(pod.size, dtype=np.intp))
    for i in range(0, pod.size, 997):
        assert (pod_slow[i], resident_slow[i]) == turn_taking_slowdowns(float(pod[i]), [float(residents[0, i])])


def _scalar_turns(pod: float, residents: list[float]) -> tuple[float, float]:
    """`turn_taking_slowdowns`' arithmetic written out, without either memo."""
    pod_sm, resident_sm = round(pod, 2), sorted(round(r, 2) for r in residents)
    total = pod_sm + sum(resident_sm)
    step = DEFAULT_STEP_SECONDS
    speed = turn_taking_one(pod_sm, step, min(1.0, total - pod_sm), step)[0]
    slowest = min(turn_taking_one(r, step, min(1.0, total - r), step)[0] for r in resident_sm)
    return 1 / speed, 1 / slowest


def test_a_resident_set_met_with_a_third_pod_size_answers_every_pod_percent_bit_for_bit() -> None:
    # Residents never seen, met by two pod sizes (solved key by key: no grid yet), then a third: each resident set's
    # grid then holds all 101 pod percents, and each is the answer of solving that one key.
    # (sets no other test meets: the grid is the process's; three residents each, so that the table of one- and
    # two-resident sets, built or not by the tests before, answers none of them)
    residents = np.array([[0.371, 0.111, 0.52], [0.0173, 0.26, 0.845], [0.05, 0.13, 0.07], [0.0, 0.0, 0.0]])
    counts = np.array([3, 3, 3])

    def grid_of(i: int) -> tuple[np.ndarray, np.ndarray]:
        percents = np.full((residents.shape[0], 1), (1 << 12) - 1, dtype=np.int64)
        percents[: counts[i], 0] = sorted(round(round(r, 2) * 100) for r in residents[: counts[i], i].tolist())
        return _GRID.find(_pack(percents).tolist(), np.zeros(_GRID_PERCENTS, dtype=np.intp), np.arange(_GRID_PERCENTS))

    for pod_sm in (0.42, 0.17):
        turn_taking_slowdowns_of(np.full(3, pod_sm), residents, counts)
        assert all(grid_of(i)[1].size == 1 for i in range(3))  # sets met by one or two sizes: no grid
    turn_taking_slowdowns_of(np.full(3, 0.66), residents, counts)
    for i in range(3):
        resident_sm = residents[: counts[i], i].tolist()
        grid, missing = grid_of(i)
        assert missing.size == 0, i
        for percent in range(_GRID_PERCENTS):
            assert tuple(grid[percent]) == _scalar_turns(percent / 100, resident_sm), (i, percent)
        new_size = turn_taking_slowdowns_of(np.array([0.93]), residents[:, i : i + 1], counts[i : i + 1])
        assert (new_size[0][0], new_size[1][0]) == _scalar_turns(0.93, resident_sm)


def test_a_set_whose_sides_were_solved_for_other_sets_gets_their_numbers() -> None:
    # A side is kept by (its percent, the residents' sum): 20 % beside a sum of 0.7 (the first set) is not 20 %
    # beside 0.5 (the second), and the third set (0, 20 and 50 %, sum 0.7) takes the first set's pod side and its
    # 20 and 50 % sides. Every pod percent of each still gets its own key's answer.
    residents = np.array([[0.2, 0.2, 0.0], [0.5, 0.3, 0.2], [0.0, 0.0, 0.5], [0.0, 0.0, 0.0]])
    counts = np.array([2, 2, 3])
    pods = np.arange(_GRID_PERCENTS) / 100
    for i in range(3):
        on_every_percent = np.repeat(residents[:, i : i + 1], _GRID_PERCENTS, axis=1)
        every_count = np.full(_GRID_PERCENTS, counts[i])
        turn_taking_slowdowns_of(pods[::-1], on_every_percent, every_count)  # key by key: 101 misses, a grid due
        got = turn_taking_slowdowns_of(pods, on_every_percent, every_count)  # the grid, from the memo of sides
        for percent in range(_GRID_PERCENTS):
            want = _scalar_turns(percent / 100, residents[: counts[i], i].tolist())
            assert (got[0][percent], got[1][percent]) == want, (i, percent)


def test_gpus_whose_set_has_a_grid_are_answered_from_it_by_their_kept_keys() -> None:
    # Sets with grids (met by three pod sizes) are found by their kept keys among sets without one: those GPUs are
    # answered without their residents' utilisations (NaN here, which no key holds), the others from theirs.
    residents = np.array([[0.13, 0.29, 0.57], [0.61, 0.33, 0.07], [0.0] * 3, [0.0] * 3])
    counts = np.full(3, 2, dtype=np.intp)
    for size in (0.21, 0.34, 0.55):
        turn_taking_slowdowns_of(np.full(2, size), residents[:, :2], counts[:2])
    keys = resident_set_keys(residents, counts)
    hidden = residents.copy()
    hidden[:, :2] = np.nan
    pod = np.array([0.77, 0.05, 0.77])
    got = turn_taking_slowdowns_by_set(pod, keys, hidden, counts)
    for i in range(3):
        assert (got[0][i], got[1][i]) == _scalar_turns(float(pod[i]), residents[:2, i].tolist()), i


def test_more_new_resident_sets_than_one_call_solves_are_all_answered() -> None:
    # Past `_GRID_SETS_PER_CALL` sets due a grid, the rest go key by key; pods above 100 % are off the grid: every
    # GPU still gets the answer of its own key, on each of three calls (the third solves grids).
    sets = _GRID_SETS_PER_CALL + 300
    residents = np.vstack([np.arange(sets) % 97 / 100 + 0.01, np.arange(sets) // 97 / 100 + 0.2])
    for size in (0.61, 0.33, 0.08):
        pod = np.where(np.arange(sets) % 5 == 0, 1.5, size)
        pod_slow, resident_slow = turn_taking_slowdowns_of(pod, residents, np.full(sets, 2, dtype=np.intp))
        for i in range(0, sets, 7):
            want = _scalar_turns(float(pod[i]), residents[:, i].tolist())
            assert (pod_slow[i], resident_slow[i]) == want, (size, i)


def test_a_key_kept_twice_keeps_its_answer_when_more_keys_follow() -> None:
    # Two threads may solve the same missing key and keep it both; the later keys must not take its row.
    memo = _TurnMemo(4)
    memo.keep([1], np.array([[2.0, 3.0]]))
    memo.keep([1], np.array([[2.0, 3.0]]))
    memo.keep([2, 3], np.array([[4.0, 5.0], [6.0, 7.0]]))
    assert (memo.find_one(1), memo.find_one(2), memo.find_one(3)) == ((2.0, 3.0), (4.0, 5.0), (6.0, 7.0))
    memo.keep([4], np.array([[8.0, 9.0]]))  # past the bound: emptied first
    assert (memo.find_one(1), memo.find_one(4)) == (None, (8.0, 9.0))


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


def test_after_start_up_sets_of_one_or_two_residents_are_answered_without_the_memos_bit_for_bit() -> None:
    # `prepare_turn_taking` (the service's start-up) solves every set of one or two residents of 0..100 %: such a
    # set met for the first time is answered from that table (no key kept in the memo of whole keys, as a first
    # meeting would keep it), with the arithmetic's own numbers. Residents above 100 % are not in the table.
    prepare_turn_taking()
    rng = np.random.default_rng(41)
    m = 400
    pod = rng.integers(0, 101, m) / 100
    counts = rng.integers(1, 3, m).astype(np.intp)
    residents = np.zeros((4, m))
    residents[0] = rng.random(m)
    residents[1] = np.where(counts > 1, rng.random(m), 0.0)
    residents[0, :20] = 1.01 + rng.random(20)  # above 100 %: one and two residents the table does not hold
    residents[1, 20:40] = np.where(counts[20:40] > 1, 1.5, 0.0)
    percents = np.full((5, m), (1 << 12) - 1, dtype=np.int64)
    percents[0] = np.rint(pod * 100)
    for i in range(m):
        percents[1 : 1 + counts[i], i] = sorted(round(round(r, 2) * 100) for r in residents[: counts[i], i].tolist())
    in_table = np.flatnonzero(((percents[1:] <= 100) | (percents[1:] == (1 << 12) - 1)).all(axis=0))
    keys = _pack(percents[:, in_table]).tolist()
    unknown = set(_TURNS.find(keys)[1].tolist())  # keys no earlier test kept
    got = turn_taking_slowdowns_of(pod, residents, counts)
    by_set = turn_taking_slowdowns_by_set(pod, resident_set_keys(residents, counts), residents, counts)
    for i in range(m):
        want = _scalar_turns(float(pod[i]), residents[: counts[i], i].tolist())
        assert (got[0][i], got[1][i]) == want, i
        assert (by_set[0][i], by_set[1][i]) == want, i
    assert len(unknown) > m // 2  # the sets are new to this process's memos
    assert set(_TURNS.find(keys)[1].tolist()) == unknown  # and none was solved key by key


def test_the_service_solves_the_small_sets_table_before_it_serves(tmp_path: Path) -> None:
    # In a process of its own (the table is the process's, and other tests build it): importing the app builds
    # nothing; its start-up (the lifespan, before the first request) does.
    script = f"""
import advisor.predictors as predictors
from fastapi.testclient import TestClient
from advisor.api import create_app
from advisor.settings import AdvisorSettings
app = create_app(AdvisorSettings(db_url="sqlite:///{tmp_path}/a.db", no_kube=True, api_token="t"))
before = predictors._SMALL_SETS._answers is None
with TestClient(app):
    print(before, predictors._SMALL_SETS._answers is not None)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.split() == ["True", "True"]
