"""Trial outcomes → store rows and status, on SQLite and PostgreSQL: summarising twice gives the same rows."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, func, select

from profiler.progress import ProgressSample
from profiler.results import Phase, TrialOutcome, records_for, save_results
from profiler.spec import parse_trialrun
from profiler.store import db, repo
from profiler.store.models import Colocation, Profile, TrialRun
from profiler.summary import summarise
from profiler.trials import TrialKind, expand
from tests.profiler.specs import trialrun

DOC = trialrun(
    matrix={"gpuModels": ["H100"], "gpuCounts": [1], "batchSizes": [64]},
    colocateWith=[{"workload": "lstm", "command": ["lstm"], "batchSize": 20}],
)


def _progress(rate: float) -> list[ProgressSample]:
    return [ProgressSample(s, s * 10, 1000.0 + s * 10 / rate) for s in range(1, 41)]


def _outcomes(pair_phase: Phase = Phase.SUCCEEDED) -> list[TrialOutcome]:
    run = parse_trialrun(DOC)
    outcomes = []
    for trial in expand(run.spec):
        if trial.kind is TrialKind.PAIR:
            summaries = (summarise(_progress(300.0)), summarise(_progress(50.0)))
            phase = pair_phase
        else:
            summaries = (summarise(_progress(400.0 if trial.workload == "resnet50" else 100.0)),)
            phase = Phase.SUCCEEDED
        outcomes.append(TrialOutcome(trial, phase, "", "NVIDIA-H100-NVL", "n1", summaries))
    return outcomes


def test_pairs_are_normalised_against_their_solos() -> None:
    run = parse_trialrun(DOC)
    records = records_for(run, expand(run.spec), _outcomes())
    (coloc,) = records.colocations.values()
    assert (coloc.norm_a, coloc.norm_b) == pytest.approx((0.75, 0.5))
    (shared,) = records.profiles["t000"].extra["colocations"]
    assert (shared["partner"], shared["trial"]) == ("lstm", "t002")
    assert (shared["normalized_throughput"], shared["partner_normalized_throughput"]) == pytest.approx((0.75, 0.5))
    resnet = records.profiles["t000"]
    assert resnet.source == "trialrun/ml/resnet-sweep"


def test_a_pair_without_successful_solos_is_failed_not_guessed() -> None:
    run = parse_trialrun(DOC)
    outcomes = _outcomes()
    outcomes[1] = TrialOutcome(outcomes[1].trial, Phase.FAILED, "OOM")
    records = records_for(run, expand(run.spec), outcomes)
    assert records.colocations == {}
    assert "solo run" in records.problems["t002"]


def test_saving_the_same_results_twice_keeps_one_row_each(store_engine: Engine) -> None:
    run = parse_trialrun(DOC)
    sessions = db.session_factory(store_engine)
    for _ in range(2):
        with db.transaction(sessions) as s:
            status = save_results(session=s, run=run, trials=expand(run.spec), outcomes=_outcomes())
    assert status["phase"] == "Succeeded"
    assert [("profileId" in t, "colocationId" in t) for t in status["trials"]] == [
        (True, False),
        (True, False),
        (False, True),
    ]
    with sessions() as s:
        counts = [s.execute(select(func.count()).select_from(t)).scalar_one() for t in (Profile, Colocation, TrialRun)]
        (stored,) = repo.list_profiles(session=s, workload="resnet50")
    assert counts == [2, 1, 1]
    assert stored.throughput_samples_per_s == pytest.approx(400.0)
    assert stored.trial_run == ("ml", "resnet-sweep")
