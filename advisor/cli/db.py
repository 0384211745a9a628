"""`gpuadvisor db ...`: schema management of the store."""

from __future__ import annotations

from typing import Annotated, NoReturn

import typer
from sqlalchemy import Engine

from advisor.cli.common import EXIT_UNAVAILABLE, EXIT_USAGE, fail
from profiler.settings import ProfilerSettings
from profiler.store import db

app = typer.Typer(help="Manage the SQL store.", no_args_is_help=True)

DbUrlOption = Annotated[
    str | None,
    typer.Option("--db", help="Database URL (default: $GPUADVISOR_DB_URL or sqlite:///./gpuadvisor.db)."),
]


def open_store(db_url: str | None, *, read_only: bool = False) -> Engine:
    """Engine for `db_url` (or the settings' URL), with the schema migrated to the newest revision; with `read_only`
    (commands that only read) the store must already exist at that revision and nothing is created or migrated.
    An unreachable database server exits 3, any other store problem 2."""
    if db_url is not None and not db_url.strip():
        fail("--db is empty: give a database URL (e.g. sqlite:///./gpuadvisor.db), or leave --db out for the default")
    url = ProfilerSettings().db_url if db_url is None else db_url
    try:
        engine = db.make_engine(url)
        if read_only:
            db.check_schema(engine)
        else:
            db.upgrade(engine)
    except db.StoreError as e:
        store_failure(e)
    return engine


def store_failure(e: db.StoreError) -> NoReturn:
    """The `error:` line of a store problem: exit 3 for an unreachable database server, 2 for the rest."""
    fail(str(e), EXIT_UNAVAILABLE if isinstance(e, db.StoreUnavailableError) else EXIT_USAGE)


@app.command()
def upgrade(db_url: DbUrlOption = None) -> None:
    """Create or migrate the schema to the newest revision (safe to run repeatedly)."""
    engine = open_store(db_url)
    revision = db.current_revision(engine)
    typer.echo(f"database {engine.url.render_as_string(hide_password=True)} at revision {revision}")
