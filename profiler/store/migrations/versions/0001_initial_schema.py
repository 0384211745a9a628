"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-21 09:36:12.215380
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # In this order: each table's foreign keys name tables created before it.
    _create_models()
    _create_nodes()
    _create_workloads()
    _create_executions()
    _create_gpus()
    _create_trial_runs()
    _create_colocations()
    _create_profiles()


def _create_models() -> None:
    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("artifact_path", sa.Text(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("training_summary", sa.JSON(), nullable=False),
        sa.Column("promoted", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("promoted_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
        sa.UniqueConstraint("kind", "version", name="uq_models_kind_version"),
    )
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.create_index("ix_models_kind_promoted", ["kind", "promoted"], unique=False)


def _create_nodes() -> None:
    op.create_table(
        "nodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("gpu_model", sa.String(length=128), nullable=True),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_nodes")),
        sa.UniqueConstraint("name", name=op.f("uq_nodes_name")),
    )
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_nodes_gpu_model"), ["gpu_model"], unique=False)


def _create_workloads() -> None:
    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workloads")),
        sa.UniqueConstraint("name", name=op.f("uq_workloads_name")),
    )


def _create_executions() -> None:
    op.create_table(
        "executions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=300), nullable=False),
        sa.Column("job_id", sa.String(length=300), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=True),
        sa.Column("user", sa.String(length=253), nullable=False),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("queue", sa.String(length=253), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=True),
        sa.Column("gpu_model", sa.String(length=128), nullable=True),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("submit_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("start_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("end_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("mean_utilization_ratio", sa.Float(), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["workload_id"], ["workloads.id"], name=op.f("fk_executions_workload_id_workloads")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_executions")),
        sa.UniqueConstraint("source", "job_id", name="uq_executions_source_job"),
    )
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.create_index("ix_executions_end_time", ["end_time"], unique=False)
        batch_op.create_index(batch_op.f("ix_executions_gpu_model"), ["gpu_model"], unique=False)
        batch_op.create_index(batch_op.f("ix_executions_node"), ["node"], unique=False)
        batch_op.create_index("ix_executions_submit_time", ["submit_time"], unique=False)
        batch_op.create_index(batch_op.f("ix_executions_user"), ["user"], unique=False)
        batch_op.create_index(batch_op.f("ix_executions_workload_id"), ["workload_id"], unique=False)


def _create_gpus() -> None:
    op.create_table(
        "gpus",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=96), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("memory_total_bytes", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name=op.f("fk_gpus_node_id_nodes"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpus")),
        sa.UniqueConstraint("node_id", "index", name="uq_gpus_node_index"),
        sa.UniqueConstraint("uuid", name=op.f("uq_gpus_uuid")),
    )
    with op.batch_alter_table("gpus", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gpus_model"), ["model"], unique=False)


def _create_trial_runs() -> None:
    op.create_table(
        "trial_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("status", sa.JSON(), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["workload_id"], ["workloads.id"], name=op.f("fk_trial_runs_workload_id_workloads")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trial_runs")),
        sa.UniqueConstraint("namespace", "name", name="uq_trial_runs_namespace_name"),
    )
    with op.batch_alter_table("trial_runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_trial_runs_workload_id"), ["workload_id"], unique=False)


def _create_colocations() -> None:
    op.create_table(
        "colocations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=300), nullable=False),
        sa.Column("trial_run_id", sa.Integer(), nullable=True),
        sa.Column("gpu_model", sa.String(length=128), nullable=False),
        sa.Column("workload_a_id", sa.Integer(), nullable=False),
        sa.Column("workload_b_id", sa.Integer(), nullable=False),
        sa.Column("batch_size_a", sa.Integer(), nullable=False),
        sa.Column("batch_size_b", sa.Integer(), nullable=False),
        sa.Column("amp_a", sa.Boolean(), nullable=False),
        sa.Column("amp_b", sa.Boolean(), nullable=False),
        sa.Column("solo_throughput_a", sa.Float(), nullable=False),
        sa.Column("solo_throughput_b", sa.Float(), nullable=False),
        sa.Column("coloc_throughput_a", sa.Float(), nullable=False),
        sa.Column("coloc_throughput_b", sa.Float(), nullable=False),
        sa.Column("sm_util_a", sa.Float(), nullable=True),
        sa.Column("mem_bw_util_a", sa.Float(), nullable=True),
        sa.Column("mem_bytes_a", sa.BigInteger(), nullable=True),
        sa.Column("sm_util_b", sa.Float(), nullable=True),
        sa.Column("mem_bw_util_b", sa.Float(), nullable=True),
        sa.Column("mem_bytes_b", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["trial_run_id"],
            ["trial_runs.id"],
            name=op.f("fk_colocations_trial_run_id_trial_runs"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["workload_a_id"], ["workloads.id"], name=op.f("fk_colocations_workload_a_id_workloads")
        ),
        sa.ForeignKeyConstraint(
            ["workload_b_id"], ["workloads.id"], name=op.f("fk_colocations_workload_b_id_workloads")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_colocations")),
        sa.UniqueConstraint(
            "source",
            "gpu_model",
            "workload_a_id",
            "workload_b_id",
            "batch_size_a",
            "batch_size_b",
            name="uq_colocations_natural_key",
        ),
    )
    with op.batch_alter_table("colocations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_colocations_gpu_model"), ["gpu_model"], unique=False)
        batch_op.create_index("ix_colocations_pair", ["workload_a_id", "workload_b_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_colocations_trial_run_id"), ["trial_run_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_colocations_workload_b_id"), ["workload_b_id"], unique=False)


def _create_profiles() -> None:
    op.create_table(
        "profiles",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=300), nullable=False),
        sa.Column("trial_run_id", sa.Integer(), nullable=True),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(length=128), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("node_count", sa.Integer(), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("amp", sa.Boolean(), nullable=False),
        sa.Column("throughput_samples_per_s", sa.Float(), nullable=False),
        sa.Column("step_time_seconds", sa.Float(), nullable=True),
        sa.Column("sm_util_mean_ratio", sa.Float(), nullable=True),
        sa.Column("sm_util_p95_ratio", sa.Float(), nullable=True),
        sa.Column("mem_bw_util_ratio", sa.Float(), nullable=True),
        sa.Column("peak_memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("power_watts", sa.Float(), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["trial_run_id"],
            ["trial_runs.id"],
            name=op.f("fk_profiles_trial_run_id_trial_runs"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(["workload_id"], ["workloads.id"], name=op.f("fk_profiles_workload_id_workloads")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_profiles")),
        sa.UniqueConstraint(
            "source",
            "workload_id",
            "gpu_model",
            "gpu_count",
            "node_count",
            "batch_size",
            "amp",
            name="uq_profiles_natural_key",
        ),
    )
    with op.batch_alter_table("profiles", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_profiles_gpu_model"), ["gpu_model"], unique=False)
        batch_op.create_index(batch_op.f("ix_profiles_trial_run_id"), ["trial_run_id"], unique=False)
        batch_op.create_index("ix_profiles_workload_gpu", ["workload_id", "gpu_model"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("profiles", schema=None) as batch_op:
        batch_op.drop_index("ix_profiles_workload_gpu")
        batch_op.drop_index(batch_op.f("ix_profiles_trial_run_id"))
        batch_op.drop_index(batch_op.f("ix_profiles_gpu_model"))

    op.drop_table("profiles")
    with op.batch_alter_table("colocations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_colocations_workload_b_id"))
        batch_op.drop_index(batch_op.f("ix_colocations_trial_run_id"))
        batch_op.drop_index("ix_colocations_pair")
        batch_op.drop_index(batch_op.f("ix_colocations_gpu_model"))

    op.drop_table("colocations")
    with op.batch_alter_table("trial_runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_trial_runs_workload_id"))

    op.drop_table("trial_runs")
    with op.batch_alter_table("gpus", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpus_model"))

    op.drop_table("gpus")
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_executions_workload_id"))
        batch_op.drop_index(batch_op.f("ix_executions_user"))
        batch_op.drop_index("ix_executions_submit_time")
        batch_op.drop_index(batch_op.f("ix_executions_node"))
        batch_op.drop_index(batch_op.f("ix_executions_gpu_model"))
        batch_op.drop_index("ix_executions_end_time")

    op.drop_table("executions")
    op.drop_table("workloads")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_nodes_gpu_model"))

    op.drop_table("nodes")
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_index("ix_models_kind_promoted")

    op.drop_table("models")
