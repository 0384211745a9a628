"""The guarded protocol writes an answer of known length in one piece (advisor/api/transport/guard.py `_WholeAnswer`):
the head waits for the body, so a scheduler's call costs one `send()`; streamed answers and HEAD requests keep
uvicorn's behaviour. Served by a real uvicorn server on loopback, read by a plain socket."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from advisor.api.limits import ConnectionLimits
from advisor.api.transport.guard import guarded_protocol

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
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(
        steps.app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="off",
        interface="asgi3",
        timeout_keep_alive=5,
        http=guarded_protocol(limits, lambda reason: None, HttpToolsProtocol),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_SECONDS
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    yield port, steps
    steps.go.set()
    server.should_exit = True
    thread.join(5)


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
