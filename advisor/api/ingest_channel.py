"""The frames between the advisor's state-owning process and its ingest workers (docs/design.md §5.1).

An ingest worker serves collectors' keep-alive connections that the owner handed it (advisor/api/transport/steering.py).
It checks each push's token and size itself and sends the owner the body, one frame per snapshot, over a Unix stream
socket; the owner validates and applies them in arrival order and answers each with an ack frame. A request on such a
connection that is not a snapshot is forwarded whole and answered by the owner's app. Both ends are this package's own
processes, so a forwarded request and its answer travel as pickles.

A frame is a header (kind, request id, payload length) and the payload. Writes are plain transport writes, so the
frames of many requests leave and arrive together, in one read each, when they are many.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

HEADER = struct.Struct("<BII")  # kind, request id, payload bytes
OUTCOME = struct.Struct("<Hd")  # HTTP status, seconds to answer
ACK_STATUS = struct.Struct("<H")  # HTTP status (then the JSON answer)

# worker → owner
SNAPSHOT = 1
"""A pushed snapshot's body (its token checked), to validate and apply; answered by ACK."""
OUTCOME_FRAME = 2
"""Ingest requests the worker answered (`encode_outcomes`): each one's status and duration, for the owner's request
metrics (the owner counts each snapshot's result itself, as it validates and applies it)."""
REQUEST = 3
"""Any other request on a handed-off connection (`ForwardedRequest`); answered by RESPONSE."""
READY = 7
"""The worker serves: connections may be handed to it."""
# owner → worker
SETTINGS = 4
"""The service's settings (JSON), the first frame a worker receives."""
ACK = 5
"""A snapshot applied: the status and JSON answer to give the collector."""
RESPONSE = 6
"""The owner's answer to a REQUEST (`ForwardedResponse`)."""

# Far above any snapshot (4 MiB) or forwarded body the owner would take (the scheduler routes' limit, 64 MiB by
# default): a length beyond it means the stream is corrupt, and the channel is closed.
MAX_PAYLOAD_BYTES = 1 << 30


class ChannelError(Exception):
    """The other end sent something that is not a frame: the channel cannot be trusted any more."""


@dataclass(frozen=True, slots=True)
class Frame:
    kind: int
    request_id: int
    payload: bytes


def encode(kind: int, request_id: int, payload: bytes) -> bytes:
    return HEADER.pack(kind, request_id, len(payload)) + payload


Outcome = tuple[int, float]
"""An answered ingest request: HTTP status, seconds to answer."""


def encode_outcomes(outcomes: list[Outcome]) -> bytes:
    return b"".join(OUTCOME.pack(code, seconds) for code, seconds in outcomes)


def decode_outcomes(payload: bytes) -> Iterator[Outcome]:
    return ((code, seconds) for code, seconds in OUTCOME.iter_unpack(payload))


@dataclass(slots=True)
class FrameReader:
    """Splits a byte stream into frames; feed it what the socket gave, take the complete frames."""

    _buffer: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> Iterator[Frame]:
        self._buffer += data
        view = self._buffer
        start = 0
        while len(view) - start >= HEADER.size:
            kind, request_id, size = HEADER.unpack_from(view, start)
            if size > MAX_PAYLOAD_BYTES:
                raise ChannelError(f"a frame of {size} bytes")
            end = start + HEADER.size + size
            if len(view) < end:
                break
            yield Frame(kind, request_id, bytes(view[start + HEADER.size : end]))
            start = end
        del self._buffer[:start]


@dataclass(frozen=True, slots=True)
class ForwardedRequest:
    """What the owner needs to run a request through its app as if it had arrived there (an ASGI HTTP scope's
    fields and the whole body)."""

    method: str
    scheme: str
    http_version: str
    path: str
    raw_path: bytes
    query_string: bytes
    root_path: str
    headers: list[tuple[bytes, bytes]]
    client: tuple[str, int] | None
    server: tuple[str, int | None] | None
    body: bytes

    def scope(self) -> dict[str, Any]:
        return {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": self.http_version,
            "method": self.method,
            "scheme": self.scheme,
            "path": self.path,
            "raw_path": self.raw_path,
            "query_string": self.query_string,
            "root_path": self.root_path,
            "headers": self.headers,
            "client": self.client,
            "server": self.server,
            "state": {},
        }


@dataclass(frozen=True, slots=True)
class ForwardedResponse:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


def dump(value: ForwardedRequest | ForwardedResponse) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def load_request(payload: bytes) -> ForwardedRequest:
    value = pickle.loads(payload)
    if not isinstance(value, ForwardedRequest):
        raise ChannelError(f"a REQUEST frame holding {type(value).__name__}")
    return value


def load_response(payload: bytes) -> ForwardedResponse:
    value = pickle.loads(payload)
    if not isinstance(value, ForwardedResponse):
        raise ChannelError(f"a RESPONSE frame holding {type(value).__name__}")
    return value
