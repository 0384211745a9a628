"""`advisor serve` with ingest workers, as collectors, the scheduler and an operator meet it: real processes, real
sockets. A collector's keep-alive connection moves to a worker after its first snapshot; what it pushes must land in
the one state the owner serves, be refused exactly as a single process refuses it, and be counted once."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.settings import AdvisorSettings
from tests.advisor.factories import process, snapshot, v1_pod
from tests.support.net import free_port, wait_until

TOKEN = "workers-token"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
WORKERS = 2
BODY_TIMEOUT_SECONDS = 5


class Advisor:
    """A served advisor: its port and process."""

    def __init__(self, port: int, proc: subprocess.Popen[bytes]) -> None:
        self.port = port
        self.proc = proc

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def metric(self, name: str) -> float:
        conn = self.connect()
        conn.request("GET", "/metrics")
        for line in conn.getresponse().read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return 0.0

    def workers(self) -> list[int]:
        return children(self.proc.pid)


def children(pid: int) -> list[int]:
    """Live processes whose parent is `pid` (zombies are dead: their exit status only waits to be read)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        if int(parent) == pid and state != "Z":
            found.append(int(entry.name))
    return found


@contextmanager
def serving(tmp_path: Path, workers: int = WORKERS) -> Iterator[Advisor]:
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUADVISOR_")}
    # a body deadline short enough to test on a worker, long enough for any push that is sent at once
    env = {
        **clean,
        "GPUADVISOR_API_TOKEN": TOKEN,
        "GPUADVISOR_STALENESS_SECONDS": "3600",
        "GPUADVISOR_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT_SECONDS),
    }
    argv = ["advisor", "serve", "--no-kube", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--db", f"sqlite:///{tmp_path}/w.db", "--ingest-workers", str(workers)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "advisor.cli", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    advisor = Advisor(port, proc)
    try:
        assert wait_until(lambda: advisor.metric("gpuadvisor_advisor_ingest_workers") == workers, timeout_s=100)
        yield advisor
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def advisor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Advisor]:
    with serving(tmp_path_factory.mktemp("workers")) as served:
        yield served


def push(conn: http.client.HTTPConnection, body: bytes, headers: dict[str, str] = AUTH) -> tuple[int, bytes]:
    conn.request("POST", "/v1/telemetry", body=body, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


def raw(node: str, **fields: object) -> bytes:
    return json.dumps(snapshot(node, **fields)).encode()  # type: ignore[arg-type]


def test_snapshots_from_several_keep_alive_collectors_land_in_the_state_and_are_counted_once(advisor: Advisor) -> None:
    handed_before = advisor.metric("gpuadvisor_advisor_ingest_connections_handed_off_total")
    accepted_before = advisor.metric('gpuadvisor_advisor_snapshots_total{result="accepted"}')
    answers: list[tuple[int, bytes]] = []

    def collector(k: int) -> None:
        conn = advisor.connect()
        for i in range(15):
            busy = {0: [process(f"c{k}-{i}")]} if i == 14 else None
            answers.append(push(conn, raw(f"c{k}-n{i:02d}", busy=busy)))

    threads = [threading.Thread(target=collector, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(answers) == 45
    assert {status for status, _ in answers} == {202}
    assert all(json.loads(body)["accepted"] for _, body in answers)
    # each collector's connection went to a worker after its first snapshot; the other 14 were served there
    assert advisor.metric("gpuadvisor_advisor_ingest_connections_handed_off_total") == handed_before + 3

    conn = advisor.connect()
    conn.request("GET", "/v1/nodes")
    names = {n["name"] for n in json.loads(conn.getresponse().read())["nodes"]}
    assert {f"c{k}-n{i:02d}" for k in range(3) for i in range(15)} <= names
    # the owner scores what the workers took in: the last snapshot of each collector has a busy GPU 0
    conn.request("GET", "/v1/nodes/c1-n14")
    node = json.loads(conn.getresponse().read())
    assert node["gpus"][0]["residents"], node
    assert wait_until(
        lambda: advisor.metric('gpuadvisor_advisor_snapshots_total{result="accepted"}') == accepted_before + 45,
        timeout_s=10,
    )
    time.sleep(0.3)  # nothing counted twice arrives late
    assert advisor.metric('gpuadvisor_advisor_snapshots_total{result="accepted"}') == accepted_before + 45


BAD_BODIES = {
    "missing timestamp": b'{"node": "bad", "gpus": [], "links": []}',
    "NaN in a reading the schema ignores": raw("bad").replace(b'"gpus": [', b'"spare": NaN, "gpus": [', 1),
    "NaN power": raw("bad").replace(b'"power_watts": 300.0', b'"power_watts": NaN', 1),
    "invalid UTF-8": raw("bad").replace(b'"node": "bad"', b'"node": "b\xffd"', 1),
    "from the future": raw("bad", timestamp=datetime(9999, 1, 1, tzinfo=UTC)),
    "a GPU index twice": raw("bad", gpus=2).replace(b'"index": 1', b'"index": 0', 1),
    "not JSON": b"{not json",
    "too large": b'{"node": "' + b"x" * (4 * 1024 * 1024) + b'"}',
}


@pytest.mark.parametrize("name", list(BAD_BODIES))
def test_a_bad_snapshot_on_a_worker_gets_the_answer_of_a_single_process(
    advisor: Advisor, tmp_path: Path, name: str
) -> None:
    body = BAD_BODIES[name]
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/one.db", no_kube=True, api_token=TOKEN)
    with TestClient(create_app(settings)) as single:
        expected = single.post("/v1/telemetry", content=body, headers=AUTH)
    assert 400 <= expected.status_code < 500
    conn = advisor.connect()
    assert push(conn, raw("first"))[0] == 202  # the connection is a worker's from here on
    status, answer = push(conn, body)
    assert (status, _clockless(answer.decode())) == (expected.status_code, _clockless(expected.text))


def _clockless(answer: str) -> object:
    """An answer without the seconds a future snapshot is ahead (they differ between two clocks read apart)."""
    return json.loads(re.sub(r"\b\d+ s ahead", "N s ahead", answer))


def test_a_push_without_the_token_is_refused_on_a_worker_and_the_connection_goes_on(advisor: Advisor) -> None:
    conn = advisor.connect()
    assert push(conn, raw("tok-1"))[0] == 202
    conn.request("POST", "/v1/telemetry", body=raw("tok-2"), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 401
    assert response.getheader("www-authenticate") == "Bearer"
    assert "GPUADVISOR_API_TOKEN" in json.loads(response.read())["detail"]
    assert push(conn, raw("tok-3"))[0] == 202


def test_a_slow_body_on_a_workers_connection_is_closed_at_the_body_deadline(advisor: Advisor) -> None:
    """The serving process's deadlines hold on a handed-off connection too: a client that sends headers and then
    part of its body is answered 408 and closed, not held for ever by the worker."""
    conn = advisor.connect()
    handed_before = advisor.metric("gpuadvisor_advisor_ingest_connections_handed_off_total")
    assert push(conn, raw("slow-1"))[0] == 202
    assert wait_until(
        lambda: advisor.metric("gpuadvisor_advisor_ingest_connections_handed_off_total") > handed_before, timeout_s=30
    )
    body = raw("slow-2")
    head = (
        f"POST /v1/telemetry HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    assert conn.sock is not None
    conn.sock.sendall(head.encode() + body[:10])
    started = time.monotonic()
    conn.sock.settimeout(BODY_TIMEOUT_SECONDS * 6)
    answer = b""
    while chunk := conn.sock.recv(4096):
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert time.monotonic() - started < BODY_TIMEOUT_SECONDS * 6


def test_other_requests_on_a_collectors_connection_are_answered_by_the_owner(advisor: Advisor) -> None:
    conn = advisor.connect()
    names = [f"other-{i}" for i in range(4)]
    for name in names:
        assert (
            push(conn, raw(name, busy={g: [process(f"{name}-{g}")] for g in range(7)} if name == "other-2" else None))[
                0
            ]
            == 202
        )
    body = json.dumps({"Pod": v1_pod(gpus=1), "Nodes": None, "NodeNames": names}).encode()
    conn.request("POST", "/extender/prioritize", body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    hosts = json.loads(response.read())
    assert [h["Host"] for h in hosts] == names
    assert max(hosts, key=lambda h: h["Score"])["Host"] == "other-2"  # the fullest node: where a 1-GPU pod fits best
    conn.request("GET", "/v1/nodes/nowhere")
    response = conn.getresponse()
    assert response.status == 404
    assert "nowhere" in response.read().decode()
    conn.request("POST", "/v1/score", body=b'{"pod": {"gpus": "many"}}', headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 422
    assert json.loads(response.read())["detail"][0]["loc"][:2] == ["body", "pod"]
    assert push(conn, raw("other-4"))[0] == 202  # and the connection still takes snapshots


def _worker_serving(advisor: Advisor, conn: http.client.HTTPConnection) -> int:
    """The worker process holding `conn`'s server side (by its sockets' inodes in /proc)."""
    local_port = conn.sock.getsockname()[1]
    for pid in advisor.workers():
        for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
            remote = line.split()[2]
            if int(remote.split(":")[1], 16) == local_port:
                inode = line.split()[9]
                fds = Path(f"/proc/{pid}/fd")
                if any(os.readlink(fd) == f"socket:[{inode}]" for fd in fds.iterdir()):
                    return pid
    raise AssertionError("no worker holds the connection")


def test_a_killed_worker_takes_only_its_connections_and_is_replaced(tmp_path: Path) -> None:
    with serving(tmp_path, workers=1) as advisor:
        conn = advisor.connect()
        assert push(conn, raw("k-1"))[0] == 202
        assert push(conn, raw("k-2"))[0] == 202
        victim = _worker_serving(advisor, conn)
        os.kill(victim, signal.SIGKILL)
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            push(conn, raw("k-3"))
        # the advisor serves on: a collector that reconnects pushes to the owner while the worker restarts ...
        again = advisor.connect()
        assert push(again, raw("k-3"))[0] == 202
        assert wait_until(lambda: advisor.metric("gpuadvisor_advisor_ingest_worker_exits_total") == 1, timeout_s=10)
        assert wait_until(lambda: advisor.metric("gpuadvisor_advisor_ingest_workers") == 1, timeout_s=60)
        (replacement,) = advisor.workers()
        assert replacement != victim
        # ... and its next push moves the connection to the new worker
        assert push(again, raw("k-4"))[0] == 202
        assert advisor.metric("gpuadvisor_advisor_ingest_connections_handed_off_total") == 2
        assert _worker_serving(advisor, again) == replacement
        assert push(again, raw("k-5"))[0] == 202
        conn = advisor.connect()
        conn.request("GET", "/v1/nodes/k-5")
        assert conn.getresponse().status == 200


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_stopping_the_advisor_leaves_no_process_behind(tmp_path: Path, stop: signal.Signals) -> None:
    with serving(tmp_path) as advisor:
        conn = advisor.connect()
        assert push(conn, raw("s-1"))[0] == 202
        assert push(conn, raw("s-2"))[0] == 202  # served by a worker
        workers = advisor.workers()
        assert len(workers) == WORKERS
        advisor.proc.send_signal(stop)
        advisor.proc.wait(timeout=30)
        assert wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers), timeout_s=10)
