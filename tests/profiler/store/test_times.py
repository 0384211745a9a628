"""Times read from the store carry their zone (UTC) on every backend: SQLite keeps none, and `profile list` and
`models list` printed `2026-11-27T16:45:00` without one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from sqlalchemy import Engine

from profiler import views
from profiler.records import ExecutionRecord
from profiler.store import db, repo


def test_times_come_back_in_utc_with_their_zone(store_engine: Engine) -> None:
    sessions = db.session_factory(store_engine)
    elsewhere = timezone(timedelta(hours=2))
    submitted = datetime(2026, 11, 27, 18, 0, tzinfo=elsewhere)
    with db.transaction(sessions) as s:
        repo.save_trial_run(session=s, namespace="ml", name="r1", workload="w", spec={"a": 1})
        repo.save_execution(
            session=s,
            execution=ExecutionRecord(job_id="j", submit_time=submitted, end_time=submitted + timedelta(hours=1)),
        )
    with sessions() as s:
        (run,) = views.list_runs(s)
        (execution,) = repo.list_executions(session=s)
    for stamp in (run["created_at"], run["updated_at"]):
        assert datetime.fromisoformat(stamp).utcoffset() == timedelta(0), stamp
    assert execution.submit_time == submitted
    assert execution.submit_time.tzinfo == UTC
    assert execution.submit_time.hour == 16
