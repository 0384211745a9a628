"""Alembic environment: runs migrations on the engine handed over by `profiler.store.db.upgrade`."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Engine, create_engine

from profiler.store.models import Base

config = context.config
engine: Engine | None = config.attributes.get("engine")
if engine is None:
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "sqlite:///./gpuadvisor.db")

with engine.begin() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
