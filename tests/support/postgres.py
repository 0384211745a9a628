"""A private PostgreSQL cluster on loopback for the tests: initdb into a temp dir, pg_ctl start, stop at the end."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.binaries import require_binary
from tests.support.net import free_port


def _as_postgres(argv: list[str]) -> list[str]:
    """initdb refuses to run as root: drop to the `postgres` user when we are root."""
    if os.geteuid() != 0:
        return argv
    runuser = shutil.which("runuser") or "runuser"
    return [runuser, "-u", "postgres", "--", *argv]


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yield a SQLAlchemy URL of a fresh, empty PostgreSQL database; stop and delete it afterwards."""
    initdb = require_binary("initdb", "PostgreSQL server binaries are needed for the PostgreSQL store tests")
    pg_ctl = require_binary("pg_ctl", "PostgreSQL server binaries are needed for the PostgreSQL store tests")
    root = Path(tempfile.mkdtemp(prefix="gpuadvisor-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        pg = pwd.getpwnam("postgres")
        for path in (root, sock):
            os.chown(path, pg.pw_uid, pg.pw_gid)
    port = free_port()
    log = root / "server.log"
    try:
        subprocess.run(
            _as_postgres([initdb, "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"]),
            check=True,
            capture_output=True,
        )
        subprocess.run(
            _as_postgres(
                [
                    pg_ctl,
                    "-D",
                    str(data),
                    "-l",
                    str(log),
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off",
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
        )
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            _as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "stop"]), check=False, capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)
