"""The store on SQLite and on a real PostgreSQL: migrations, round trips, idempotent upserts, the registry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import IntegrityError

from profiler.records import ColocationRecord, ExecutionRecord, ProfileRecord
from profiler.store import db, repo
from profiler.store.models import Gpu, Profile

TABLES = {"nodes", "gpus", "workloads", "trial_runs", "profiles", "colocations", "executions", "models"}


def test_upgrade_from_empty_creates_every_table_and_is_idempotent(store_url: str) -> None:
    engine = db.make_engine(store_url)
    assert db.current_revision(engine) is None
    db.upgrade(engine)
    db.upgrade(engine)
    assert set(db.table_names(engine)) >= TABLES
    assert db.current_revision(engine) is not None
    engine.dispose()


def test_profile_round_trip_and_resave_updates_in_place(store_engine: Engine) -> None:
    sessions = db.session_factory(store_engine)
    profile = ProfileRecord(
        workload="resnet50-bs64",
        gpu_model="NVIDIA H100 80GB HBM3",
        throughput_samples_per_s=2410.5,
        gpu_count=2,
        batch_size=64,
        source="trialrun/ml/r1",
        step_time_seconds=0.053,
        sm_util_mean_ratio=0.81,
        peak_memory_bytes=31 * 2**30,
        extra={"steps": 120},
    )
    with db.transaction(sessions) as s:
        first = repo.save_profile(session=s, profile=profile)
    with db.transaction(sessions) as s:
        again = repo.save_profile(
            session=s, profile=ProfileRecord(**{**_fields(profile), "throughput_samples_per_s": 2500.0})
        )
    assert first == again
    with sessions() as s:
        assert s.execute(select(func.count()).select_from(Profile)).scalar_one() == 1
        (stored,) = repo.list_profiles(session=s, workload="resnet50-bs64")
    assert stored.throughput_samples_per_s == 2500.0
    assert stored.peak_memory_bytes == 31 * 2**30
    assert stored.extra == {"steps": 120}


def _fields(record: ProfileRecord) -> dict[str, object]:
    return {name: getattr(record, name) for name in record.__slots__}  # type: ignore[attr-defined]


def test_colocation_norms_and_idempotent_import(store_engine: Engine) -> None:
    sessions = db.session_factory(store_engine)
    row = ColocationRecord(
        gpu_model="v100",
        workload_a="resnet18-bs16",
        workload_b="lstm-bs20",
        solo_throughput_a=100.0,
        solo_throughput_b=50.0,
        coloc_throughput_a=70.0,
        coloc_throughput_b=40.0,
        sm_util_a=0.6,
        mem_bytes_b=4 * 2**30,
    )
    for _ in range(2):
        with db.transaction(sessions) as s:
            repo.save_colocation(session=s, colocation=row)
    with sessions() as s:
        (stored,) = repo.list_colocations(session=s)
    assert stored.norm_a == pytest.approx(0.7)
    assert stored.norm_b == pytest.approx(0.8)
    assert stored.mem_bytes_b == 4 * 2**30


def test_executions_keep_utc_times_and_dedupe_by_job(store_engine: Engine) -> None:
    sessions = db.session_factory(store_engine)
    t0 = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
    job = ExecutionRecord(
        job_id="ml/train-7",
        submit_time=t0,
        start_time=t0 + timedelta(minutes=3),
        end_time=t0 + timedelta(hours=2),
        workload="bert-base-bs32",
        user="alice",
        gpu_model="A100",
        gpu_count=4,
        source="k8s/prod",
    )
    for _ in range(2):
        with db.transaction(sessions) as s:
            repo.save_execution(session=s, execution=job)
    with sessions() as s:
        (stored,) = repo.list_executions(session=s)
    assert stored.end_time - stored.submit_time == timedelta(hours=2)
    assert stored.start_time == t0 + timedelta(minutes=3)
    assert stored.workload == "bert-base-bs32"


def test_foreign_keys_are_enforced(store_engine: Engine) -> None:
    sessions = db.session_factory(store_engine)
    with pytest.raises(IntegrityError), db.transaction(sessions) as s:
        s.add(Gpu(node_id=999, index=0, uuid="GPU-orphan", model="H100"))


def test_registry_promotes_exactly_one_version(store_engine: Engine) -> None:
    sessions = db.session_factory(store_engine)
    with db.transaction(sessions) as s:
        v1 = repo.add_model_version(
            session=s, kind="interference", artifact_path="/m/1", metrics={"mae": 0.06}, training_summary={"rows": 100}
        )
        repo.promote_model_version(session=s, kind="interference", version=v1)
        v2 = repo.add_model_version(
            session=s, kind="interference", artifact_path="/m/2", metrics={"mae": 0.05}, training_summary={"rows": 120}
        )
        repo.promote_model_version(session=s, kind="interference", version=v2)
    with sessions() as s:
        promoted = repo.promoted_model_version(session=s, kind="interference")
        assert promoted is not None
        assert promoted.version == 2
        assert [m.promoted for m in repo.list_model_versions(session=s, kind="interference")] == [False, True]
        with pytest.raises(LookupError, match="no interference model version 7"):
            repo.promote_model_version(session=s, kind="interference", version=7)


def test_trial_run_upsert_keeps_one_row_per_name(store_engine: Engine) -> None:
    sessions = db.session_factory(store_engine)
    with db.transaction(sessions) as s:
        repo.save_trial_run(session=s, namespace="ml", name="r1", workload="w", spec={"a": 1})
        repo.save_trial_run(session=s, namespace="ml", name="r1", workload="w", spec={"a": 1}, phase="Running")
    with sessions() as s:
        (run,) = repo.list_trial_runs(session=s)
        assert run.phase == "Running"


@pytest.mark.parametrize(
    ("url", "expected"),
    [("nonsense://x", "unsupported database URL 'nonsense://x'"), ("::", "invalid database URL '::'")],
)
def test_bad_urls_are_named(url: str, expected: str) -> None:
    with pytest.raises(db.StoreError, match=expected):
        db.make_engine(url)
