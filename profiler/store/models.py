"""ORM tables of the store (docs/design.md §4).

Natural unique keys make every ingestion path idempotent: re-importing a CSV, re-summarising a trial or
re-recording a finished job updates the same row instead of adding a duplicate. Indexes follow the query
paths of the trainers and the API: by workload, by GPU model, by node and by time.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """Every stored time in UTC and read back with its zone: SQLite keeps no zone, so without this a time read from
    it printed as `2026-11-27T16:45:00` (no zone) in `profile list`, `models list` and the API."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or value.tzinfo is None:
            return value
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, datetime: UtcDateTime()}


class Node(Base):
    __tablename__ = "nodes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(253), unique=True)
    gpu_model: Mapped[str | None] = mapped_column(String(128), index=True)
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    first_seen: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(default=utcnow)

    gpus: Mapped[list[Gpu]] = relationship(back_populates="node", cascade="all, delete-orphan")


class Gpu(Base):
    __tablename__ = "gpus"
    __table_args__ = (UniqueConstraint("node_id", "index", name="uq_gpus_node_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    uuid: Mapped[str] = mapped_column(String(96), unique=True)
    model: Mapped[str] = mapped_column(String(128), index=True)
    memory_total_bytes: Mapped[int | None] = mapped_column(BigInteger)

    node: Mapped[Node] = relationship(back_populates="gpus")


class Workload(Base):
    __tablename__ = "workloads"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(253), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class TrialRun(Base):
    __tablename__ = "trial_runs"
    __table_args__ = (UniqueConstraint("namespace", "name", name="uq_trial_runs_namespace_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    namespace: Mapped[str] = mapped_column(String(63), default="default")
    name: Mapped[str] = mapped_column(String(253))
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    status: Mapped[dict[str, Any]] = mapped_column(default=dict)
    phase: Mapped[str] = mapped_column(String(16), default="Pending")
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    workload: Mapped[Workload] = relationship()


class Profile(Base):
    """One measured configuration of a workload (a trial), or an imported throughput row."""

    __tablename__ = "profiles"
    __table_args__ = (
        UniqueConstraint(
            "source",
            "workload_id",
            "gpu_model",
            "gpu_count",
            "node_count",
            "batch_size",
            "amp",
            name="uq_profiles_natural_key",
        ),
        Index("ix_profiles_workload_gpu", "workload_id", "gpu_model"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    source: Mapped[str] = mapped_column(String(300))
    trial_run_id: Mapped[int | None] = mapped_column(ForeignKey("trial_runs.id", ondelete="SET NULL"), index=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"))
    gpu_model: Mapped[str] = mapped_column(String(128), index=True)
    gpu_count: Mapped[int] = mapped_column(Integer, default=1)
    node_count: Mapped[int] = mapped_column(Integer, default=1)
    batch_size: Mapped[int] = mapped_column(Integer, default=0)
    amp: Mapped[bool] = mapped_column(Boolean, default=False)
    throughput_samples_per_s: Mapped[float] = mapped_column(Float)
    step_time_seconds: Mapped[float | None] = mapped_column(Float)
    sm_util_mean_ratio: Mapped[float | None] = mapped_column(Float)
    sm_util_p95_ratio: Mapped[float | None] = mapped_column(Float)
    mem_bw_util_ratio: Mapped[float | None] = mapped_column(Float)
    peak_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    power_watts: Mapped[float | None] = mapped_column(Float)
    extra: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    workload: Mapped[Workload] = relationship()
    trial_run: Mapped[TrialRun | None] = relationship()


class Colocation(Base):
    """Two workloads sharing one GPU: each side's solo and co-located throughput and solo utilisation."""

    __tablename__ = "colocations"
    __table_args__ = (
        UniqueConstraint(
            "source",
            "gpu_model",
            "workload_a_id",
            "workload_b_id",
            "batch_size_a",
            "batch_size_b",
            name="uq_colocations_natural_key",
        ),
        Index("ix_colocations_pair", "workload_a_id", "workload_b_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    source: Mapped[str] = mapped_column(String(300))
    trial_run_id: Mapped[int | None] = mapped_column(ForeignKey("trial_runs.id", ondelete="SET NULL"), index=True)
    gpu_model: Mapped[str] = mapped_column(String(128), index=True)
    workload_a_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"))
    workload_b_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"), index=True)
    batch_size_a: Mapped[int] = mapped_column(Integer, default=0)
    batch_size_b: Mapped[int] = mapped_column(Integer, default=0)
    amp_a: Mapped[bool] = mapped_column(Boolean, default=False)
    amp_b: Mapped[bool] = mapped_column(Boolean, default=False)
    solo_throughput_a: Mapped[float] = mapped_column(Float)
    solo_throughput_b: Mapped[float] = mapped_column(Float)
    coloc_throughput_a: Mapped[float] = mapped_column(Float)
    coloc_throughput_b: Mapped[float] = mapped_column(Float)
    sm_util_a: Mapped[float | None] = mapped_column(Float)
    mem_bw_util_a: Mapped[float | None] = mapped_column(Float)
    mem_bytes_a: Mapped[int | None] = mapped_column(BigInteger)
    sm_util_b: Mapped[float | None] = mapped_column(Float)
    mem_bw_util_b: Mapped[float | None] = mapped_column(Float)
    mem_bytes_b: Mapped[int | None] = mapped_column(BigInteger)
    sharing: Mapped[str | None] = mapped_column(String(16))
    repeats: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    spread_ratio: Mapped[float | None] = mapped_column(Float)
    flagged: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    workload_a: Mapped[Workload] = relationship(foreign_keys=[workload_a_id])
    workload_b: Mapped[Workload] = relationship(foreign_keys=[workload_b_id])
    trial_run: Mapped[TrialRun | None] = relationship()


class Execution(Base):
    """A finished GPU job (the JCT model's labels)."""

    __tablename__ = "executions"
    __table_args__ = (
        UniqueConstraint("source", "job_id", name="uq_executions_source_job"),
        Index("ix_executions_end_time", "end_time"),
        Index("ix_executions_submit_time", "submit_time"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    source: Mapped[str] = mapped_column(String(300))
    job_id: Mapped[str] = mapped_column(String(300))
    workload_id: Mapped[int | None] = mapped_column(ForeignKey("workloads.id"), index=True)
    user: Mapped[str] = mapped_column(String(253), default="", index=True)
    namespace: Mapped[str] = mapped_column(String(63), default="")
    queue: Mapped[str] = mapped_column(String(253), default="")
    node: Mapped[str | None] = mapped_column(String(253), index=True)
    gpu_model: Mapped[str | None] = mapped_column(String(128), index=True)
    gpu_count: Mapped[int] = mapped_column(Integer, default=1)
    submit_time: Mapped[datetime]
    start_time: Mapped[datetime | None]
    end_time: Mapped[datetime]
    mean_utilization_ratio: Mapped[float | None] = mapped_column(Float)
    extra: Mapped[dict[str, Any]] = mapped_column(default=dict)

    workload: Mapped[Workload | None] = relationship()


class ModelVersion(Base):
    """The model registry: one row per trained version; exactly one promoted version per kind."""

    __tablename__ = "models"
    __table_args__ = (
        UniqueConstraint("kind", "version", name="uq_models_kind_version"),
        Index("ix_models_kind_promoted", "kind", "promoted"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    version: Mapped[int] = mapped_column(Integer)
    artifact_path: Mapped[str] = mapped_column(Text)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    training_summary: Mapped[dict[str, Any]] = mapped_column(default=dict)
    promoted: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    promoted_at: Mapped[datetime | None]


class _TrialSide:
    """The key columns of what is kept for one running trial side (`profiler.records.TrialSideRef`)."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    namespace: Mapped[str] = mapped_column(String(63))
    trial_run: Mapped[str] = mapped_column(String(253))
    trial: Mapped[str] = mapped_column(String(64))
    side: Mapped[int] = mapped_column(Integer)


class TrialTelemetry(_TrialSide, Base):
    """A collector sample of a running trial side, kept until the trial's outcome is saved.

    A pod annotation only holds the latest sample, so what a profiler pod saw before it restarted exists nowhere
    else; the collector's stamp identifies a sample, so seeing the same annotation twice keeps one row.
    """

    __tablename__ = "trial_telemetry"
    __table_args__ = (
        UniqueConstraint("namespace", "trial_run", "trial", "side", "stamp", name="uq_trial_telemetry_sample"),
    )

    stamp: Mapped[str] = mapped_column(String(64))
    t_seconds: Mapped[float] = mapped_column(Float)
    sm_utilization_ratio: Mapped[float] = mapped_column(Float)
    memory_used_bytes: Mapped[int | None] = mapped_column(BigInteger)


class TrialGpu(_TrialSide, Base):
    """A GPU the collector reported a running trial side on (the pair check needs every one seen), until saved."""

    __tablename__ = "trial_gpus"
    __table_args__ = (UniqueConstraint("namespace", "trial_run", "trial", "side", "uuid", name="uq_trial_gpus_gpu"),)

    uuid: Mapped[str] = mapped_column(String(96))
