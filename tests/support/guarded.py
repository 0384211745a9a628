"""A uvicorn server on loopback with the advisor's guarded HTTP protocol (`advisor.api.transport.guard`), in a
thread: what the transport and limits tests talk to over real sockets."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from advisor.api.limits import ConnectionLimits
from advisor.api.transport.guard import guarded_protocol

START_SECONDS = 10.0


async def ok_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Reads a request's whole body and answers 200 `ok`."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body", False):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@contextmanager
def guarded_server(
    app: ASGIApp,
    limits: ConnectionLimits,
    refused: Callable[[str], None] = lambda reason: None,
    *,
    loop: asyncio.AbstractEventLoop | None = None,
) -> Iterator[int]:
    """`app` served on a free loopback port through `guarded_protocol(limits, refused)` (keep-alive 5 s), on `loop`
    when given (else uvicorn's own); its port once it has started, stopped on leaving."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="off",
        interface="asgi3",
        timeout_keep_alive=5,
        http=guarded_protocol(limits, refused, HttpToolsProtocol),
    )
    server = uvicorn.Server(config)
    if loop is None:
        thread = threading.Thread(target=server.run, daemon=True)
    else:
        thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(),), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_SECONDS
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.started, "the guarded server did not start"
        yield port
    finally:
        server.should_exit = True
        thread.join(5)
