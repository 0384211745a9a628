"""Snapshot timestamps judged against this replica's clock at arrival (issue 40): one push stamped ahead (inside the
allowed skew) cannot make a node's genuine snapshots look older, and a collector whose clock steps back (NTP) is
followed after one dropped push."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.cluster.state import ClusterState
from advisor.settings import AdvisorSettings
from collector.snapshot import NodeSnapshot
from tests.advisor.factories import process, snapshot

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def _take(state: ClusterState, at: datetime, *, stamped: datetime, busy: bool = False) -> bool:
    body = snapshot("n1", busy={0: [process("a")]} if busy else None, timestamp=stamped)
    return state.ingest(NodeSnapshot.model_validate(body), wall_seconds=at.timestamp())


def test_a_forward_dated_snapshot_does_not_freeze_the_node() -> None:
    state = ClusterState()
    assert _take(state, NOW, stamped=NOW + timedelta(seconds=290), busy=True)  # a clock (or a sender) 290 s ahead
    assert _take(state, NOW + timedelta(seconds=5), stamped=NOW + timedelta(seconds=5))  # the genuine next one
    assert state.nodes["n1"].free_gpus == 8
    assert state.out_of_order_dropped == 0


def test_a_push_overtaken_by_the_next_is_dropped_once_and_a_clock_stepped_back_is_followed() -> None:
    state = ClusterState()
    assert _take(state, NOW, stamped=NOW)
    assert not _take(state, NOW + timedelta(seconds=1), stamped=NOW - timedelta(seconds=5), busy=True)  # late push
    assert state.nodes["n1"].free_gpus == 8
    assert _take(state, NOW + timedelta(seconds=5), stamped=NOW + timedelta(seconds=5))
    # the collector's clock steps back 120 s: its first push after is dropped, the next taken
    assert not _take(state, NOW + timedelta(seconds=10), stamped=NOW - timedelta(seconds=110))
    assert _take(state, NOW + timedelta(seconds=15), stamped=NOW - timedelta(seconds=105), busy=True)
    assert state.nodes["n1"].free_gpus == 7
    assert _take(state, NOW + timedelta(seconds=20), stamped=NOW - timedelta(seconds=100))
    assert state.out_of_order_dropped == 2


def test_through_the_route_a_push_stamped_ahead_does_not_turn_genuine_pushes_away(tmp_path: Path) -> None:
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/t.db", no_kube=True, api_token=TOKEN)
    with TestClient(create_app(settings)) as client:
        now = datetime.fromtimestamp(time.time(), tz=UTC)
        ahead = snapshot("n1", busy={0: [process("a")]}, timestamp=now + timedelta(seconds=290))
        assert client.post("/v1/telemetry", json=ahead, headers=AUTH).json()["accepted"]
        later = datetime.fromtimestamp(time.time(), tz=UTC)  # the collector's next cycle, on a right clock
        genuine = client.post("/v1/telemetry", json=snapshot("n1", timestamp=later), headers=AUTH).json()
        assert genuine["accepted"], genuine
        assert client.get("/v1/nodes/n1").json()["free_gpus"] == 8
