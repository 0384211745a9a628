"""co-locations record how the pair shared the GPU, and the repeats' spread

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-27 16:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("colocations") as batch:
        batch.add_column(sa.Column("sharing", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("repeats", sa.Integer(), server_default="1", nullable=False))
        batch.add_column(sa.Column("spread_ratio", sa.Float(), nullable=True))
        batch.add_column(sa.Column("flagged", sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("colocations") as batch:
        batch.drop_column("flagged")
        batch.drop_column("spread_ratio")
        batch.drop_column("repeats")
        batch.drop_column("sharing")
