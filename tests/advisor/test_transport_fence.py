"""What advisor/api/transport takes from uvicorn beyond its public Config and Server is still there: the first test
to fail when pyproject.toml's upper bound on uvicorn is raised past a release that moved it (the behaviour itself is
tested in test_api_limits.py and test_ingest_workers.py)."""

from __future__ import annotations

import asyncio
import inspect

from uvicorn import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from advisor.api.limits import ConnectionLimits
from advisor.api.transport.guard import guarded_protocol

# The parser and connection callbacks the fence overrides, each calling uvicorn's own.
OVERRIDDEN = (
    "connection_made",
    "connection_lost",
    "data_received",
    "on_message_begin",
    "on_headers_complete",
    "on_message_complete",
    "on_response_complete",
    "shutdown",
)


async def _app(scope: object, receive: object, send: object) -> None:
    raise AssertionError("never called")


def test_the_protocol_the_fence_builds_on_has_what_it_uses() -> None:
    for name in OVERRIDDEN:
        assert inspect.isfunction(getattr(HttpToolsProtocol, name, None)), name
    config = Config(_app, http="httptools", lifespan="off", log_config=None)
    config.load()
    state = ServerState()
    assert (state.connections, state.tasks) == (set(), set())
    assert isinstance(config.encoded_headers, list)
    loop = asyncio.new_event_loop()
    try:
        protocol = HttpToolsProtocol(config, state, {}, loop)
        for attribute in ("connections", "cycle", "loop", "server_state", "pipeline"):
            assert hasattr(protocol, attribute), attribute
        assert protocol.connections is state.connections
        limits = ConnectionLimits(header_timeout_seconds=1.0, body_timeout_seconds=1.0, max_connections=1)
        guarded = guarded_protocol(limits, lambda reason: None)(config, state, {}, loop)
        assert isinstance(guarded, HttpToolsProtocol)
    finally:
        loop.close()
