"""Several advisor replicas start at once on a fresh PostgreSQL: each runs the migrations (`advisor serve` does on
start), and all of them must come up — one migrates, the others wait for it and find the schema current.

Replicas are processes (Alembic's migration context is process-global): each imports the store, waits for a common
start time, then upgrades."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from sqlalchemy import text

from profiler.store import db

pytestmark = pytest.mark.postgres

REPLICA = """
import sys, time
from profiler.store import db
engine = db.make_engine(sys.argv[1])
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
db.upgrade(engine)
print(db.current_revision(engine))
"""


def _empty(url: str) -> None:
    engine = db.make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


def test_replicas_migrating_a_fresh_database_at_once_all_succeed(postgres_url: str) -> None:
    for _ in range(3):  # a race shows only sometimes: several rounds of four replicas
        _empty(postgres_url)
        start_at = time.time() + 3.0  # after every replica has imported
        replicas = [
            subprocess.Popen(
                [sys.executable, "-c", REPLICA, postgres_url, str(start_at)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        outcomes = [(r.wait(timeout=120), *r.communicate()) for r in replicas]
        failed = [err for code, _, err in outcomes if code != 0]
        assert not failed, failed[0][-2000:]
        assert len({out.strip() for _, out, _ in outcomes}) == 1  # every replica sees the same revision
