"""The owner ↔ ingest-worker frames, what the owner does with a forwarded snapshot, and how many workers `advisor serve`
starts by default."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.api import ingest_channel as ch
from advisor.api.context import AppContext
from advisor.api.metrics import AdvisorMetrics
from advisor.api.transport.steering import IngestWorkers, cores_available, default_ingest_workers
from advisor.cli.serve import ServingCertificate, ingest_workers
from advisor.cluster.state import ClusterState
from advisor.settings import AdvisorSettings
from tests.advisor.factories import snapshot


def test_frames_come_out_whole_however_the_stream_is_cut() -> None:
    frames = [
        ch.encode(ch.SNAPSHOT, 1, b'{"node": "n1"}'),
        ch.encode(ch.OUTCOME_FRAME, 0, ch.encode_outcomes([(202, 0.001), (422, 0.002)])),
        ch.encode(ch.READY, 0, b""),
        ch.encode(ch.ACK, 4_000_000_000, b"\xca\x00" + b"x" * 70_000),
    ]
    stream = b"".join(frames)
    for cut in (1, 5, 9, 4096, len(stream)):
        reader = ch.FrameReader()
        got = [f for i in range(0, len(stream), cut) for f in reader.feed(stream[i : i + cut])]
        assert [(f.kind, f.request_id) for f in got] == [(1, 1), (2, 0), (7, 0), (5, 4_000_000_000)]
        assert got[0].payload == b'{"node": "n1"}'
        assert list(ch.decode_outcomes(got[1].payload)) == [(202, 0.001), (422, 0.002)]
        assert len(got[3].payload) == 70_002


def test_a_frame_claiming_an_absurd_length_breaks_the_channel() -> None:
    header = ch.HEADER.pack(ch.SNAPSHOT, 1, ch.MAX_PAYLOAD_BYTES + 1)
    with pytest.raises(ch.ChannelError):
        list(ch.FrameReader().feed(header))


def test_a_forwarded_request_keeps_what_the_app_reads() -> None:
    request = ch.ForwardedRequest(
        method="GET",
        scheme="http",
        http_version="1.1",
        path="/v1/nodes/a b",
        raw_path=b"/v1/nodes/a%20b",
        query_string=b"x=1",
        root_path="",
        headers=[(b"host", b"advisor")],
        client=("10.0.0.7", 41000),
        server=("10.0.0.1", 8080),
        body=b"",
    )
    loaded = ch.load_request(ch.dump(request))
    assert loaded == request
    assert loaded.scope()["client"] == ("10.0.0.7", 41000)
    with pytest.raises(ch.ChannelError):
        ch.load_request(ch.dump(ch.ForwardedResponse(200, [], b"")))


@pytest.mark.parametrize(("cores", "workers"), [(1.0, 0), (1.5, 0), (2.0, 1), (4.0, 1), (64.0, 1)])
def test_one_worker_by_default_where_there_is_a_second_core(cores: float, workers: int) -> None:
    assert default_ingest_workers(cores) == workers


def test_a_containers_cpu_limit_bounds_the_cores(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    affinity = len(os.sched_getaffinity(0))
    assert cores_available(tmp_path) == min(affinity, 1.5)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cores_available(tmp_path) == affinity
    assert cores_available(tmp_path / "absent") == affinity


def test_the_setting_wins_and_https_serves_in_one_process(tmp_path: Path) -> None:
    assert ingest_workers(AdvisorSettings(ingest_workers=3), None) == 3
    assert ingest_workers(AdvisorSettings(ingest_workers=0), None) == 0
    certificate = ServingCertificate(tmp_path / "c.pem", tmp_path / "k.pem")
    assert ingest_workers(AdvisorSettings(ingest_workers=3), certificate) == 0


def test_a_connection_kept_for_want_of_a_ready_worker_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """The ordinary route takes a collector's connection while no worker is ready (starting, restarting): said once,
    not once per push of every collector."""
    workers = IngestWorkers(1, app=_no_app, ctx=cast(AppContext, SimpleNamespace()))
    transport = cast(asyncio.Transport, SimpleNamespace())
    with caplog.at_level(logging.INFO, logger="advisor.api.transport.steering"):
        assert [workers.hand_off(transport) for _ in range(3)] == [False, False, False]
    (record,) = caplog.records
    assert "no ingest worker is ready" in record.getMessage()


async def _no_app(scope: object, receive: object, send: object) -> None:
    raise AssertionError("a hand-off reads no request")


class _Link:
    """The owner's end of a worker's channel as `IngestWorkers.on_frame` answers on it: the frames it sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int, bytes]] = []

    def send(self, kind: int, request_id: int, payload: bytes) -> None:
        self.sent.append((kind, request_id, payload))


def _pushed(node: str, **fields: object) -> bytes:
    return json.dumps(snapshot(node, **fields)).encode()  # type: ignore[arg-type]


def test_the_owner_checks_each_forwarded_snapshot_as_the_ingest_route_does(tmp_path: Path) -> None:
    """A worker checks only the token and the size; the owner validates the body once, as it builds the snapshot it
    applies, and acks with the route's own answer, counting what it refused."""
    state = ClusterState()
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/one.db", no_kube=True, api_token="t")
    ctx = SimpleNamespace(settings=settings, state=state, metrics=AdvisorMetrics())
    workers = IngestWorkers(1, app=_no_app, ctx=cast(AppContext, ctx))
    twice = json.loads(_pushed("n2"))
    twice["gpus"][1]["index"] = 0
    future = _pushed("n3", timestamp=datetime.now(UTC) + timedelta(hours=1))
    bodies = [_pushed("n1"), json.dumps(twice).encode(), future, b'{"node": "n4", "timestamp": NaN}']
    link = _Link()
    for request_id, body in enumerate(bodies, start=1):
        workers.on_frame(cast(Any, link), ch.Frame(ch.SNAPSHOT, request_id, body))
    with TestClient(create_app(settings)) as route:
        expected = [route.post("/v1/telemetry", content=b, headers={"Authorization": "Bearer t"}) for b in bodies]
    acks = [
        (kind, rid, ch.ACK_STATUS.unpack_from(p)[0], json.loads(p[ch.ACK_STATUS.size :])) for kind, rid, p in link.sent
    ]
    assert [(kind, rid) for kind, rid, _, _ in acks] == [(ch.ACK, 1), (ch.ACK, 2), (ch.ACK, 3), (ch.ACK, 4)]
    assert [(code, _clockless(answer)) for _, _, code, answer in acks] == [
        (e.status_code, _clockless(e.json())) for e in expected
    ]
    assert [code for _, _, code, _ in acks] == [202, 422, 422, 422]
    assert set(state.nodes) == {"n1"}
    metrics = ctx.metrics.registry
    counted = {
        r: metrics.get_sample_value("gpuadvisor_advisor_snapshots_total", {"result": r})
        for r in ("accepted", "invalid", "future")
    }
    assert counted == {"accepted": 1, "invalid": 2, "future": 1}


def _clockless(answer: object) -> object:
    """An answer without the seconds a future snapshot is ahead (two clocks read apart differ)."""
    return json.loads(re.sub(r"\b\d+ s ahead", "N s ahead", json.dumps(answer)))
