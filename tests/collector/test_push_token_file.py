"""The collector pushes with the token of a file read on every push (a projected ServiceAccount token rotates; the
advisor ties telemetry to its node by it: issue 40)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx

from collector.push import SnapshotPusher
from collector.snapshot import NodeSnapshot
from collector.stats import CollectorStats

SNAPSHOT = NodeSnapshot(node="n1", timestamp=datetime(2026, 11, 27, tzinfo=UTC))


def test_each_push_carries_the_token_the_file_holds_now(tmp_path: Path) -> None:
    seen: list[str | None] = []

    def advisor(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(202 if request.headers.get("authorization") else 401)

    token_file = tmp_path / "token"
    token_file.write_text("first-token\n")
    stats = CollectorStats()
    pusher = SnapshotPusher(
        "http://advisor.test:8080",
        stats=stats,
        token="shared-token",  # the file wins
        token_file=token_file,
        resolve=lambda host, port: ["127.0.0.1"],
        transport=httpx.MockTransport(advisor),
    )
    assert pusher.send(SNAPSHOT) == 1
    token_file.write_text("rotated-token")
    assert pusher.send(SNAPSHOT) == 1
    token_file.unlink()
    assert pusher.send(SNAPSHOT) == 0  # unreadable: pushed without, refused, counted
    assert seen == ["Bearer first-token", "Bearer rotated-token", None]
