"""What one client may cost the advisor: memory per request, time per request, connections.

Anyone who can reach the advisor's port can send it bodies, and parsing a scheduler body takes many times its size
in memory (issue 40 measured about 14x on `/extender/prioritize`: 100 concurrent 20 MB bodies took 21.8 GB and the
kernel killed the process). So the bound is built in, not hoped for:

* `MemoryBudget`: every request body reserves `PARSE_EXPANSION` times its size from one budget before it is read
  (its declared Content-Length, else chunk by chunk as it arrives) and gives it back when the answer is sent. A body
  that does not fit is answered 503 with `Retry-After` and the connection closed, unread. Large bodies may take at
  most `LARGE_SHARE` of the budget, so a flood of them never starves the small ones (kube-scheduler with
  `nodeCacheCapable`, `/v1/score`, `/v1/allocate`).
* `guarded_protocol`: uvicorn's HTTP protocol with what it lacks: a deadline for the request head (a client that
  sends nothing, or its headers a byte at a time, is closed), a cap on its size, a deadline for the body, and a cap
  on open connections (one past it is answered 503 and closed at once, without a log line per connection).

The figures behind the defaults are in docs/operations.md ("Limits") and bench/hostile_bodies.py.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections.abc import Callable
from dataclasses import dataclass

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from advisor.settings import LARGE_SHARE, PARSE_EXPANSION, AdvisorSettings

log = logging.getLogger(__name__)

LARGE_BODY_BYTES = 1024 * 1024
"""A body above this is large: only kube-scheduler without `nodeCacheCapable` and Volcano send such (a 5,000-node
`NodeNames` request is 66 KB, docs/operations.md)."""
RETRY_AFTER_SECONDS = 1
FD_RESERVE = 64
"""Descriptors kept for what is not a client connection (the store, the ingest workers' channels, log files)."""


class MemoryBudget:
    """Bytes of parse memory the request bodies in flight may hold together. Each request's reservation is the body
    size it was granted (0 before its first); used from the event loop only."""

    def __init__(self, budget_bytes: int, *, large_share: float = LARGE_SHARE) -> None:
        self.budget_bytes = budget_bytes
        self.large_budget_bytes = int(budget_bytes * large_share)
        self.held_bytes = 0
        self.large_held_bytes = 0

    @staticmethod
    def _cost(body_bytes: int) -> tuple[int, int]:
        """(bytes of the budget, bytes of its large share) a body of `body_bytes` holds."""
        need = body_bytes * PARSE_EXPANSION
        return need, need if body_bytes > LARGE_BODY_BYTES else 0

    def grow(self, granted_bytes: int, body_bytes: int) -> bool:
        """Let a request granted `granted_bytes` of body hold `body_bytes`; False (nothing changed) when that does
        not fit now."""
        total, large = self._cost(body_bytes)
        had_total, had_large = self._cost(granted_bytes)
        if self.held_bytes - had_total + total > self.budget_bytes:
            return False
        if large and self.large_held_bytes - had_large + large > self.large_budget_bytes:
            return False
        self.held_bytes += total - had_total
        self.large_held_bytes += large - had_large
        return True

    def release(self, granted_bytes: int) -> None:
        total, large = self._cost(granted_bytes)
        self.held_bytes -= total
        self.large_held_bytes -= large


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Per-connection deadlines and the cap on open connections (`advisor serve`; docs/operations.md)."""

    header_timeout_seconds: float
    body_timeout_seconds: float
    max_connections: int
    max_header_bytes: int = 64 * 1024


def connection_cap(wanted: int, soft_limit: int | None = None) -> int:
    """`wanted`, lowered to what this process's descriptor limit allows: the cap must bite before `accept` fails."""
    if soft_limit is None:
        soft_limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft_limit == resource.RLIM_INFINITY or soft_limit <= 0:
        return wanted
    return max(1, min(wanted, soft_limit - FD_RESERVE))


def connection_limits(settings: AdvisorSettings) -> ConnectionLimits:
    """The per-connection deadlines and the connection cap (lowered to the descriptor limit) of the settings, for
    the serving process and its ingest workers alike."""
    return ConnectionLimits(
        header_timeout_seconds=settings.header_timeout_seconds,
        body_timeout_seconds=settings.body_timeout_seconds,
        max_connections=connection_cap(settings.max_connections),
    )


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


def guarded_protocol(
    limits: ConnectionLimits, refused: Refused, base: type[HttpToolsProtocol] = HttpToolsProtocol
) -> type[HttpToolsProtocol]:
    """`base` (uvicorn's httptools protocol or a subclass) with the deadlines and caps of `limits`.

    The head deadline runs from the connection's start (or the first byte of a next request) to the end of its
    headers; the body deadline from there to the end of the body. uvicorn's own keep-alive timeout covers the idle
    time between requests. A connection closed for any of these reasons is reported to `refused`, not logged."""

    class GuardedProtocol(base):  # type: ignore[valid-type, misc]
        _deadline: asyncio.TimerHandle | None = None
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
            if self._deadline is None:  # a next request on a kept-alive connection: its head's deadline starts now
                self._arm(limits.header_timeout_seconds, "header_timeout")

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._head_bytes = 0
            super().on_headers_complete()
            self._arm(limits.body_timeout_seconds, "body_timeout")

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

        def _arm(self, seconds: float, reason: str) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._expired, reason)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self, reason: str) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            refused(reason)
            if self.cycle is None or not self.cycle.response_started:
                self.transport.write(_SLOW)
            self.transport.close()

    return GuardedProtocol
