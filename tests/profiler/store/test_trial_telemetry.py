"""Telemetry kept for running trials, on SQLite and PostgreSQL: idempotent writes, reads per side, deletion, and
the migration that adds the tables (upgrade, downgrade, upgrade again)."""

from __future__ import annotations

from alembic import command
from sqlalchemy import Engine

from profiler.records import ProfileRecord, TelemetryRecord, TrialSideRef, TrialSideTelemetry
from profiler.store import db, repo

A = TrialSideRef(namespace="ml", trial_run="sweep", trial="t003", side=0)
B = TrialSideRef(namespace="ml", trial_run="sweep", trial="t003", side=1)
OTHER_TRIAL = TrialSideRef(namespace="ml", trial_run="sweep", trial="t000", side=0)
OTHER_RUN = TrialSideRef(namespace="ml", trial_run="other", trial="t003", side=0)
TABLES = {"trial_telemetry", "trial_gpus"}


def _sample(stamp: str, t_seconds: float, utilization: float) -> TelemetryRecord:
    return TelemetryRecord(stamp=stamp, t_seconds=t_seconds, sm_utilization_ratio=utilization, memory_used_bytes=7)


def test_samples_and_gpus_are_kept_once_per_side_and_deleted_per_trial(store_engine: Engine) -> None:
    sessions = db.session_factory(store_engine)
    with db.transaction(sessions) as s:
        repo.add_trial_telemetry(session=s, side=A, sample=_sample("s2", 20.0, 0.6))
        repo.add_trial_telemetry(session=s, side=A, sample=_sample("s1", 10.0, 0.5))
        repo.add_trial_gpus(session=s, side=A, uuids=["GPU-1", "GPU-2"])
        repo.add_trial_telemetry(session=s, side=B, sample=_sample("s1", 10.0, 0.1))
        repo.add_trial_gpus(session=s, side=B, uuids=[])
        for side in (OTHER_TRIAL, OTHER_RUN):
            repo.add_trial_telemetry(session=s, side=side, sample=_sample("s1", 10.0, 0.9))
            repo.add_trial_gpus(session=s, side=side, uuids=["GPU-9"])
    with db.transaction(sessions) as s:  # seen again by a restarted controller: no duplicates, first value kept
        repo.add_trial_telemetry(session=s, side=A, sample=_sample("s2", 20.0, 0.0))
        repo.add_trial_gpus(session=s, side=A, uuids=["GPU-2", "GPU-3"])

    with sessions() as s:
        a = repo.trial_side_telemetry(session=s, side=A)
        b = repo.trial_side_telemetry(session=s, side=B)
    assert a == TrialSideTelemetry(
        samples=(_sample("s2", 20.0, 0.6), _sample("s1", 10.0, 0.5)), gpus=frozenset({"GPU-1", "GPU-2", "GPU-3"})
    )
    assert b == TrialSideTelemetry(samples=(_sample("s1", 10.0, 0.1),), gpus=frozenset())

    with db.transaction(sessions) as s:
        repo.delete_trial_telemetry(session=s, namespace="ml", trial_run="sweep", trials=["t003"])
    with sessions() as s:
        assert repo.trial_side_telemetry(session=s, side=A) == TrialSideTelemetry()
        assert repo.trial_side_telemetry(session=s, side=B) == TrialSideTelemetry()
        for side in (OTHER_TRIAL, OTHER_RUN):
            kept = repo.trial_side_telemetry(session=s, side=side)
            assert (len(kept.samples), kept.gpus) == (1, frozenset({"GPU-9"}))


def test_the_trial_telemetry_migration_downgrades_and_upgrades_again(store_url: str) -> None:
    engine = db.make_engine(store_url)
    db.upgrade(engine)
    sessions = db.session_factory(engine)
    with db.transaction(sessions) as s:
        repo.add_trial_telemetry(session=s, side=A, sample=_sample("s1", 10.0, 0.5))
        repo.save_profile(session=s, profile=ProfileRecord(workload="w", gpu_model="H100", throughput_samples_per_s=1))
    head = db.current_revision(engine)

    command.downgrade(db.alembic_config(engine), "0001")
    assert db.current_revision(engine) == "0001"
    assert not TABLES & set(db.table_names(engine))
    with sessions() as s:
        assert len(repo.list_profiles(session=s)) == 1

    db.upgrade(engine)
    assert db.current_revision(engine) == head
    assert set(db.table_names(engine)) >= TABLES
    with db.transaction(sessions) as s:
        assert repo.trial_side_telemetry(session=s, side=A) == TrialSideTelemetry()
        repo.add_trial_telemetry(session=s, side=A, sample=_sample("s1", 10.0, 0.5))
    engine.dispose()


def test_the_migrations_build_exactly_the_models_schema(store_engine: Engine) -> None:
    """Alembic's own comparison of the migrated database with `profiler.store.models`: a column or constraint added
    to a model without a migration (or the other way round) shows up here."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from profiler.store.models import Base

    with store_engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
