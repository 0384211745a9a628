"""The reference TrialRuns of docs/gpu-validation.md stay valid and together cover every workload pair."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

from profiler.spec import load_trialrun
from profiler.trials import expand
from profiler.workloads import WORKLOADS

SPECS = Path(__file__).resolve().parents[2] / "docs" / "data" / "reference-trialruns"


def test_every_reference_workload_runs_solo_and_in_every_pair() -> None:
    pairs: set[frozenset[str]] = set()
    solos: set[str] = set()
    for path in sorted(SPECS.glob("*.yaml")):
        run = load_trialrun(path)
        for trial in expand(run.spec):
            names = {side.workload.split("-bs")[0] for side in trial.sides}
            if len(names) == 2:
                pairs.add(frozenset(names))
            else:
                solos |= names
    assert solos == set(WORKLOADS)
    assert pairs == {frozenset(p) for p in combinations(WORKLOADS, 2)}
