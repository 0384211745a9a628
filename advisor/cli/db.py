"""`gpuadvisor db ...`: schema management of the store."""

from __future__ import annotations

from typing import Annotated

import typer
from sqlalchemy import Engine

from advisor.cli.common import fail
from profiler.settings import ProfilerSettings
from profiler.store import db

app = typer.Typer(help="Manage the SQL store.", no_args_is_help=True)

DbUrlOption = Annotated[
    str | None,
    typer.Option("--db", help="Database URL (default: $GPUADVISOR_DB_URL or sqlite:///./gpuadvisor.db)."),
]


def open_store(db_url: str | None) -> Engine:
    """Engine for `db_url` (or the settings' URL), with the schema migrated to the newest revision."""
    if db_url is not None and not db_url.strip():
        fail("--db is empty: give a database URL (e.g. sqlite:///./gpuadvisor.db), or leave --db out for the default")
    url = ProfilerSettings().db_url if db_url is None else db_url
    try:
        engine = db.make_engine(url)
        db.upgrade(engine)
    except db.StoreError as e:
        fail(str(e))
    return engine


@app.command()
def upgrade(db_url: DbUrlOption = None) -> None:
    """Create or migrate the schema to the newest revision (safe to run repeatedly)."""
    engine = open_store(db_url)
    revision = db.current_revision(engine)
    typer.echo(f"database {engine.url.render_as_string(hide_password=True)} at revision {revision}")
