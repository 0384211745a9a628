"""Pairs timed over their overlap, repeats folded into median and spread, and the sharing mode, on recorded shapes.

The first test replays the shape of the H100 run in tests/profiler/data/h100-reference-cnn.json (a copy of
../shared/data/h100-2026-11-27/reference-cnn.json): 300 steps of each reference workload took about a second,
less than a PyTorch start-up, so the partners' steady states barely met and cnn stored 1.12 of its solo speed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collector.backend import SharingFacts
from collector.sharing import sharing_mode
from profiler.progress import ProgressSample
from profiler.results import Phase, TrialOutcome, records_for
from profiler.spec import parse_trialrun
from profiler.summary import (
    OverlapRule,
    SummaryError,
    fold_repeats,
    measured_enough,
    overlap_seconds,
    summarise,
    summarise_pair,
)
from profiler.trials import TrialKind, expand
from tests.profiler.specs import trialrun

H100_RUN = json.loads((Path(__file__).parent / "data" / "h100-reference-cnn.json").read_text())


def _steps(segments: list[tuple[float, float, float]], batch: int) -> list[ProgressSample]:
    """Progress of a workload that runs at `rate` samples/s from `start` to `end` for each (start, end, rate),
    one report per step."""
    out: list[ProgressSample] = []
    step = 0
    for start, end, rate in segments:
        t = start
        while t < end:
            t += batch / rate
            step += 1
            out.append(ProgressSample(step, step * batch, t))
    return out


def _trial(name: str) -> dict[str, object]:
    return next(t for t in H100_RUN["trials"] if t["trial"] == name)


def test_a_pair_whose_sides_barely_overlap_fails_with_the_reason_instead_of_storing_more_than_solo() -> None:
    solo_cnn = _trial("t000")["throughputs"][0]  # type: ignore[index]
    pair = _trial("t004")  # cnn-bs64 + lstm-bs20: stored 14,242 samples/s for cnn, 1.12 x its solo run
    assert pair["partner"] == "lstm-bs20"
    alone = pair["throughputs"][0]  # type: ignore[index]  # cnn's speed in that run while lstm was still starting
    # cnn steps from 3.0 s (its start-up) for ~1.3 s; lstm's start-up ends at 4.2 s, when cnn is nearly done. While
    # both run, each gets half the GPU.
    cnn = _steps([(3.0, 4.2, alone), (4.2, 4.3, alone / 2)], batch=64)
    lstm = _steps([(4.2, 4.3, 3046.0 / 2), (4.3, 6.6, 3046.0)], batch=20)

    # What the per-side summary (the protocol the H100 run used) made of it: cnn faster than alone.
    assert summarise(cnn).throughput_samples_per_s / solo_cnn > 1.05

    with pytest.raises(SummaryError, match=r"ran together past their warm-ups for 0\.\d\d s"):
        summarise_pair((cnn, lstm))
    assert overlap_seconds((cnn, lstm)) < 1.0


def test_sides_that_ran_together_are_timed_over_the_overlap_only() -> None:
    # a starts at 0 and runs alone until b's start-up ends at 1.5 s; they share until 12 s; b runs on alone to 14 s.
    a = _steps([(0.0, 1.5, 1000.0), (1.5, 12.0, 500.0)], batch=10)
    b = _steps([(1.5, 12.0, 250.0), (12.0, 14.0, 500.0)], batch=10)
    assert summarise(b).throughput_samples_per_s > 275  # b's time alone leaks into a per-side summary
    shared_a, shared_b = summarise_pair((a, b))
    assert shared_a.throughput_samples_per_s == pytest.approx(500.0, rel=0.02)
    assert shared_b.throughput_samples_per_s == pytest.approx(250.0, rel=0.02)
    # b's warm-up: 20 % of its time beside a (1.5 s to 12 s)
    assert overlap_seconds((a, b)) == pytest.approx(12.0 - (1.5 + 0.2 * 10.5), abs=0.1)


def test_the_overlap_rule_is_a_setting_in_seconds_and_share_of_the_trial() -> None:
    a = _steps([(0.0, 10.0, 500.0)], batch=10)
    b = _steps([(6.0, 10.0, 500.0)], batch=10)  # overlap ~3.2 s of a 10 s trial
    with pytest.raises(SummaryError, match="at least 5 s"):
        summarise_pair((a, b))
    with pytest.raises(SummaryError, match="at least 1 s and 50%"):
        summarise_pair((a, b), rule=OverlapRule(min_seconds=1.0, min_share=0.5))
    shared, _ = summarise_pair((a, b), rule=OverlapRule(min_seconds=3.0, min_share=0.3))
    assert shared.throughput_samples_per_s == pytest.approx(500.0, rel=0.02)


def test_repeats_fold_into_the_median_and_their_spread() -> None:
    runs = [summarise(_steps([(0.0, 5.0, rate)], batch=10)) for rate in (100.0, 130.0, 104.0)]
    folded = fold_repeats(runs)
    assert folded.repeats == 3
    assert folded.throughput_samples_per_s == pytest.approx(104.0, rel=0.01)
    assert folded.spread_ratio == pytest.approx(30.0 / 104.0, rel=0.02)
    assert fold_repeats(runs[:1]).spread_ratio is None


def test_repeats_make_one_row_per_configuration_flagged_when_they_spread_too_far() -> None:
    doc = trialrun(
        matrix={"gpuModels": ["H100"], "gpuCounts": [1], "batchSizes": [64]},
        colocateWith=[{"workload": "lstm", "command": ["lstm"], "batchSize": 20}],
        repeats=3,
    )
    run = parse_trialrun(doc)
    trials = expand(run.spec)
    assert len(trials) == 9  # solo, solo, pair; three rounds
    assert [t.repeat for t in trials] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    solo_rates = {"resnet50": [400.0, 410.0, 395.0], "lstm": [100.0, 160.0, 101.0]}  # lstm's repeats disagree
    outcomes = []
    for trial in trials:
        if trial.kind is TrialKind.PAIR:
            summaries = tuple(summarise(_steps([(0.0, 5.0, r)], 10)) for r in (200.0, 50.0))
        else:
            rate = solo_rates[trial.workload][trial.repeat]
            summaries = (summarise(_steps([(0.0, 5.0, rate)], 10)),)
        notes = {"sharing": "time-slicing"} if trial.kind is TrialKind.PAIR else {}
        outcomes.append(TrialOutcome(trial, Phase.SUCCEEDED, "", "H100", "n1", summaries, notes))
    records = records_for(run, trials, outcomes)
    assert len(records.profiles) == 2
    (coloc,) = records.colocations.values()
    assert coloc.repeats == 3
    assert coloc.solo_throughput_b == pytest.approx(101.0, rel=0.02)  # the median, not the 160 outlier
    assert coloc.sharing == "time-slicing"
    assert coloc.flagged  # lstm's solo runs spread by ~60 %
    by_workload = {p.workload: p for p in records.profiles.values()}
    assert by_workload["resnet50"].extra["flagged"] is False
    assert by_workload["lstm"].extra["flagged"] is True
    assert by_workload["lstm"].extra["repeat_throughputs"] == pytest.approx([100.0, 160.0, 101.0], rel=0.02)
    assert set(records.ids_of) == {t.id for t in trials}  # every repeat points at its configuration's row


@pytest.mark.parametrize(
    ("facts", "pids", "daemon", "mode"),
    [
        (SharingFacts(compute_mode="default", mig_enabled=False), {1, 2}, False, "time-slicing"),
        (SharingFacts(), {1, 2}, False, "time-slicing"),  # the mode cannot be read: no MPS, no MIG
        (SharingFacts(compute_mode="exclusive-process", mps_pids=frozenset({2})), {1, 2}, False, "mps"),
        (SharingFacts(compute_mode="default"), {1, 2}, True, "mps"),  # a control daemon is listening
        (SharingFacts(compute_mode="default", mig_enabled=True), {1, 2}, False, "mig"),
        (SharingFacts(compute_mode="exclusive-process"), {1, 2}, False, ""),
    ],
)
def test_the_sharing_mode_follows_what_the_driver_says(
    facts: SharingFacts, pids: set[int], daemon: bool, mode: str
) -> None:
    assert sharing_mode(facts, pids, daemon) == mode


def test_a_running_pair_is_stopped_only_once_its_overlap_passes_the_rule() -> None:
    rule = OverlapRule(min_seconds=2.0, min_share=0.3)
    a = _steps([(0.0, 9.0, 500.0)], batch=10)
    late = _steps([(5.0, 9.0, 500.0)], batch=10)  # overlap ~3.2 s but only ~35 % of the 9 s so far
    assert measured_enough((a, late), 2.0, rule=rule)
    assert not measured_enough((a, late), 2.0, rule=OverlapRule(min_seconds=2.0, min_share=0.5))
    assert not measured_enough((a, late), 4.0, rule=rule)  # the target itself
    assert not measured_enough((a, late[:2]), 0.1, rule=rule)  # the partner has hardly reported
    assert measured_enough((a,), 5.0)  # solo: steady time after its 20 % warm-up (1.8 s of 9 s)
    assert not measured_enough((a,), 8.0)


def _in_turns(start: float, end: float, rate: float, batch: int, phase: float) -> list[ProgressSample]:
    """A workload that gets its device in 100 ms turns (phase 0 or 0.1 s) and reports every 50 ms of wall time, so
    its reports come in bursts: what two processes under SCHED_RR on one core (or time-sliced contexts) look like."""
    out: list[ProgressSample] = []
    done = 0.0
    t = start
    while t < end:
        t += 0.05
        running = (t - start + phase) % 0.2 < 0.1
        if running:
            done += rate * 0.05
            out.append(ProgressSample(len(out) + 1, int(done) // batch * batch, t))
    return out


def test_progress_in_bursts_is_not_taken_for_a_long_warm_up() -> None:
    a = _in_turns(0.0, 10.0, 1000.0, 1, phase=0.0)
    b = _in_turns(0.0, 10.0, 1000.0, 1, phase=0.1)
    solo = summarise(a)
    assert solo.warmup_seconds < 2.5  # the 20 % by time, not most of the run
    shared_a, shared_b = summarise_pair((a, b))
    assert shared_a.throughput_samples_per_s == pytest.approx(500.0, rel=0.05)
    assert shared_b.throughput_samples_per_s == pytest.approx(500.0, rel=0.05)
