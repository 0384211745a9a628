"""What the guarded protocol (advisor/api/transport/guard.py) saves a kept-alive scheduler connection per request: an
answer of known length is written in one piece (`_WholeAnswer`: the head waits for the body; streamed answers and HEAD
requests keep uvicorn's behaviour), and the head and body deadlines schedule no timer per request (one timer per
connection, re-armed where a deadline moved on). Served by a real uvicorn server on loopback, read by a plain socket."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.types import Receive, Scope, Send

from advisor.api.limits import ConnectionLimits
from tests.support.guarded import guarded_server, ok_app

WAIT_SECONDS = 10.0


class Steps:
    """Lets a test see that the app has sent its head, and tell it when to send its body."""

    def __init__(self) -> None:
        self.head_sent = threading.Event()
        self.go = threading.Event()

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body", False):
            pass
        path = scope["path"]
        headers = [] if path == "/stream" else [(b"content-length", b"10")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        self.head_sent.set()
        deadline = time.monotonic() + WAIT_SECONDS
        while not self.go.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        await send({"type": "http.response.body", "body": b"hello", "more_body": True})
        await send({"type": "http.response.body", "body": b"world"})


@pytest.fixture
def served() -> Iterator[tuple[int, Steps]]:
    steps = Steps()
    limits = ConnectionLimits(header_timeout_seconds=5.0, body_timeout_seconds=5.0, max_connections=3)
    with guarded_server(steps.app, limits) as port:
        yield port, steps
        steps.go.set()


def _request(client: socket.socket, method: str, path: str) -> None:
    client.sendall(f"{method} {path} HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{{}}".encode())


def _arrived_before_the_body(client: socket.socket, steps: Steps) -> bytes:
    """What the client received after the app sent its head and before it sent any body (b"": nothing)."""
    assert steps.head_sent.wait(WAIT_SECONDS)
    client.settimeout(0.2)
    try:
        return client.recv(65536)
    except TimeoutError:
        return b""
    finally:
        client.settimeout(WAIT_SECONDS)


def _read_until(client: socket.socket, received: bytes, end: bytes) -> bytes:
    while not received.endswith(end):
        chunk = client.recv(65536)
        assert chunk, received
        received += chunk
    return received


def test_an_answer_of_known_length_is_written_with_its_head_in_one_piece(served: tuple[int, Steps]) -> None:
    port, steps = served
    with socket.create_connection(("127.0.0.1", port)) as client:
        _request(client, "POST", "/v1/score")
        assert _arrived_before_the_body(client, steps) == b""  # the head waits for the body
        steps.go.set()
        answer = _read_until(client, b"", b"helloworld")
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"content-length: 10\r\n" in answer
        # The connection is kept and serves the next request the same way.
        steps.head_sent.clear()
        _request(client, "POST", "/v1/score")
        assert steps.head_sent.wait(WAIT_SECONDS)
        assert _read_until(client, b"", b"helloworld").startswith(b"HTTP/1.1 200 OK\r\n")


def test_a_streamed_answers_head_is_sent_at_once(served: tuple[int, Steps]) -> None:
    port, steps = served
    with socket.create_connection(("127.0.0.1", port)) as client:
        _request(client, "POST", "/stream")
        assert steps.head_sent.wait(WAIT_SECONDS)
        client.settimeout(WAIT_SECONDS / 4)  # the head was written before `head_sent`: it is there, not held
        head = _read_until(client, b"", b"\r\n\r\n")
        client.settimeout(WAIT_SECONDS)
        assert b"transfer-encoding: chunked" in head
        steps.go.set()
        _read_until(client, head, b"0\r\n\r\n")


def test_a_head_request_gets_its_head(served: tuple[int, Steps]) -> None:
    port, steps = served
    steps.go.set()
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.settimeout(WAIT_SECONDS)
        _request(client, "HEAD", "/v1/score")
        head = _read_until(client, b"", b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"content-length: 10\r\n" in head


class CountingLoop(asyncio.SelectorEventLoop):
    """An event loop that counts the timers scheduled on it."""

    scheduled = 0

    def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> asyncio.TimerHandle:
        self.scheduled += 1
        return super().call_at(when, callback, *args, context=context)


def test_a_kept_alive_connections_requests_schedule_no_deadline_timers_of_their_own() -> None:
    # The head and body deadlines are times checked by one timer per connection; uvicorn's keep-alive timer is the
    # only one a request schedules.
    limits = ConnectionLimits(header_timeout_seconds=5.0, body_timeout_seconds=5.0, max_connections=3)
    loop = CountingLoop()
    try:
        with guarded_server(ok_app, limits, loop=loop) as port, socket.create_connection(("127.0.0.1", port)) as client:
            requests = 30
            client.settimeout(WAIT_SECONDS)
            _request(client, "POST", "/v1/score")
            _read_until(client, b"", b"ok")
            before = loop.scheduled
            for _ in range(requests):
                _request(client, "POST", "/v1/score")
                _read_until(client, b"", b"ok")
            scheduled = loop.scheduled - before
        assert requests <= scheduled <= requests + 2  # the keep-alive timer of each, and the deadline's timer re-armed
    finally:
        loop.close()


def test_a_body_within_its_deadline_is_served_when_the_head_deadline_passes_meanwhile() -> None:
    # The connection's one timer was set for the head deadline (1 s); the body deadline (3 s from the headers) moved
    # it on: the timer firing at 1 s must re-arm, not close a connection whose body is still in time.
    limits = ConnectionLimits(header_timeout_seconds=1.0, body_timeout_seconds=3.0, max_connections=3)
    refusals: list[str] = []
    with (
        guarded_server(ok_app, limits, refusals.append) as port,
        socket.create_connection(("127.0.0.1", port)) as client,
    ):
        client.settimeout(WAIT_SECONDS)
        client.sendall(b"POST /v1/score HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{")
        time.sleep(1.6)  # past the head deadline's time, well within the body's
        client.sendall(b"}")
        assert _read_until(client, b"", b"ok").startswith(b"HTTP/1.1 200 OK\r\n")
    assert refusals == []
