"""Engine, sessions and schema migration for the store.

URLs are validated up front so a typo in `GPUADVISOR_DB_URL` becomes one clear error, not a driver traceback.
"""

from __future__ import annotations

import fcntl
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, InterfaceError, NoSuchModuleError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
SUPPORTED_DRIVERS = ("sqlite", "postgresql+psycopg", "postgresql")


class StoreError(Exception):
    """A store problem a user can act on (bad URL, unreachable database, failed migration)."""


def shown_url(url: str) -> str:
    """`url` as it may appear in a message or a log: its password replaced by `***` (parsed or not)."""
    return _PASSWORD.sub(r"\1***@", url)


_PASSWORD = re.compile(r"(://[^/@:]*:).*@")  # greedy: a password holding "@" or "/" is hidden whole


class StoreUnavailableError(StoreError):
    """The database server could not be reached (down, refusing, timing out): the same command may work later. A
    SQLite file that cannot be opened is a plain `StoreError` (a wrong path, not an outage)."""


def _store_error(engine: Engine, what: str, e: SQLAlchemyError) -> StoreError:
    """`what` failed on `engine` with `e`: a `StoreUnavailableError` when a server's connection failed, else a
    `StoreError`; one line either way (the driver's first line, without SQLAlchemy's link to its FAQ)."""
    where = engine.url.render_as_string(hide_password=True)
    orig = getattr(e, "orig", None)  # the driver's exception, for errors raised by a statement or a connection
    cause = orig if orig is not None else e
    first = (str(cause).strip().splitlines() or [type(e).__name__])[0]
    if isinstance(e, OperationalError | InterfaceError) and engine.dialect.name != "sqlite":
        return StoreUnavailableError(f"cannot reach the store {where}: {first}")
    return StoreError(f"{what} failed on {where}: {first}")


def parse_db_url(url: str) -> URL:
    """Return the parsed URL or raise `StoreError` naming the bad URL and what is accepted."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as e:  # ValueError: a port that is not a number
        raise StoreError(
            f"invalid database URL {shown_url(url)!r}: expected sqlite:///PATH or postgresql+psycopg://…"
        ) from e
    if parsed.drivername not in SUPPORTED_DRIVERS:
        raise StoreError(
            f"unsupported database URL {shown_url(url)!r}: driver {parsed.drivername!r} is not one of "
            f"{', '.join(SUPPORTED_DRIVERS)}"
        )
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _enable_sqlite_foreign_keys(dbapi_connection: object, _record: object) -> None:
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def make_engine(url: str) -> Engine:
    parsed = parse_db_url(url)
    try:
        if parsed.get_backend_name() == "sqlite":
            # A typo in the path must not leave a fresh, empty store in a directory nobody meant to create.
            if parsed.database and parsed.database != ":memory:" and not Path(parsed.database).parent.is_dir():
                raise StoreError(
                    f"cannot use database URL {shown_url(url)!r}: "
                    f"directory {Path(parsed.database).parent} does not exist"
                )
            engine = create_engine(parsed, connect_args={"check_same_thread": False, "timeout": 30})
            event.listen(engine, "connect", _enable_sqlite_foreign_keys)
        else:
            engine = create_engine(parsed, pool_pre_ping=True)
    except (ArgumentError, NoSuchModuleError) as e:
        raise StoreError(f"cannot use database URL {shown_url(url)!r}: {shown_url(str(e))}") from e
    return engine


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: committed when the block ends, rolled back on any error."""
    with factory() as session, session.begin():
        yield session


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
    return cfg


@contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    """Processes migrating one SQLite file take turns: an exclusive lock on `<file>.migrate-lock`, held until the
    migration is done. (SQLite's own write lock comes too late: two processes both read "no schema" and both create
    it, and one fails.) PostgreSQL's turns are an advisory lock in the migration itself (migrations/env.py)."""
    database = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
    if not database or database == ":memory:":
        yield
        return
    with open(f"{database}.migrate-lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to `revision`; a no-op when it is already there."""
    try:
        with _migration_lock(engine):
            command.upgrade(alembic_config(engine), revision)
    except SQLAlchemyError as e:
        raise _store_error(engine, "database migration", e) from e


def head_revision() -> str | None:
    """The newest schema revision this version of the code knows."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()


def check_schema(engine: Engine) -> None:
    """Raise `StoreError` unless the store exists and is at the newest revision; creates and migrates nothing, for
    commands that only read (a typo in `--db` must not leave a new, empty database behind)."""
    where = engine.url.render_as_string(hide_password=True)
    database = engine.url.database
    if engine.dialect.name == "sqlite" and database and database != ":memory:" and not Path(database).exists():
        raise StoreError(f"no store at {where}: {database} does not exist (check --db / GPUADVISOR_DB_URL)")
    try:
        revision = current_revision(engine)
    except SQLAlchemyError as e:
        raise _store_error(engine, "reading the schema revision", e) from e
    head = head_revision()
    if revision is None:
        raise StoreError(f"{where} holds no gpuadvisor store: create it with `gpuadvisor db upgrade --db URL`")
    if revision != head:
        raise StoreError(
            f"the store {where} is at schema revision {revision}, this version reads {head}: "
            "migrate it with `gpuadvisor db upgrade --db URL`"
        )


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def table_names(engine: Engine) -> list[str]:
    return sorted(inspect(engine).get_table_names())


def check_connection(engine: Engine) -> None:
    """Raise `StoreError` unless the database answers a trivial query."""
    from sqlalchemy import text

    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as e:
        raise StoreError(f"database unreachable: {e.__class__.__name__}: {str(e).splitlines()[0]}") from e
