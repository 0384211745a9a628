"""Fixtures shared by every test package."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text

from profiler.store import db
from tests.support.postgres import postgres_server


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An empty database URL on each supported backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('store')}/gpuadvisor.db"
        return
    url: str = request.getfixturevalue("postgres_url")
    engine = db.make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()
    yield url


@pytest.fixture
def store_engine(store_url: str) -> Iterator[Engine]:
    """A migrated store on each backend."""
    engine = db.make_engine(store_url)
    db.upgrade(engine)
    yield engine
    engine.dispose()
