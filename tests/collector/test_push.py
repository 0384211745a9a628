"""Snapshot push: every advisor replica gets each snapshot with the bearer token; a down advisor never blocks."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from collector.push import SnapshotPusher, push_targets
from collector.snapshot import GpuSnapshot, NodeSnapshot
from collector.stats import CollectorStats
from tests.support.net import free_port, wait_until

SNAPSHOT = NodeSnapshot(
    node="n1", timestamp=datetime(2026, 11, 21, tzinfo=UTC), gpus=(GpuSnapshot(index=0, uuid="GPU-0"),)
)


class _Advisor(ThreadingHTTPServer):
    """A stand-in advisor replica recording what it received."""

    def __init__(self, address: str, port: int, status: int = 202) -> None:
        self.received: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.status = status
        advisor = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                advisor.received.append((self.path, dict(self.headers), body))
                self.send_response(advisor.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        super().__init__((address, port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.fixture
def replicas() -> Iterator[tuple[int, list[_Advisor]]]:
    port = free_port()
    servers = [_Advisor("127.0.0.1", port), _Advisor("127.0.0.2", port)]
    yield port, servers
    for server in servers:
        server.shutdown()
        server.server_close()


def test_targets_every_resolved_address() -> None:
    targets = push_targets("http://advisor.gpuadvisor.svc:8080/", lambda host, port: ["10.0.0.1", "fd00::2"])
    assert [t.url for t in targets] == ["http://10.0.0.1:8080/v1/telemetry", "http://[fd00::2]:8080/v1/telemetry"]
    assert {t.host_header for t in targets} == {"advisor.gpuadvisor.svc:8080"}
    assert [t.url for t in push_targets("http://127.0.0.1:9/base")] == ["http://127.0.0.1:9/base/v1/telemetry"]


def test_rejects_bad_url() -> None:
    with pytest.raises(ValueError, match="advisor_url"):
        SnapshotPusher("ftp://advisor", stats=CollectorStats())


def test_each_replica_receives_the_snapshot_with_token(replicas: tuple[int, list[_Advisor]]) -> None:
    port, servers = replicas
    stats = CollectorStats()
    pusher = SnapshotPusher(
        f"http://advisor.test:{port}", stats=stats, token="s3cret", resolve=lambda host, p: ["127.0.0.1", "127.0.0.2"]
    )
    pusher.start()
    try:
        pusher.submit(SNAPSHOT)
        assert wait_until(lambda: all(s.received for s in servers), timeout_s=10)
    finally:
        pusher.stop()
    for server in servers:
        ((path, headers, body),) = server.received
        assert path == "/v1/telemetry"
        assert headers["Authorization"] == "Bearer s3cret"
        assert headers["Host"] == f"advisor.test:{port}"
        assert NodeSnapshot.model_validate(body) == SNAPSHOT
    assert stats.view().errors == {}


def test_rejections_and_unreachable_replicas_are_counted(replicas: tuple[int, list[_Advisor]]) -> None:
    port, servers = replicas
    servers[0].status = 401
    stats = CollectorStats()
    pusher = SnapshotPusher(
        f"http://advisor.test:{port}",
        stats=stats,
        timeout_seconds=1,
        resolve=lambda host, p: ["127.0.0.1", "127.0.0.2", "127.0.0.3"],
    )
    try:
        assert pusher.send(SNAPSHOT) == 1
    finally:
        pusher.stop()
    assert stats.view().errors == {"push": 2}


def test_a_hung_advisor_never_blocks_submit() -> None:
    """The replica accepts connections but never answers: submit stays instant, extra snapshots are dropped."""
    port = free_port()
    gate = threading.Event()

    class Hung(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            gate.wait()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", port), Hung)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stats = CollectorStats()
    pusher = SnapshotPusher(f"http://127.0.0.1:{port}", stats=stats, timeout_seconds=0.5, queue_size=2)
    pusher.start()
    try:
        for _ in range(20):  # would hang (pytest-timeout) if submit waited for the advisor
            pusher.submit(SNAPSHOT)
        # every snapshot is either dropped from the full queue or times out: all 20 counted
        assert wait_until(lambda: stats.view().errors.get("push", 0) == 20, timeout_s=10)
    finally:
        gate.set()
        pusher.stop()
        server.shutdown()
        server.server_close()


class _DroppingAdvisor:
    """Answers the first request of each connection and keeps it open, then closes it on the next request without
    answering: what a server does when its keep-alive timeout fires just as the client reuses the connection."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.answered = 0
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    @staticmethod
    def _read_request(conn: socket.socket) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        while len(body) < length:
            body += conn.recv(65536)
        return True

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            if self._read_request(conn):
                self.answered += 1  # counted before the answer leaves: the client may assert as soon as it reads it
                conn.sendall(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n")
                self._read_request(conn)  # the next request on this connection: dropped unanswered

    def close(self) -> None:
        self.listener.close()


def test_a_push_on_a_connection_the_advisor_just_closed_is_retried_once_on_a_fresh_one() -> None:
    advisor = _DroppingAdvisor()
    stats = CollectorStats()
    pusher = SnapshotPusher(f"http://127.0.0.1:{advisor.port}", stats=stats, timeout_seconds=2)
    try:
        assert [pusher.send(SNAPSHOT) for _ in range(3)] == [1, 1, 1]  # none lost to "Server disconnected"
    finally:
        pusher.stop()
        advisor.close()
    assert advisor.answered == 3
    assert advisor.connections == 3
    assert stats.view().errors == {"push_retry": 2}  # survived, and counted


def test_a_second_disconnect_is_a_failed_push() -> None:
    """The retry is one attempt: an advisor that drops every connection costs two tries, then counts as failed."""
    listener = socket.create_server(("127.0.0.1", 0))

    def drop_all() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)

    threading.Thread(target=drop_all, daemon=True).start()
    stats = CollectorStats()
    pusher = SnapshotPusher(f"http://127.0.0.1:{listener.getsockname()[1]}", stats=stats, timeout_seconds=2)
    try:
        assert pusher.send(SNAPSHOT) == 0
    finally:
        pusher.stop()
        listener.close()
    assert stats.view().errors == {"push_retry": 1, "push": 1}
