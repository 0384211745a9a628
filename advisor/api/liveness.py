"""Liveness that a busy serving process cannot delay, and that still fails when it is stuck.

The process that holds the state answers every scheduler request on one event loop, and its heavy steps run while
holding the interpreter's lock: decoding or encoding a 20 MB scheduler body, a full garbage collection after one
(tens of millions of objects looked at), each a single C call of 0.1-0.3 s on an idle core and several times that
on a busy node. A `/healthz` answered on that loop waits for each of them (issue 40: 0.75-1.66 s under 100 x 20 MB
bodies), and a thread of the same process would wait for the same lock. So the kubelet's liveness probe is answered
by a small process of its own (`python -m advisor.api.liveness`, the standard library only, ~10 MB) on its own port:

- the serving process's event loop writes one byte into a pipe every `BEAT_SECONDS` (`Heartbeat`, a task on that
  loop: a beat is proof the loop turns);
- this process answers `GET /healthz` 200 while the last beat is younger than `--stall-seconds`, and 503 naming how
  long the loop has been silent otherwise — a loop stuck for good (a deadlock, an endless step) fails the probe, a
  1-2 s step does not; before the first beat it answers 503 `starting` (the startup probe's time);
- the pipe's end is its parent's lifetime: when the serving process exits, however, the read sees end-of-file and
  this process exits too, so it never answers for a dead advisor.

The serving port's own `/healthz` stays (users, `gpuadvisor up`, load balancers): it says the loop answered.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)

BEAT_SECONDS = 1.0
RESTART_INTERVAL_SECONDS = 60.0
PATH = "/healthz"


class Beats:
    """The time of the last beat read from the pipe (monotonic seconds), or None before the first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: float | None = None

    def beat(self) -> None:
        with self._lock:
            self._last = time.monotonic()

    def silent_seconds(self) -> float | None:
        with self._lock:
            return None if self._last is None else time.monotonic() - self._last


def verdict(silent_seconds: float | None, stall_seconds: float) -> tuple[int, dict[str, object]]:
    """The probe's status and JSON body for a loop last heard `silent_seconds` ago (None: never yet)."""
    if silent_seconds is None:
        return 503, {"status": "starting", "reason": "the serving process has not started its event loop yet"}
    seconds = round(silent_seconds, 3)
    if silent_seconds >= stall_seconds:
        reason = f"the serving process's event loop has not run for {seconds} s (limit {stall_seconds} s)"
        return 503, {"status": "stalled", "event_loop_silent_seconds": seconds, "reason": reason}
    return 200, {"status": "ok", "event_loop_silent_seconds": seconds}


def read_beats(fd: int, beats: Beats, on_end: threading.Event) -> None:
    """Record a beat for each read from `fd`; set `on_end` when the writer is gone (end-of-file)."""
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while pipe.read(4096):
            beats.beat()
    on_end.set()


def make_handler(beats: Beats, stall_seconds: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "gpuadvisor-liveness"
        sys_version = ""
        timeout = 10  # seconds a client may take to send its request: a stuck one does not keep its thread

        def do_GET(self) -> None:
            body: dict[str, object]
            if self.path.split("?", 1)[0] != PATH:
                status, body = 404, {"detail": f"not found: only {PATH} is served on this port"}
            else:
                status, body = verdict(beats.silent_seconds(), stall_seconds)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a probe every few seconds is not worth a log line

    return Handler


def serve(fd: int, host: str, port: int, stall_seconds: float) -> int:
    """Answer the probe on `host`:`port` until the pipe `fd` ends; 0 then, 2 when the port cannot be bound."""
    beats = Beats()
    ended = threading.Event()
    try:
        server = ThreadingHTTPServer((host, port), make_handler(beats, stall_seconds))
    except OSError as e:
        print(f"error: the liveness port {host}:{port} cannot be bound: {e.strerror or e}", file=sys.stderr)
        return 2
    server.daemon_threads = True
    server.timeout = 0.5
    threading.Thread(target=read_beats, args=(fd, beats, ended), daemon=True).start()
    with server:
        while not ended.is_set():
            server.handle_request()
    return 0


class Heartbeat:
    """The serving process's side: starts the liveness process and beats into its pipe from the event loop."""

    def __init__(self, host: str, port: int, stall_seconds: float) -> None:
        self.host = host
        self.port = port
        self.stall_seconds = stall_seconds
        self.process: subprocess.Popen[bytes] | None = None
        self._write_fd = -1
        self._task: asyncio.Task[None] | None = None

    def start_process(self) -> None:
        """Start the liveness process (before the event loop, so that it listens while the app starts)."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "advisor.api.liveness",
                f"--fd={read_fd}",
                f"--host={self.host}",
                f"--port={self.port}",
                f"--stall-seconds={self.stall_seconds}",
            ],
            pass_fds=(read_fd,),
            stdin=subprocess.DEVNULL,
        )
        os.close(read_fd)
        self._write_fd = write_fd
        log.info(
            "liveness: /healthz on port %d, failing after %.0f s without the event loop", self.port, self.stall_seconds
        )

    def beat(self) -> None:
        with contextlib.suppress(BlockingIOError):  # a full pipe: the reader is behind, it has beats enough
            os.write(self._write_fd, b".")

    async def run(self) -> None:
        """Beat every `BEAT_SECONDS` while the loop runs. A liveness process that died is started again (a healthy
        advisor must not be restarted for it), at most once a minute: one that cannot start (its port taken) leaves
        the probe failing, with a log line each minute."""
        restarted_at = -RESTART_INTERVAL_SECONDS
        while True:
            exited = self.process is not None and self.process.poll() is not None
            if exited and time.monotonic() - restarted_at >= RESTART_INTERVAL_SECONDS:
                log.warning("liveness: the liveness process exited; starting another")
                restarted_at = time.monotonic()
                os.close(self._write_fd)
                self._write_fd = -1
                self.start_process()
            self.beat()
            await asyncio.sleep(BEAT_SECONDS)

    def start_beating(self) -> None:
        """On the serving event loop, once the app has started."""
        self._task = asyncio.get_running_loop().create_task(self.run())

    def stop(self) -> None:
        """Stop beating and end the liveness process (it sees the pipe close and exits)."""
        if self._task is not None:
            self._task.cancel()
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1
        if self.process is not None:
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m advisor.api.liveness", description=__doc__.splitlines()[0])
    parser.add_argument("--fd", type=int, required=True, help="read end of the serving process's beat pipe")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--stall-seconds", type=float, required=True)
    args = parser.parse_args(argv)
    return serve(args.fd, args.host, args.port, args.stall_seconds)


if __name__ == "__main__":
    raise SystemExit(main())
