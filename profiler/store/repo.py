"""Repository functions: the only way the rest of the code reads and writes the store.

Writes are upserts on the tables' natural keys (one statement, `INSERT … ON CONFLICT DO UPDATE` on both
SQLite and PostgreSQL), so every ingestion path can be re-run without duplicating rows.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from profiler.records import (
    ColocationRecord,
    ExecutionRecord,
    ProfileRecord,
    TelemetryRecord,
    TrialSideRef,
    TrialSideTelemetry,
)
from profiler.store.models import (
    Base,
    Colocation,
    Execution,
    ModelVersion,
    Profile,
    TrialGpu,
    TrialRun,
    TrialTelemetry,
    Workload,
    utcnow,
)


def _upsert(session: Session, model: type[Base], values: dict[str, Any], key: Sequence[str]) -> int:
    """Insert `values` or update the row with the same natural `key`; return the row id."""
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(model).values(**values)
    updates = {k: stmt.excluded[k] for k in values if k not in key}
    stmt = stmt.on_conflict_do_update(index_elements=list(key), set_=updates or {key[0]: stmt.excluded[key[0]]})
    row_id: int = session.execute(stmt.returning(model.id)).scalar_one()  # type: ignore[attr-defined]
    return row_id


def _insert_ignore(session: Session, model: type[Base], rows: Sequence[dict[str, Any]]) -> None:
    """Insert `rows`, skipping any that a unique constraint says are already stored."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    session.execute(insert(model).values(list(rows)).on_conflict_do_nothing())


def workload_id(session: Session, name: str) -> int:
    """Id of workload `name`, created on first use."""
    existing = session.execute(select(Workload.id).where(Workload.name == name)).scalar_one_or_none()
    if existing is not None:
        return existing
    return _upsert(session, Workload, {"name": name, "description": "", "created_at": utcnow()}, ["name"])


def _trial_run_id(session: Session, ref: tuple[str, str] | None) -> int | None:
    if ref is None:
        return None
    namespace, name = ref
    return session.execute(
        select(TrialRun.id).where(TrialRun.namespace == namespace, TrialRun.name == name)
    ).scalar_one_or_none()


def save_trial_run(
    *,
    session: Session,
    namespace: str,
    name: str,
    workload: str,
    spec: dict[str, Any],
    phase: str = "Pending",
    status: dict[str, Any] | None = None,
    message: str = "",
) -> int:
    values = {
        "namespace": namespace,
        "name": name,
        "workload_id": workload_id(session, workload),
        "spec": spec,
        "status": status or {},
        "phase": phase,
        "message": message,
        "created_at": utcnow(),
        "updated_at": utcnow(),
    }
    return _upsert(session, TrialRun, values, ["namespace", "name"])


def get_trial_run(*, session: Session, namespace: str, name: str) -> TrialRun | None:
    return session.execute(
        select(TrialRun).where(TrialRun.namespace == namespace, TrialRun.name == name)
    ).scalar_one_or_none()


def list_trial_runs(*, session: Session, namespace: str | None = None) -> list[TrialRun]:
    stmt = select(TrialRun).order_by(TrialRun.created_at.desc(), TrialRun.id.desc())
    if namespace is not None:
        stmt = stmt.where(TrialRun.namespace == namespace)
    return list(session.execute(stmt).scalars())


def save_profile(*, session: Session, profile: ProfileRecord) -> int:
    values = {
        "source": profile.source,
        "trial_run_id": _trial_run_id(session, profile.trial_run),
        "workload_id": workload_id(session, profile.workload),
        "gpu_model": profile.gpu_model,
        "gpu_count": profile.gpu_count,
        "node_count": profile.node_count,
        "batch_size": profile.batch_size,
        "amp": profile.amp,
        "throughput_samples_per_s": profile.throughput_samples_per_s,
        "step_time_seconds": profile.step_time_seconds,
        "sm_util_mean_ratio": profile.sm_util_mean_ratio,
        "sm_util_p95_ratio": profile.sm_util_p95_ratio,
        "mem_bw_util_ratio": profile.mem_bw_util_ratio,
        "peak_memory_bytes": profile.peak_memory_bytes,
        "power_watts": profile.power_watts,
        "extra": profile.extra,
        "created_at": utcnow(),
    }
    key = ["source", "workload_id", "gpu_model", "gpu_count", "node_count", "batch_size", "amp"]
    return _upsert(session, Profile, values, key)


def profiles_mark(*, session: Session) -> tuple[int, datetime | None]:
    """(number of profiles, newest write): changes whenever a profile is added, rewritten (`save_profile` stamps
    `created_at` on update too) or deleted, for readers that poll for new measurements without reading them."""
    count, newest = session.execute(select(func.count(Profile.id), func.max(Profile.created_at))).one()
    return int(count), newest


def _profile_record(row: Profile) -> ProfileRecord:
    ref = (row.trial_run.namespace, row.trial_run.name) if row.trial_run is not None else None
    return ProfileRecord(
        workload=row.workload.name,
        gpu_model=row.gpu_model,
        throughput_samples_per_s=row.throughput_samples_per_s,
        gpu_count=row.gpu_count,
        node_count=row.node_count,
        batch_size=row.batch_size,
        amp=row.amp,
        source=row.source,
        step_time_seconds=row.step_time_seconds,
        sm_util_mean_ratio=row.sm_util_mean_ratio,
        sm_util_p95_ratio=row.sm_util_p95_ratio,
        mem_bw_util_ratio=row.mem_bw_util_ratio,
        peak_memory_bytes=row.peak_memory_bytes,
        power_watts=row.power_watts,
        trial_run=ref,
        extra=dict(row.extra),
    )


def list_profiles(
    *,
    session: Session,
    workload: str | None = None,
    gpu_model: str | None = None,
    trial_run: tuple[str, str] | None = None,
) -> list[ProfileRecord]:
    stmt: Select[Profile] = select(Profile).join(Workload).order_by(Profile.id)
    if workload is not None:
        stmt = stmt.where(Workload.name == workload)
    if gpu_model is not None:
        stmt = stmt.where(Profile.gpu_model == gpu_model)
    if trial_run is not None:
        stmt = stmt.join(TrialRun, Profile.trial_run_id == TrialRun.id).where(
            TrialRun.namespace == trial_run[0], TrialRun.name == trial_run[1]
        )
    return [_profile_record(row) for row in session.execute(stmt).scalars()]


def save_colocation(*, session: Session, colocation: ColocationRecord) -> int:
    c = colocation
    values = {
        "source": c.source,
        "trial_run_id": _trial_run_id(session, c.trial_run),
        "gpu_model": c.gpu_model,
        "workload_a_id": workload_id(session, c.workload_a),
        "workload_b_id": workload_id(session, c.workload_b),
        "batch_size_a": c.batch_size_a,
        "batch_size_b": c.batch_size_b,
        "amp_a": c.amp_a,
        "amp_b": c.amp_b,
        "solo_throughput_a": c.solo_throughput_a,
        "solo_throughput_b": c.solo_throughput_b,
        "coloc_throughput_a": c.coloc_throughput_a,
        "coloc_throughput_b": c.coloc_throughput_b,
        "sm_util_a": c.sm_util_a,
        "mem_bw_util_a": c.mem_bw_util_a,
        "mem_bytes_a": c.mem_bytes_a,
        "sm_util_b": c.sm_util_b,
        "mem_bw_util_b": c.mem_bw_util_b,
        "mem_bytes_b": c.mem_bytes_b,
        "sharing": c.sharing or None,
        "repeats": c.repeats,
        "spread_ratio": c.spread_ratio,
        "flagged": c.flagged,
        "created_at": utcnow(),
    }
    key = ["source", "gpu_model", "workload_a_id", "workload_b_id", "batch_size_a", "batch_size_b"]
    return _upsert(session, Colocation, values, key)


def list_colocations(*, session: Session, gpu_model: str | None = None) -> list[ColocationRecord]:
    stmt = select(Colocation).order_by(Colocation.id)
    if gpu_model is not None:
        stmt = stmt.where(Colocation.gpu_model == gpu_model)
    return [
        ColocationRecord(
            gpu_model=r.gpu_model,
            workload_a=r.workload_a.name,
            workload_b=r.workload_b.name,
            solo_throughput_a=r.solo_throughput_a,
            solo_throughput_b=r.solo_throughput_b,
            coloc_throughput_a=r.coloc_throughput_a,
            coloc_throughput_b=r.coloc_throughput_b,
            batch_size_a=r.batch_size_a,
            batch_size_b=r.batch_size_b,
            amp_a=r.amp_a,
            amp_b=r.amp_b,
            sm_util_a=r.sm_util_a,
            mem_bw_util_a=r.mem_bw_util_a,
            mem_bytes_a=r.mem_bytes_a,
            sm_util_b=r.sm_util_b,
            mem_bw_util_b=r.mem_bw_util_b,
            mem_bytes_b=r.mem_bytes_b,
            source=r.source,
            trial_run=(r.trial_run.namespace, r.trial_run.name) if r.trial_run is not None else None,
            sharing=r.sharing or "",
            repeats=r.repeats,
            spread_ratio=r.spread_ratio,
            flagged=r.flagged,
        )
        for r in session.execute(stmt).scalars()
    ]


def save_execution(*, session: Session, execution: ExecutionRecord) -> int:
    e = execution
    values = {
        "source": e.source,
        "job_id": e.job_id,
        "workload_id": workload_id(session, e.workload) if e.workload else None,
        "user": e.user,
        "namespace": e.namespace,
        "queue": e.queue,
        "node": e.node,
        "gpu_model": e.gpu_model,
        "gpu_count": e.gpu_count,
        "submit_time": e.submit_time,
        "start_time": e.start_time,
        "end_time": e.end_time,
        "mean_utilization_ratio": e.mean_utilization_ratio,
        "extra": e.extra,
    }
    return _upsert(session, Execution, values, ["source", "job_id"])


def _utc(ts: datetime) -> datetime:
    """SQLite drops the zone on read; every stored time is UTC."""
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def list_executions(*, session: Session, since: datetime | None = None) -> list[ExecutionRecord]:
    stmt = select(Execution).order_by(Execution.submit_time, Execution.id)
    if since is not None:
        stmt = stmt.where(Execution.end_time >= since)
    out = []
    for r in session.execute(stmt).scalars():
        out.append(
            ExecutionRecord(
                job_id=r.job_id,
                submit_time=_utc(r.submit_time),
                end_time=_utc(r.end_time),
                start_time=_utc(r.start_time) if r.start_time is not None else None,
                workload=r.workload.name if r.workload else None,
                user=r.user,
                namespace=r.namespace,
                queue=r.queue,
                node=r.node,
                gpu_model=r.gpu_model,
                gpu_count=r.gpu_count,
                mean_utilization_ratio=r.mean_utilization_ratio,
                source=r.source,
                extra=dict(r.extra),
            )
        )
    return out


def add_model_version(
    *,
    session: Session,
    kind: str,
    artifact_path: str,
    metrics: dict[str, Any],
    training_summary: dict[str, Any],
) -> int:
    """Register a new version of model `kind` (not promoted) and return its version number."""
    latest = session.execute(select(func.max(ModelVersion.version)).where(ModelVersion.kind == kind)).scalar()
    version = (latest or 0) + 1
    session.add(
        ModelVersion(
            kind=kind,
            version=version,
            artifact_path=artifact_path,
            metrics=metrics,
            training_summary=training_summary,
            promoted=False,
        )
    )
    session.flush()
    return version


def promote_model_version(*, session: Session, kind: str, version: int) -> None:
    """Make `version` the one served for `kind`, in one transaction with demoting the previous one."""
    target = session.execute(
        select(ModelVersion).where(ModelVersion.kind == kind, ModelVersion.version == version)
    ).scalar_one_or_none()
    if target is None:
        raise LookupError(f"no {kind} model version {version}")
    session.execute(update(ModelVersion).where(ModelVersion.kind == kind, ModelVersion.promoted).values(promoted=False))
    target.promoted = True
    target.promoted_at = datetime.now(UTC)
    session.flush()


def promoted_model_version(*, session: Session, kind: str) -> ModelVersion | None:
    return session.execute(
        select(ModelVersion).where(ModelVersion.kind == kind, ModelVersion.promoted)
    ).scalar_one_or_none()


def promoted_versions(*, session: Session) -> dict[str, int]:
    """The promoted version of each kind (kinds without one left out), in one small query."""
    rows = session.execute(select(ModelVersion.kind, ModelVersion.version).where(ModelVersion.promoted))
    return {row.kind: row.version for row in rows}


def list_model_versions(*, session: Session, kind: str | None = None) -> list[ModelVersion]:
    stmt = select(ModelVersion).order_by(ModelVersion.kind, ModelVersion.version)
    if kind is not None:
        stmt = stmt.where(ModelVersion.kind == kind)
    return list(session.execute(stmt).scalars())


def execution_exists(*, session: Session, source: str, job_id: str) -> bool:
    """Whether a job is already recorded (lets the recorder keep a measured utilisation it cannot re-measure)."""
    stmt = select(Execution.id).where(Execution.source == source, Execution.job_id == job_id)
    return session.execute(stmt).first() is not None


def _side_values(side: TrialSideRef) -> dict[str, Any]:
    return {"namespace": side.namespace, "trial_run": side.trial_run, "trial": side.trial, "side": side.side}


def _of_side(model: type[TrialTelemetry] | type[TrialGpu], side: TrialSideRef) -> list[ColumnElement[bool]]:
    return [
        model.namespace == side.namespace,
        model.trial_run == side.trial_run,
        model.trial == side.trial,
        model.side == side.side,
    ]


def add_trial_telemetry(*, session: Session, side: TrialSideRef, sample: TelemetryRecord) -> None:
    """Keep one collector sample of a running trial side; a sample already stored (same stamp) is left as it is."""
    values = {
        **_side_values(side),
        "stamp": sample.stamp,
        "t_seconds": sample.t_seconds,
        "sm_utilization_ratio": sample.sm_utilization_ratio,
        "memory_used_bytes": sample.memory_used_bytes,
    }
    _insert_ignore(session, TrialTelemetry, [values])


def add_trial_gpus(*, session: Session, side: TrialSideRef, uuids: Iterable[str]) -> None:
    """Keep the GPUs a running trial side was seen on; ones already stored are left as they are."""
    _insert_ignore(session, TrialGpu, [{**_side_values(side), "uuid": uuid} for uuid in sorted(set(uuids))])


def trial_side_telemetry(*, session: Session, side: TrialSideRef) -> TrialSideTelemetry:
    """What `add_trial_telemetry` and `add_trial_gpus` kept for one trial side, samples in the order added."""
    rows = session.execute(select(TrialTelemetry).where(*_of_side(TrialTelemetry, side)).order_by(TrialTelemetry.id))
    samples = tuple(
        TelemetryRecord(
            stamp=r.stamp,
            t_seconds=r.t_seconds,
            sm_utilization_ratio=r.sm_utilization_ratio,
            memory_used_bytes=r.memory_used_bytes,
        )
        for r in rows.scalars()
    )
    gpus = frozenset(session.execute(select(TrialGpu.uuid).where(*_of_side(TrialGpu, side))).scalars())
    return TrialSideTelemetry(samples=samples, gpus=gpus)


def delete_trial_telemetry(*, session: Session, namespace: str, trial_run: str, trials: Collection[str] | None) -> None:
    """Drop what was kept for these trials of a TrialRun (every side), once their outcomes are saved; `None`: for
    all its trials (the TrialRun was deleted)."""
    if trials is not None and not trials:
        return
    for model in (TrialTelemetry, TrialGpu):
        where = [model.namespace == namespace, model.trial_run == trial_run]
        if trials is not None:
            where.append(model.trial.in_(list(trials)))
        session.execute(delete(model).where(*where))
