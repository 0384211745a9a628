"""An ingest worker process: serves the collectors' connections that the advisor handed it, on its own core.

Started by the state-owning process (`advisor.api.transport.steering.IngestWorkers`) as `python -m
advisor.api.transport.worker DATA_FD HANDOFF_FD`. Each connection arrives as a file descriptor on HANDOFF_FD after the
owner answered its first snapshot; from then on this process reads its requests with uvicorn's HTTP protocol. A push
without the bearer token or with an oversized body is refused here with the service's own answer
(`ingest_checks.token_refusal`, `MAX_BODY_BYTES`); any other body goes to the owner over DATA_FD, which validates it
(`ingest_checks.check_body`: schema, NaN, invalid UTF-8, clock skew) as it builds the snapshot it applies, once, and the
worker sends the owner's answer (202 once applied, else the refusal). Anything else on such a connection is forwarded
whole to the owner's app. The worker exits when the owner closes DATA_FD (or dies); the connections it held close with
it, and collectors reconnect to the owner.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable
from email.utils import formatdate
from typing import Any

from uvicorn import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from advisor.api import ingest_channel as ch
from advisor.api import ingest_checks as checks
from advisor.api.limits import connection_limits
from advisor.api.transport.guard import guarded_protocol
from advisor.settings import AdvisorSettings
from collector.logs import configure_logging
from collector.push import ADVISOR_KEEP_ALIVE_SECONDS

log = logging.getLogger(__name__)

# Requests sent to the owner and not answered yet, at most; more wait here. Bounds what either side buffers for a
# worker, whatever the number of connections it serves (one request in flight per connection otherwise).
MAX_IN_FLIGHT = 256
STOP_SECONDS = 2.0  # for the answers under way when the owner closes the channel
# Answered requests are reported to the owner (its metrics) with the next frame this worker sends, or after this long.
OUTCOMES_DELAY_SECONDS = 0.05
GONE = {"detail": "the advisor is shutting down or restarting this connection's worker; push again"}


class OwnerGoneError(Exception):
    """The channel to the owner closed: it is stopping, or died."""


class OwnerLink(asyncio.Protocol):
    """The worker's end of the channel: sends frames, and resolves each request's future with the owner's answer."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.settings: asyncio.Future[AdvisorSettings] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self._reader = ch.FrameReader()
        self._waiting: dict[int, asyncio.Future[ch.Frame]] = {}
        self._last_id = 0
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._outcomes: list[ch.Outcome] = []
        self._out: list[bytes] = []  # frames of this turn of the loop, written together at its end

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            for frame in self._reader.feed(data):
                if frame.kind == ch.SETTINGS:
                    self.settings.set_result(AdvisorSettings.model_validate_json(frame.payload))
                    continue
                waiter = self._waiting.pop(frame.request_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(frame)
        except ch.ChannelError as e:
            log.error("ingest worker: the channel to the advisor is corrupt (%s); stopping", e)
            assert self.transport is not None
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(OwnerGoneError())
        self._waiting.clear()
        if not self.settings.done():
            self.settings.set_exception(OwnerGoneError())
        if not self.closed.done():
            self.closed.set_result(None)

    def _alive(self) -> asyncio.Transport:
        if self.transport is None or self.transport.is_closing():
            raise OwnerGoneError()
        return self.transport

    async def ask(self, kind: int, payload: bytes) -> ch.Frame:
        """Send a request frame and wait for the owner's answer to it."""
        async with self._slots:
            transport = self._alive()
            self._last_id = self._last_id % 0xFFFFFFFF + 1
            request_id = self._last_id
            waiter: asyncio.Future[ch.Frame] = asyncio.get_running_loop().create_future()
            self._waiting[request_id] = waiter
            if not self._out:
                asyncio.get_running_loop().call_soon(self._send_out, transport)
            self._out.append(ch.encode(kind, request_id, payload))
            try:
                return await waiter
            finally:
                self._waiting.pop(request_id, None)

    def _send_out(self, transport: asyncio.Transport) -> None:
        """One write for every frame asked this turn (under load, several connections' snapshots): the owner then
        reads, applies and acks them in one go, instead of waking up for each."""
        frames, self._out = self._out, []
        if not transport.is_closing():
            transport.write(self._pending_outcomes() + b"".join(frames))

    def report(self, outcome: ch.Outcome) -> None:
        """Count an answered ingest request in the owner's metrics: sent with the next frame, or shortly."""
        if not self._outcomes:
            asyncio.get_running_loop().call_later(OUTCOMES_DELAY_SECONDS, self._flush)
        self._outcomes.append(outcome)

    def _pending_outcomes(self) -> bytes:
        if not self._outcomes:
            return b""
        frame = ch.encode(ch.OUTCOME_FRAME, 0, ch.encode_outcomes(self._outcomes))
        self._outcomes = []
        return frame

    def _flush(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self._pending_outcomes())

    def ready(self) -> None:
        self._alive().write(ch.encode(ch.READY, 0, b""))


async def _read_body(receive: Any, limit_bytes: int) -> bytes | None:
    """The request's body, or its first `limit_bytes + 1` bytes when longer; None when the client went away."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > limit_bytes or not message.get("more_body", False):
            return bytes(body)


class WorkerApp:
    """The ASGI app of a worker: snapshots checked here and applied by the owner, every other request forwarded."""

    def __init__(self, link: OwnerLink, settings: AdvisorSettings) -> None:
        self.link = link
        self.settings = settings

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "POST" and scope["path"] == checks.PATH:
            await self._ingest(scope, receive, send)
        else:
            await self._forward(scope, receive, send)

    async def _ingest(self, scope: Any, receive: Any, send: Any) -> None:
        start = time.perf_counter()
        body = await _read_body(receive, checks.MAX_BODY_BYTES)
        if body is None:
            return
        if len(body) > checks.MAX_BODY_BYTES:
            code, (headers, raw) = 413, checks.answer(413, checks.TOO_LARGE)
        else:
            authorization = None
            for name, value in scope["headers"]:
                if name == b"authorization":
                    authorization = value.decode("latin-1")
            refused = checks.token_refusal(self.settings, authorization)
            if refused is not None:
                code, (headers, raw) = refused.status_code, checks.answer(refused.status_code, refused.payload)
            else:
                # Validated by the owner, which parses the snapshot to apply it: a parse here would be a second one.
                try:
                    ack = await self.link.ask(ch.SNAPSHOT, body)
                except OwnerGoneError:
                    await _gone(send)
                    return
                (code,) = ch.ACK_STATUS.unpack_from(ack.payload)
                raw = ack.payload[ch.ACK_STATUS.size :]
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
        await send({"type": "http.response.start", "status": code, "headers": headers})
        await send({"type": "http.response.body", "body": raw})
        self.link.report((code, time.perf_counter() - start))

    async def _forward(self, scope: Any, receive: Any, send: Any) -> None:
        # The owner's own body limits answer an oversized body (413): it gets one byte more than the largest.
        limit = max(self.settings.scheduler_body_limit_bytes, checks.MAX_BODY_BYTES)
        body = await _read_body(receive, limit)
        if body is None:
            return
        request = ch.ForwardedRequest(
            method=scope["method"],
            scheme=scope["scheme"],
            http_version=scope["http_version"],
            path=scope["path"],
            raw_path=scope["raw_path"],
            query_string=scope["query_string"],
            root_path=scope["root_path"],
            headers=list(scope["headers"]),
            client=scope["client"],
            server=scope["server"],
            body=body,
        )
        try:
            answer = ch.load_response((await self.link.ask(ch.REQUEST, ch.dump(request))).payload)
        except OwnerGoneError:
            await _gone(send)
            return
        await send({"type": "http.response.start", "status": answer.status, "headers": answer.headers})
        await send({"type": "http.response.body", "body": answer.body})


async def _gone(send: Any) -> None:
    """503 and close: the owner is gone, so this connection is of no use; the client reconnects (to the owner)."""
    headers, raw = checks.answer(503, GONE)
    await send({"type": "http.response.start", "status": 503, "headers": [(b"connection", b"close"), *headers]})
    await send({"type": "http.response.body", "body": raw})


def _refused_once() -> Callable[[str], None]:
    """A worker has no metrics of its own (the owner serves /metrics): each reason a connection was closed early
    for is logged once per worker, then only counted here."""
    seen: Counter[str] = Counter()

    def refused(reason: str) -> None:
        if not seen[reason]:
            log.warning(
                "ingest worker %d: closed a connection early (%s); later ones are not logged", os.getpid(), reason
            )
        seen[reason] += 1

    return refused


async def serve(data: socket.socket, handoffs: socket.socket) -> None:
    """Serve handed-off connections until the owner closes the channel."""
    loop = asyncio.get_running_loop()
    _, link = await loop.create_unix_connection(OwnerLink, sock=data)
    try:
        settings = await link.settings
    except OwnerGoneError:
        return
    config = Config(
        WorkerApp(link, settings),
        http="httptools",
        ws="none",
        lifespan="off",
        access_log=False,
        log_level="warning",
        log_config=None,  # the format of `configure_logging`
        timeout_keep_alive=ADVISOR_KEEP_ALIVE_SECONDS,
    )
    config.load()
    state = ServerState()
    opening: set[asyncio.Task[Any]] = set()

    def tick() -> None:  # uvicorn's server refreshes its Date header once a second; a worker has no server
        state.default_headers = [(b"date", formatdate(usegmt=True).encode()), *config.encoded_headers]
        loop.call_later(1.0, tick)

    # The serving process's deadlines and connection cap hold here too: a handed-off connection whose client goes
    # slow is closed as it would be there (`advisor.api.transport.guard`).
    guarded = guarded_protocol(connection_limits(settings), _refused_once())

    def protocol() -> HttpToolsProtocol:
        made: HttpToolsProtocol = guarded(config, state, {}, loop)
        return made

    def take() -> None:
        try:
            _, fds, _, _ = socket.recv_fds(handoffs, 16, 16)
        except BlockingIOError:
            return
        except OSError:
            fds = []
        if not fds:  # the owner closed its end
            loop.remove_reader(handoffs.fileno())
            return
        for fd in fds:
            conn = socket.socket(fileno=fd)
            conn.setblocking(False)
            task = loop.create_task(loop.connect_accepted_socket(protocol, conn))
            opening.add(task)
            task.add_done_callback(opening.discard)

    tick()
    loop.add_reader(handoffs.fileno(), take)
    link.ready()
    gc.freeze()  # imports and settings live as long as the process
    await link.closed
    for connection in list(state.connections):
        connection.shutdown()  # idle ones close now; busy ones after their answer (a 503: the owner is gone)
    deadline = time.monotonic() + STOP_SECONDS
    while state.tasks and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


def main(argv: list[str]) -> None:
    configure_logging(logging.WARNING)
    # Ctrl-C reaches the whole process group; the owner decides when its workers stop (it closes the channel).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    data = socket.socket(fileno=int(argv[0]))
    handoffs = socket.socket(fileno=int(argv[1]))
    data.setblocking(False)
    handoffs.setblocking(False)
    asyncio.run(serve(data, handoffs))


if __name__ == "__main__":
    main(sys.argv[1:])
