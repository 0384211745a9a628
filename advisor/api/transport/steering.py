"""Ingest on more than one core: ingest worker processes, and the connection steering that feeds them.

One process owns the cluster state and listens (docs/design.md §5.1, "Consistency"). A connection whose first request is
`POST /v1/telemetry` — a collector, which keeps one connection open and pushes on it every cycle — is answered there as
always, then its socket is handed to an ingest worker (`socket.send_fds`, SCM_RIGHTS over a Unix socket pair) which
serves the connection from then on (advisor/api/transport/worker.py): HTTP and the token run in the worker; the owner
receives each pushed body, validates it once with the ingest route's own checks as it builds the snapshot, applies it on
its event loop in arrival order and acks with the route's answer, which the worker sends. Every other connection
(kube-scheduler, Volcano, Prometheus, users) stays with the owner, so scoring pays nothing for the workers.

`IngestWorkers` starts and watches the workers; a worker that exits is restarted (its connections closed with it; their
collectors reconnect, and a push whose answer never came is pushed again next cycle). `steering_protocol` is uvicorn's
HTTP protocol with the hand-off added.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Message
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from advisor.api import ingest_channel as ch
from advisor.api.context import AppContext
from advisor.api.ingest_checks import Refusal, check_body
from advisor.api.routes import telemetry

log = logging.getLogger(__name__)

MAX_DEFAULT_WORKERS = 1
"""A worker spends less than ≈ 0.36 ms of CPU on a snapshot (HTTP and the token; that was with the checks, which the
owner now runs as it parses), the owner ≈ 0.38 ms validating and applying it (docs/benchmarks.md): one worker keeps up
with all the owner can apply, so more add memory (≈ 90 MB each), not throughput; they only spread what one worker's
crash interrupts. Raise it with GPUADVISOR_INGEST_WORKERS."""
STOP_SECONDS = 5.0
RESTART_DELAY_SECONDS = (1.0, 30.0)  # after a crash soon after start the delay doubles, up to the second value
STABLE_SECONDS = 10.0  # a worker that ran this long and then exited is restarted after the first delay again


def cores_available(cgroup_root: Path = Path("/sys/fs/cgroup")) -> float:
    """CPUs this process may use: its affinity, lowered by a cgroup v2 CPU limit (a container's `limits.cpu`)."""
    cores = float(len(os.sched_getaffinity(0)))
    try:
        quota, period = (cgroup_root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return cores
    if quota != "max" and float(period) > 0:
        cores = min(cores, float(quota) / float(period))
    return cores


def default_ingest_workers(cores: float) -> int:
    """One worker with a second core (`MAX_DEFAULT_WORKERS`); none on one core, where a worker would only add the
    channel's cost."""
    return max(0, min(MAX_DEFAULT_WORKERS, int(cores) - 1))


@dataclass(eq=False)
class _Worker:
    """One worker process and the owner's ends of its two channels."""

    slot: int
    process: subprocess.Popen[bytes]
    handoffs: socket.socket
    started_seconds: float
    link: _WorkerLink | None = None
    ready: bool = False


class _WorkerLink(asyncio.Protocol):
    """The owner's end of one worker's data channel."""

    def __init__(self, workers: IngestWorkers, worker: _Worker) -> None:
        self.workers = workers
        self.worker = worker
        self.transport: asyncio.Transport | None = None
        self._reader = ch.FrameReader()
        self._batch: list[bytes] | None = None  # the acks of one read, written at once (one send for many)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._batch = []
        try:
            for frame in self._reader.feed(data):
                self.workers.on_frame(self, frame)
        except ch.ChannelError as e:
            log.error("ingest worker %d sent a corrupt frame (%s); restarting it", self.worker.slot, e)
            self.close()
        finally:
            batch, self._batch = self._batch, None
            if batch and self.transport is not None and not self.transport.is_closing():
                self.transport.write(b"".join(batch))

    def connection_lost(self, exc: Exception | None) -> None:
        self.workers.on_lost(self.worker)

    def send(self, kind: int, request_id: int, payload: bytes) -> None:
        if self._batch is not None:
            self._batch.append(ch.encode(kind, request_id, payload))
        elif self.transport is not None and not self.transport.is_closing():
            self.transport.write(ch.encode(kind, request_id, payload))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


@dataclass(eq=False)
class IngestWorkers:
    """`count` ingest worker processes serving collectors' connections for the state of `ctx`; `app` answers the
    other requests that arrive on those connections."""

    count: int
    app: ASGIApp
    ctx: AppContext
    _workers: dict[int, _Worker] = field(default_factory=dict)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _turn: int = 0
    _stopping: bool = False
    _delays: dict[int, float] = field(default_factory=dict)
    _fell_back: bool = False  # a connection stayed here for want of a ready worker since one was last ready

    async def start(self) -> None:
        for slot in range(self.count):
            await self._spawn(slot)

    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers.values()]

    async def _spawn(self, slot: int) -> None:
        loop = asyncio.get_running_loop()
        data, data_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        handoffs, handoffs_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        fds = (data_theirs.fileno(), handoffs_theirs.fileno())
        process = subprocess.Popen(
            [sys.executable, "-m", "advisor.api.transport.worker", *map(str, fds)],
            pass_fds=fds,
            stdin=subprocess.DEVNULL,
        )
        data_theirs.close()
        handoffs_theirs.close()
        handoffs.setblocking(False)
        worker = _Worker(slot, process, handoffs, time.monotonic())
        self._workers[slot] = worker
        _, link = await loop.create_unix_connection(lambda: _WorkerLink(self, worker), sock=data)
        worker.link = link
        link.send(ch.SETTINGS, 0, self.ctx.settings.model_dump_json().encode())

    def hand_off(self, transport: asyncio.Transport) -> bool:
        """Give the connection of `transport` to the next ready worker (round robin); False when none took it, and
        the caller keeps serving it."""
        ready = [w for w in self._workers.values() if w.ready]
        if not ready or self._stopping:
            if not ready and not self._stopping and not self._fell_back:
                # Once until a worker is ready again, not once per push of every collector. Info, not a warning: at
                # start-up the workers come up after the port opens, and a worker's exit is a warning of its own.
                self._fell_back = True
                log.info(
                    "no ingest worker is ready: collectors' connections stay with this process (the ordinary route) "
                    "until one is"
                )
            return False
        worker = ready[self._turn % len(ready)]
        self._turn += 1
        sock = transport.get_extra_info("socket")
        if sock is None:
            return False
        try:
            socket.send_fds(worker.handoffs, [b"c"], [sock.fileno()])
        except OSError as e:  # its queue is full or it just died: this connection stays here
            log.warning("could not hand a collector's connection to ingest worker %d: %s", worker.slot, e)
            return False
        self.ctx.metrics.ingest_handoffs.inc()
        return True

    def on_frame(self, link: _WorkerLink, frame: ch.Frame) -> None:
        if frame.kind == ch.SNAPSHOT:
            code, payload = self._take(frame.payload)
            link.send(ch.ACK, frame.request_id, ch.ACK_STATUS.pack(code) + json.dumps(payload).encode())
        elif frame.kind == ch.OUTCOME_FRAME:
            for code, seconds in ch.decode_outcomes(frame.payload):
                self.ctx.metrics.request_duration.labels(telemetry.PATH, "POST", str(code)).observe(seconds)
        elif frame.kind == ch.REQUEST:
            task = asyncio.get_running_loop().create_task(self._answer(link, frame.request_id, frame.payload))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif frame.kind == ch.READY:
            link.worker.ready = True
            if self._fell_back:
                self._fell_back = False
                log.info("ingest worker %d ready: collectors' connections go to workers again", link.worker.slot)
            self.ctx.metrics.ingest_workers.inc()
        else:
            raise ch.ChannelError(f"a frame of kind {frame.kind}")

    def _take(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """Check a body a worker forwarded (its sender's token checked there) as the ingest route does, and apply the
        snapshot on this loop, in arrival order (the state's own ordering rule)."""
        snapshot = check_body(self.ctx.settings, body, time.time())
        if isinstance(snapshot, Refusal):
            if snapshot.counted_as is not None:
                self.ctx.metrics.snapshots.labels(snapshot.counted_as).inc()
            return snapshot.status_code, snapshot.payload
        try:
            return telemetry.take_snapshot(self.ctx, snapshot, body)
        except Exception:  # as uvicorn answers a route that raised: a 500 for this push, the channel goes on
            log.exception("applying the snapshot of node %s failed", snapshot.node)
            return 500, {"detail": "Internal Server Error"}

    async def _answer(self, link: _WorkerLink, request_id: int, payload: bytes) -> None:
        """Run a forwarded request through the app, as if it had arrived here, and send its whole answer back."""
        request = ch.load_request(payload)
        done = asyncio.Event()
        body_sent = False
        started: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def receive() -> Message:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": request.body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    done.set()

        try:
            await self.app(request.scope(), receive, send)
        except Exception:
            log.exception("a request forwarded by an ingest worker failed: %s %s", request.method, request.path)
            if not started:
                started = {"status": 500, "headers": [(b"content-type", b"text/plain; charset=utf-8")]}
                chunks = [b"Internal Server Error"]
        done.set()
        answer = ch.ForwardedResponse(int(started["status"]), list(started.get("headers", [])), b"".join(chunks))
        link.send(ch.RESPONSE, request_id, ch.dump(answer))

    def on_lost(self, worker: _Worker) -> None:
        """A worker's channel closed: it exited (or is stopping); restart it unless the service is stopping."""
        if self._workers.get(worker.slot) is not worker:
            return
        del self._workers[worker.slot]
        worker.handoffs.close()
        if worker.ready:
            self.ctx.metrics.ingest_workers.dec()
        if self._stopping:
            return
        ran = time.monotonic() - worker.started_seconds
        first, longest = RESTART_DELAY_SECONDS
        delay = first if ran >= STABLE_SECONDS else min(longest, self._delays.get(worker.slot, first / 2) * 2)
        self._delays[worker.slot] = delay
        self.ctx.metrics.ingest_worker_exits.inc()
        log.warning(
            "ingest worker %d (pid %d) exited (%s) after %.0f s; its connections closed, restarting it in %.0f s",
            worker.slot,
            worker.process.pid,
            worker.process.poll(),
            ran,
            delay,
        )
        task = asyncio.get_running_loop().create_task(self._restart(worker, delay))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _restart(self, worker: _Worker, delay_seconds: float) -> None:
        await _reap([worker.process], STOP_SECONDS)
        await asyncio.sleep(delay_seconds)
        if not self._stopping:
            await self._spawn(worker.slot)

    async def stop(self) -> None:
        """Close every worker's channel (each closes its connections and exits) and wait for them; kill laggards."""
        self._stopping = True
        workers = list(self._workers.values())
        for worker in workers:
            if worker.link is not None:
                worker.link.close()
            worker.handoffs.close()
        for task in list(self._tasks):
            task.cancel()
        await _reap([w.process for w in workers], STOP_SECONDS)


async def _reap(processes: list[subprocess.Popen[bytes]], within_seconds: float) -> None:
    """Wait for the processes to exit; after `within_seconds`, kill what is left (a worker stuck in a snapshot)."""
    deadline = time.monotonic() + within_seconds
    while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    for p in processes:
        if p.poll() is None:
            p.kill()
            p.wait()


def steering_protocol(workers: IngestWorkers) -> type[HttpToolsProtocol]:
    """uvicorn's HTTP protocol that hands a connection to `workers` once a snapshot pushed on it over plain HTTP with
    keep-alive is answered — its first request, for a collector; or a later one, when no worker was ready at the
    first (a worker restarting) — unless anything of a next request has arrived already (then it stays here, as do
    connections over TLS: the worker could not continue the session)."""

    class SteeringProtocol(HttpToolsProtocol):
        requests = 0  # requests begun on this connection
        steer_at = 0  # the number of the snapshot push to hand the connection off after (0: none)

        def on_message_begin(self) -> None:
            self.requests += 1
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            push = self.scope.get("method") == "POST" and self.scope.get("path") == telemetry.PATH
            self.steer_at = self.requests if push and self.scheme == "http" else 0

        def on_response_complete(self) -> None:
            if (
                self.steer_at == self.requests
                and self.cycle.keep_alive
                and not self.transport.is_closing()
                and self.transport.get_write_buffer_size() == 0
                and workers.hand_off(self.transport)
            ):
                self.transport.close()  # this process's descriptor; the connection lives on in the worker
            # Counts the request; on a closing transport it arms no keep-alive timer (none runs during a request).
            super().on_response_complete()

    return SteeringProtocol


class SteeringServer(uvicorn.Server):
    """uvicorn's server with the ingest workers: started once it listens, stopped before it stops serving (their
    connections close; a collector's push in flight gets a 503 and is pushed again next cycle)."""

    def __init__(self, config: uvicorn.Config, workers: IngestWorkers) -> None:
        super().__init__(config)
        self.workers = workers

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.should_exit:
            await self.workers.start()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self.workers.stop()
        await super().shutdown(sockets)
