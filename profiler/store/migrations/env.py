"""Alembic environment: runs migrations on the engine handed over by `profiler.store.db.upgrade`."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Engine, create_engine, text

from profiler.store.models import Base

config = context.config
engine: Engine | None = config.attributes.get("engine")
if engine is None:
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "sqlite:///./gpuadvisor.db")

# Replicas that start together (each `advisor serve` migrates on start) take turns: on PostgreSQL the first holds
# this transaction-level advisory lock until its migration commits, the others wait, then find the schema current.
# SQLite serialises writers by itself. The key is any constant shared by every gpuadvisor process.
MIGRATION_LOCK_KEY = 0x67707561647669  # "gpuadvi"

with engine.begin() as connection:
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
