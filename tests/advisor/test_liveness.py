"""The liveness probe's own process (advisor.api.liveness): it answers while the serving process cannot, and fails
when that process's event loop is stuck — it never answers for an advisor that is stuck or gone (issue 40)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from advisor.api.liveness import verdict
from tests.support.net import free_port, wait_until

pytestmark = pytest.mark.timeout(180)


def status_of(url: str) -> tuple[int, dict[str, object]]:
    answer = httpx.get(url, timeout=10)
    return answer.status_code, answer.json()


def test_the_verdict_names_a_stall_and_a_start() -> None:
    assert verdict(None, 10.0)[0] == 503
    assert verdict(None, 10.0)[1]["status"] == "starting"
    assert verdict(2.5, 10.0) == (200, {"status": "ok", "event_loop_silent_seconds": 2.5})
    status, body = verdict(12.0, 10.0)
    assert status == 503
    assert body["status"] == "stalled"
    assert "has not run for 12.0 s (limit 10.0 s)" in str(body["reason"])


def test_the_probe_follows_the_beats_and_ends_with_its_writer() -> None:
    read_fd, write_fd = os.pipe()
    port = free_port()
    argv = ["--host=127.0.0.1", f"--port={port}", "--stall-seconds=1", f"--fd={read_fd}"]
    process = subprocess.Popen([sys.executable, "-m", "advisor.api.liveness", *argv], pass_fds=(read_fd,))
    os.close(read_fd)
    url = f"http://127.0.0.1:{port}/healthz"
    try:
        assert wait_until(lambda: status_of(url)[1]["status"] == "starting", timeout_s=60)
        os.write(write_fd, b".")
        assert wait_until(lambda: status_of(url)[0] == 200, timeout_s=30)
        # no more beats: after the stall limit, 503 with the reason
        assert wait_until(lambda: status_of(url)[1]["status"] == "stalled", timeout_s=30)
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 404
    finally:
        os.close(write_fd)  # the serving process gone: the liveness process exits with it
        assert process.wait(timeout=30) == 0


def test_advisor_serve_is_probed_on_its_liveness_port_and_fails_it_when_stuck(tmp_path: Path) -> None:
    port, liveness_port = free_port(), free_port()
    env = {**os.environ, "GPUADVISOR_LIVENESS_PORT": str(liveness_port), "GPUADVISOR_LIVENESS_STALL_SECONDS": "3"}
    argv = ["advisor", "serve", "--host=127.0.0.1", f"--port={port}", f"--db=sqlite:///{tmp_path}/s.db", "--no-kube"]
    advisor = subprocess.Popen(
        [sys.executable, "-m", "advisor.cli", *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    liveness = f"http://127.0.0.1:{liveness_port}/healthz"
    try:
        assert wait_until(lambda: status_of(liveness)[0] == 200, timeout_s=90)
        # the serving process stopped dead (SIGSTOP): its own port answers nothing, the liveness port answers, and
        # once the loop has been silent for the limit it says so
        advisor.send_signal(signal.SIGSTOP)
        with pytest.raises(httpx.TimeoutException):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
        assert wait_until(lambda: status_of(liveness)[1]["status"] == "stalled", timeout_s=60)
        advisor.send_signal(signal.SIGCONT)
        assert wait_until(lambda: status_of(liveness)[0] == 200, timeout_s=60)
        # the liveness process killed: the advisor starts another, rather than be restarted itself for nothing
        (first,) = _liveness_children(advisor.pid)
        os.kill(first, signal.SIGKILL)
        assert wait_until(lambda: _liveness_children(advisor.pid) not in ([], [first]), timeout_s=60)
        assert wait_until(lambda: status_of(liveness)[0] == 200, timeout_s=60)
    finally:
        advisor.send_signal(signal.SIGCONT)
        advisor.terminate()
        advisor.wait(timeout=60)
    # the advisor gone, its liveness process is gone too: nobody answers for it
    assert wait_until(lambda: not _answers(liveness), timeout_s=30)


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=2)
    except httpx.TransportError:
        return False
    return True


def _liveness_children(pid: int) -> list[int]:
    """The running liveness processes among `pid`'s children."""
    found = []
    for child in map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split()):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"advisor.api.liveness" in command and state != "Z":
            found.append(child)
    return found
