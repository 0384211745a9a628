"""`guarded_protocol`: uvicorn's HTTP protocol with what it lacks (`advisor.api.limits.ConnectionLimits`): a deadline
for the request head, a cap on its size, a deadline for the body, and a cap on open connections.

These are decided before a request reaches any ASGI app — a client that sends nothing, or its headers a byte at a
time, never becomes a request — so they cannot be an ASGI middleware; they live on the connection, in this fence.

It also writes an answer of known length in one piece (`_WholeAnswer`): uvicorn writes the head when the app sends
`http.response.start` and the body at `http.response.body`, two `send()` calls and two TCP segments on a connection
without Nagle, for every scheduler call; on loopback each send also runs the receiver's side of TCP on the
advisor's CPU (docs/benchmarks.md, "Eighth round: the advisor's HTTP cost per plugin call").
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from advisor.api.limits import RETRY_AFTER_SECONDS, ConnectionLimits

Refused = Callable[[str], None]
"""Told why a connection was closed early: `connections` (over the cap), `header_timeout`, `header_too_large`,
`body_timeout`."""


def _answer(status_line: bytes, detail: str, *extra: bytes) -> bytes:
    """A whole HTTP/1.1 response that closes the connection, for answers given below the app."""
    body = b'{"detail":"' + detail.encode() + b'"}'
    head = [status_line, b"content-type: application/json", b"connection: close", *extra]
    head.append(b"content-length: " + str(len(body)).encode())
    return b"\r\n".join(head) + b"\r\n\r\n" + body


_BUSY = _answer(
    b"HTTP/1.1 503 Service Unavailable",
    "too many open connections to this advisor; retry later",
    b"retry-after: %d" % RETRY_AFTER_SECONDS,
)
_SLOW = _answer(b"HTTP/1.1 408 Request Timeout", "the request was not received in time")
_HEAD_TOO_LARGE = _answer(b"HTTP/1.1 431 Request Header Fields Too Large", "the request line and headers are too large")


def _drop_read_callback(transport: object) -> None:
    """Let reference counting free a closed connection's transport and socket. asyncio's selector transport (CPython
    3.11) keeps its read callback, a bound method of itself, after the connection is lost: a reference cycle, which
    only a cyclic collection frees. A transport that was open when the cluster state called `gc.freeze()` (every few
    hundred rebuilt nodes) is frozen, and frozen cycles are freed only by a full collection of everything, a stall of
    the event loop (~0.4 s at 10,000 nodes): this cycle was the serving path's only frozen garbage (bench/
    frozen_garbage.py). The callback is never called once the connection is lost (the reader was removed at close)."""
    if getattr(transport, "_read_ready_cb", None) is not None:
        transport._read_ready_cb = None  # type: ignore[attr-defined]


class _WholeAnswer:
    """A request's transport as its response cycle sees it: the head of a response with a Content-Length (and a
    body to come) is held and written with the first body bytes, in one `write`; every other write goes straight
    through, as does everything else asked of the transport. A chunked (streamed) response's head is not held, nor
    a HEAD request's (no body follows). The cycle is held by a weak reference: a cycle and its transport in a
    reference cycle would wait for a cyclic collection (see `_drop_read_callback`)."""

    __slots__ = ("_cycle", "_head", "_headed", "_transport")

    def __init__(self, transport: asyncio.Transport, cycle: RequestResponseCycle) -> None:
        self._transport = transport
        self._cycle = weakref.ref(cycle)
        self._head: bytes | None = None
        self._headed = False  # the head has been written or held

    def write(self, data: bytes) -> None:
        head = self._head
        if head is not None:  # the body's first bytes: the head goes with them
            self._head = None
            self._transport.write(head + data)
            return
        if not self._headed:
            cycle = self._cycle()
            if cycle is not None and cycle.response_started:  # uvicorn writes the head as the response starts
                self._headed = True
                # A chunked answer's expected length is 0: its head goes now. A HEAD request's body is never written.
                if cycle.expected_content_length > 0 and cycle.scope["method"] != "HEAD":
                    self._head = data
                    return
        self._transport.write(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)


def guarded_protocol(
    limits: ConnectionLimits, refused: Refused, base: type[HttpToolsProtocol] = HttpToolsProtocol
) -> type[HttpToolsProtocol]:
    """`base` (uvicorn's httptools protocol or a subclass) with the deadlines and caps of `limits`.

    The head deadline runs from the connection's start (or the first byte of a next request) to the end of its
    headers; the body deadline from there to the end of the body. uvicorn's own keep-alive timeout covers the idle
    time between requests. A connection closed for any of these reasons is reported to `refused`, not logged.

    A deadline is a time, not a timer of its own: one timer per connection fires at or before the deadline that runs
    and is re-armed there when that deadline has moved on, so a kept-alive connection's requests (a head deadline, a
    body deadline, each ended within milliseconds) schedule and cancel no timer of their own."""

    class GuardedProtocol(base):  # type: ignore[valid-type, misc]
        _deadline_at: float | None = None  # the loop time the running deadline passes at (None: none runs)
        _reason = ""  # what the running deadline is for (`Refused`)
        _timer: asyncio.TimerHandle | None = None  # fires at or before `_deadline_at`; outlives an ended deadline
        _head_bytes = 0
        _in_head = True

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                refused("connections")
                transport.write(_BUSY)
                transport.close()
                return
            self._arm(limits.header_timeout_seconds, "header_timeout")

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            super().connection_lost(exc)
            _drop_read_callback(self.transport)

        def data_received(self, data: bytes) -> None:
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)
            # Judged after the parser has seen the bytes: a read holding a whole head and the start of its body is
            # past the head by then. A head still open is at most one read (256 KiB) past the cap.
            if self._in_head and self._head_bytes > limits.max_header_bytes and not self.transport.is_closing():
                refused("header_too_large")
                self._disarm()
                self.transport.write(_HEAD_TOO_LARGE)
                self.transport.close()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_head = True
            if self._deadline_at is None:  # a next request on a kept-alive connection: its head's deadline starts now
                self._arm(limits.header_timeout_seconds, "header_timeout")

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._head_bytes = 0
            before = self.cycle
            super().on_headers_complete()
            cycle = self.cycle
            if cycle is not None and cycle is not before:  # this request's cycle (an upgrade makes none)
                cycle.transport = _WholeAnswer(self.transport, cycle)
            self._arm(limits.body_timeout_seconds, "body_timeout")

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

        def _arm(self, seconds: float, reason: str) -> None:
            at = self.loop.time() + seconds
            self._deadline_at, self._reason = at, reason
            timer = self._timer
            if timer is None or timer.when() > at:
                if timer is not None:
                    timer.cancel()
                self._timer = self.loop.call_at(at, self._check)

        def _disarm(self) -> None:
            self._deadline_at = None

        def _check(self) -> None:
            self._timer = None
            at = self._deadline_at
            if at is None:
                return
            if self.loop.time() < at:  # the deadline moved on since the timer was set
                self._timer = self.loop.call_at(at, self._check)
                return
            self._deadline_at = None
            self._expired(self._reason)

        def _expired(self, reason: str) -> None:
            if self.transport.is_closing():
                return
            refused(reason)
            if self.cycle is None or not self.cycle.response_started:
                self.transport.write(_SLOW)
            self.transport.close()

    return GuardedProtocol
