"""One log format across components: the advisor (uvicorn's own lines included) and the collector write every line as
`<RFC 3339 UTC time with Z> LEVEL logger: message`, so their lines sort and compare as they are."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from collector.logs import configure_logging
from tests.support.net import free_port, wait_until

LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: \S")


def test_a_record_is_one_line_in_utc_with_its_zone(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info")
    try:
        logging.getLogger("gpuadvisor.test").info("hello %s", "there")
        logging.getLogger("gpuadvisor.test").debug("not at info")
    finally:
        configure_logging(logging.WARNING)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert LINE.match(err[0]), err[0]
    assert err[0].endswith(" INFO gpuadvisor.test: hello there")


def _lines_of(args: list[str], ready: str, *, url: str) -> list[str]:
    """Run `gpuadvisor args` until `url` answers and a stderr line holds `ready`; its stderr lines."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "advisor.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "GPUADVISOR_ALLOW_UNAUTHENTICATED_WRITES": "false"},
    )
    lines: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        assert wait_until(lambda: httpx.get(url, timeout=1).status_code < 500, 60), lines
        assert wait_until(lambda: any(ready in line for line in lines), 30), lines
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        reader.join(timeout=10)
    return [line.rstrip("\n") for line in lines if line.strip()]


def test_the_advisor_and_uvicorn_inside_it_log_in_the_one_format(tmp_path: Path) -> None:
    port = free_port()
    args = ["advisor", "serve", "--no-kube", "--port", str(port), "--db", f"sqlite:///{tmp_path}/l.db"]
    lines = _lines_of(args, "Uvicorn running", url=f"http://127.0.0.1:{port}/healthz")
    assert any("uvicorn" in line for line in lines), lines
    assert any("write routes" in line for line in lines), lines  # the advisor's own start-up line
    assert [line for line in lines if not LINE.match(line)] == []


def test_the_collector_logs_in_the_same_format(tmp_path: Path) -> None:
    port = free_port()
    advisor = f"http://127.0.0.1:{free_port()}"  # nobody listens: the collector logs its failed pushes
    args = ["collector", "run", "--simulate", "1", "--no-kube", "--port", str(port), "--advisor-url", advisor]
    lines = _lines_of(args, advisor.split("//")[1], url=f"http://127.0.0.1:{port}/healthz")
    assert [line for line in lines if not LINE.match(line)] == []
