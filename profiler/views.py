"""What `profile list` and `profile show` (and the HTTP API) present: trial runs and their measured trials.

Reads the store through the repository and returns plain JSON-ready dicts, so the CLI's table, its `--json`
output and the API all show the same thing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy.orm import Session

from profiler.records import ColocationRecord, ProfileRecord
from profiler.store import repo
from profiler.store.models import TrialRun


def profile_dict(record: ProfileRecord) -> dict[str, Any]:
    out = dataclasses.asdict(record)
    out["trial_run"] = "/".join(record.trial_run) if record.trial_run else None
    return out


def colocation_dict(record: ColocationRecord) -> dict[str, Any]:
    out = dataclasses.asdict(record)
    out["trial_run"] = "/".join(record.trial_run) if record.trial_run else None
    out["norm_a"] = record.norm_a
    out["norm_b"] = record.norm_b
    return out


def _trials(row: TrialRun) -> list[dict[str, Any]]:
    """Status entries without the bulky per-side summaries the controller keeps for itself."""
    return [{k: v for k, v in t.items() if k not in ("summaries", "notes")} for t in row.status.get("trials", [])]


def run_summary(row: TrialRun) -> dict[str, Any]:
    trials = row.status.get("trials", [])
    return {
        "namespace": row.namespace,
        "name": row.name,
        "workload": row.workload.name,
        "phase": row.phase,
        "message": row.message,
        "trials": len(trials),
        "succeeded": sum(t.get("phase") == "Succeeded" for t in trials),
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
    }


def list_runs(session: Session, namespace: str | None = None) -> list[dict[str, Any]]:
    return [run_summary(row) for row in repo.list_trial_runs(session=session, namespace=namespace)]


def run_detail(session: Session, namespace: str, name: str) -> dict[str, Any] | None:
    """A trial run with its trials, profiles and co-locations; None when there is no such run."""
    row = repo.get_trial_run(session=session, namespace=namespace, name=name)
    if row is None:
        return None
    profiles = repo.list_profiles(session=session, trial_run=(namespace, name))
    colocations = [c for c in repo.list_colocations(session=session) if c.trial_run == (namespace, name)]
    return {
        **run_summary(row),
        "spec": row.spec,
        "trials": _trials(row),
        "profiles": [profile_dict(p) for p in profiles],
        "colocations": [colocation_dict(c) for c in colocations],
    }


def workload_detail(session: Session, workload: str) -> dict[str, Any] | None:
    """Every profile of `workload` (from any run or import); None when there is none."""
    profiles = repo.list_profiles(session=session, workload=workload)
    if not profiles:
        return None
    colocations = [c for c in repo.list_colocations(session=session) if workload in (c.workload_a, c.workload_b)]
    return {
        "workload": workload,
        "profiles": [profile_dict(p) for p in profiles],
        "colocations": [colocation_dict(c) for c in colocations],
    }
