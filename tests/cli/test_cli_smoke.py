"""The `gpuadvisor` command as a user runs it: a subprocess, its exit code and its output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.net import free_port, wait_until


def gpuadvisor(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "advisor.cli", *args],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=120,
    )


def test_help_lists_the_command_groups() -> None:
    result = gpuadvisor("--help")
    assert result.returncode == 0
    for group in ("db", "advisor", "up"):
        assert group in result.stdout


def test_db_upgrade_twice_succeeds(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    for _ in range(2):
        result = gpuadvisor("db", "upgrade", env={"GPUADVISOR_DB_URL": url})
        assert result.returncode == 0, result.stderr
        assert "at revision" in result.stdout


def test_db_upgrade_with_a_bad_url_exits_2_with_one_line() -> None:
    result = gpuadvisor("db", "upgrade", env={"GPUADVISOR_DB_URL": "nonsense://x"})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "nonsense://x" in lines[0]
    assert "Traceback" not in result.stderr


def test_advisor_serve_answers_health_and_readiness(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "advisor.cli",
            "advisor",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--db",
            f"sqlite:///{tmp_path}/s.db",
            "--no-kube",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        assert wait_until(lambda: httpx.get(f"{base}/healthz").status_code == 200, timeout_s=60)
        ready = httpx.get(f"{base}/readyz")
        assert ready.status_code == 200
        assert ready.json()["status"] == "ready"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
