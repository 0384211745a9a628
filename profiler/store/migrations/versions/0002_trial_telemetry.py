"""trial telemetry kept while a trial runs

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 17:20:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "trial_telemetry",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("trial_run", sa.String(length=253), nullable=False),
        sa.Column("trial", sa.String(length=64), nullable=False),
        sa.Column("side", sa.Integer(), nullable=False),
        sa.Column("stamp", sa.String(length=64), nullable=False),
        sa.Column("t_seconds", sa.Float(), nullable=False),
        sa.Column("sm_utilization_ratio", sa.Float(), nullable=False),
        sa.Column("memory_used_bytes", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trial_telemetry")),
        sa.UniqueConstraint("namespace", "trial_run", "trial", "side", "stamp", name="uq_trial_telemetry_sample"),
    )
    op.create_table(
        "trial_gpus",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("trial_run", sa.String(length=253), nullable=False),
        sa.Column("trial", sa.String(length=64), nullable=False),
        sa.Column("side", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=96), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trial_gpus")),
        sa.UniqueConstraint("namespace", "trial_run", "trial", "side", "uuid", name="uq_trial_gpus_gpu"),
    )


def downgrade() -> None:
    op.drop_table("trial_gpus")
    op.drop_table("trial_telemetry")
