"""What one client may cost the advisor (issue 40): parse memory per request bounded by a budget (503 + Retry-After
beyond it), candidate lists bounded, deep nesting a 4xx on every route, and slow or surplus connections closed."""

from __future__ import annotations

import asyncio
import asyncio.selector_events
import contextlib
import gc
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from advisor.api import create_app
from advisor.api.answer_caches import CheckedNodes
from advisor.api.errors import BodyLimit
from advisor.api.fastpath import decode_json
from advisor.api.limits import LARGE_BODY_BYTES, ConnectionLimits, MemoryBudget, connection_cap
from advisor.api.routes.extender import SmallBodyError, fast_filter, filter_, node_view, sent_args
from advisor.api.schemas import MAX_CANDIDATE_NODES, ExtenderArgs, V1Node
from advisor.settings import PARSE_EXPANSION, AdvisorSettings
from tests.advisor.factories import snapshot, v1_pod
from tests.support import upstream
from tests.support.guarded import guarded_server as serve_guarded
from tests.support.guarded import ok_app

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
MIB = 1024 * 1024


def _settings(tmp_path: Path, **overrides: object) -> AdvisorSettings:
    return AdvisorSettings(db_url=f"sqlite:///{tmp_path}/l.db", no_kube=True, api_token=TOKEN, **overrides)  # type: ignore[arg-type]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(_settings(tmp_path))) as c:
        assert c.post("/v1/telemetry", json=snapshot("n1"), headers=AUTH).status_code == 202
        yield c


# -- the memory budget -----------------------------------------------------------------------------------------------


def test_the_budget_holds_bodies_at_their_parse_cost_and_keeps_a_share_for_small_ones() -> None:
    budget = MemoryBudget(64 * MIB)  # 48 MiB of it for large bodies: 3 MiB of body at 16x
    assert budget.grow(0, 2 * MIB)
    assert budget.held_bytes == 2 * MIB * PARSE_EXPANSION
    assert not budget.grow(0, 2 * MIB)  # a second large one would pass the large share
    assert budget.grow(0, 512 * 1024)  # a small one still fits
    assert budget.grow(2 * MIB, 3 * MIB)  # a body that arrives in chunks grows its reservation
    assert not budget.grow(3 * MIB, 3 * MIB + 1)
    budget.release(3 * MIB)
    budget.release(512 * 1024)
    assert (budget.held_bytes, budget.large_held_bytes) == (0, 0)


def test_a_budget_too_small_for_the_largest_body_is_refused_naming_the_settings() -> None:
    with pytest.raises(ValidationError, match=r"request_memory_budget_bytes.*scheduler_body_limit_bytes"):
        AdvisorSettings(scheduler_body_limit_bytes=32 * MIB, request_memory_budget_bytes=256 * MIB)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_body_beyond_the_budget_now_is_a_503_with_retry_after_and_is_not_read() -> None:
    entered, leave = asyncio.Event(), asyncio.Event()
    bodies: list[int] = []

    async def slow_app(scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        bodies.append(len(message["body"]))
        entered.set()
        await leave.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    refusals: list[str] = []
    budget = MemoryBudget(64 * MIB)
    app = BodyLimit(slow_app, limit_of=lambda _: 8 * MIB, budget=budget, refused=refusals.append)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as http:
        first = asyncio.create_task(http.post("/extender/filter", content=b"x" * (2 * MIB)))
        await entered.wait()
        second = await http.post("/extender/filter", content=b"y" * (2 * MIB))
        assert second.status_code == 503
        assert second.headers["retry-after"] == "1"
        assert second.headers["connection"] == "close"
        assert "retry" in second.json()["detail"]
        small = asyncio.create_task(http.post("/v1/score", content=b"z" * 1000))
        await asyncio.sleep(0.05)
        leave.set()
        assert (await first).status_code == 200
        assert (await small).status_code == 200
    assert bodies == [2 * MIB, 1000]  # the refused body never reached the app
    assert refusals == ["memory_budget"]
    assert budget.held_bytes == 0  # every reservation given back


@pytest.mark.anyio
async def test_a_body_without_content_length_is_held_to_the_budget_as_it_arrives() -> None:
    async def app_(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    budget = MemoryBudget(64 * MIB)
    budget.grow(0, 2 * MIB)  # another large body in flight
    app = BodyLimit(app_, limit_of=lambda _: 8 * MIB, budget=budget)

    async def chunks() -> Iterator[bytes]:  # type: ignore[misc]
        for _ in range(4):
            yield b"x" * (512 * 1024)

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as http:
        response = await http.post("/volcano/prioritize", content=chunks())
    assert response.status_code == 503
    assert budget.held_bytes == 2 * MIB * PARSE_EXPANSION


# -- candidate lists and nesting -------------------------------------------------------------------------------------


def test_more_candidates_than_the_cap_is_a_422_on_every_scheduler_route(client: TestClient) -> None:
    names = [f"n{i}" for i in range(MAX_CANDIDATE_NODES + 1)]
    pod = v1_pod(gpus=1)
    task = upstream.volcano_task(upstream.pod(containers=[upstream.container(limits={"nvidia.com/gpu": "1"})]))
    bodies = {
        "/extender/prioritize": {"Pod": pod, "NodeNames": names},
        "/extender/filter": {"Pod": pod, "Nodes": {"items": [{"metadata": {"name": n}} for n in names]}},
        "/volcano/prioritize": {"task": task, "nodes": [{"Name": n} for n in names]},
        "/v1/score": {"pod": {"gpus": 1}, "nodes": names},
    }
    for path, body in bodies.items():
        response = client.post(path, content=json.dumps(body), headers=AUTH)
        assert response.status_code == 422, (path, response.text[:200])
        assert str(MAX_CANDIDATE_NODES) in response.text, path
    at_cap = client.post("/extender/prioritize", json={"Pod": pod, "NodeNames": names[:-1]})
    assert at_cap.status_code == 200


@pytest.mark.parametrize("depth", [200, 1000, 5000])
def test_deeply_nested_json_is_a_4xx_on_every_route_that_takes_a_body(client: TestClient, depth: int) -> None:
    deep = ('{"a":' * depth + "1" + "}" * depth).encode()
    routes = [
        (path, method.upper())
        for path, methods in client.get("/openapi.json").json()["paths"].items()
        for method in methods
        if method in {"post", "put", "patch"}
    ]
    assert {"/volcano/predicate", "/volcano/prioritize", "/extender/filter", "/v1/score"} <= {p for p, _ in routes}
    for path, method in routes:
        concrete = path.replace("{namespace}", "ml").replace("{name}", "x").replace("{node}", "n1")
        response = client.request(method, concrete, content=deep, headers=AUTH)
        assert 400 <= response.status_code < 500, (path, depth, response.status_code, response.text[:200])


# -- connections: deadlines and the cap ------------------------------------------------------------------------------


@pytest.fixture
def guarded_server() -> Iterator[tuple[int, list[str]]]:
    """A uvicorn server on loopback with the advisor's guarded protocol: 0.5 s for a head, 1 s for a body, 3
    connections."""
    refusals: list[str] = []
    limits = ConnectionLimits(header_timeout_seconds=0.5, body_timeout_seconds=1.0, max_connections=3)
    with serve_guarded(ok_app, limits, refusals.append) as port:
        yield port, refusals


def _read_until_closed(sock: socket.socket, within_seconds: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    start = time.monotonic()
    sock.settimeout(within_seconds)
    received = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return received, time.monotonic() - start
        received += chunk


def test_a_client_that_sends_its_headers_too_slowly_is_closed_with_a_408(guarded_server: tuple[int, list[str]]) -> None:
    port, refusals = guarded_server
    with socket.create_connection(("127.0.0.1", port)) as slow:
        slow.sendall(b"POST /extender/prioritize HTTP/1.1\r\nHost: a\r\n")  # and never the rest
        answer, seconds = _read_until_closed(slow, within_seconds=5)
    assert answer.startswith(b"HTTP/1.1 408")
    assert seconds < 2
    with socket.create_connection(("127.0.0.1", port)) as silent:  # nothing at all: closed too
        _, seconds = _read_until_closed(silent, within_seconds=5)
    assert seconds < 2
    assert refusals == ["header_timeout", "header_timeout"]


def test_a_client_that_sends_its_body_too_slowly_is_closed(guarded_server: tuple[int, list[str]]) -> None:
    port, refusals = guarded_server
    with socket.create_connection(("127.0.0.1", port)) as slow:
        slow.sendall(b"POST /v1/score HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{")
        answer, seconds = _read_until_closed(slow, within_seconds=5)
    assert answer.startswith(b"HTTP/1.1 408")
    assert seconds < 3
    assert refusals == ["body_timeout"]


def test_headers_beyond_the_cap_are_a_431(guarded_server: tuple[int, list[str]]) -> None:
    port, refusals = guarded_server
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\n")
        with contextlib.suppress(ConnectionError):  # closed under our feet, with our bytes unread: a reset
            for _ in range(20):
                client.sendall(b"X-Pad: " + b"p" * 8000 + b"\r\n")
            answer, _ = _read_until_closed(client, within_seconds=5)
            assert answer.startswith(b"HTTP/1.1 431")
    assert refusals == ["header_too_large"]


def test_a_connection_past_the_cap_is_answered_503_and_closed_while_the_others_are_served(
    guarded_server: tuple[int, list[str]],
) -> None:
    port, refusals = guarded_server
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        time.sleep(0.1)
        with socket.create_connection(("127.0.0.1", port)) as extra:
            answer, seconds = _read_until_closed(extra, within_seconds=5)
        assert answer.startswith(b"HTTP/1.1 503")
        assert b"retry-after: 1" in answer
        assert seconds < 0.4  # at once, not at the header deadline
        held[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
        held[0].settimeout(5)
        assert held[0].recv(1024).startswith(b"HTTP/1.1 200")
    finally:
        for sock in held:
            sock.close()
    assert refusals == ["connections"]


def test_a_kept_alive_connection_serves_request_after_request_within_the_deadlines(
    guarded_server: tuple[int, list[str]],
) -> None:
    port, refusals = guarded_server
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.settimeout(5)
        for _ in range(3):
            client.sendall(b"POST /v1/score HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}")
            answer = b""
            while not answer.endswith(b"ok"):
                answer += client.recv(1024)
            assert answer.startswith(b"HTTP/1.1 200")
            time.sleep(0.7)  # longer than the head deadline, idle between requests: not a slow client
    assert refusals == []


def test_the_connection_cap_stays_below_the_descriptor_limit() -> None:
    assert connection_cap(10_000, soft_limit=1024) == 1024 - 64
    assert connection_cap(500, soft_limit=1 << 20) == 500


def test_a_large_body_is_parsed_off_the_event_loop(tmp_path: Path) -> None:
    """A scheduler body over 1 MiB is answered through a worker thread (advisor.api.fastpath, volcano), so the answer
    is the same as for a small one."""
    names = [f"node-{i:05d}" for i in range(1500)]
    nodes = [upstream.node(n) for n in names]
    pod = upstream.pod(containers=[upstream.container(limits={"nvidia.com/gpu": "1"})])
    body = json.dumps(upstream.extender_args(pod, nodes=nodes)).encode()
    assert len(body) > LARGE_BODY_BYTES
    with TestClient(create_app(_settings(tmp_path))) as c:
        response = c.post("/extender/prioritize", content=body, headers=AUTH)
    assert response.status_code == 200
    assert [h["Host"] for h in response.json()] == names


def test_a_large_extender_body_read_without_node_models_is_what_the_route_parses() -> None:
    names = [f"node-{i:05d}" for i in range(800)]
    pod = upstream.pod(containers=[upstream.container(limits={"nvidia.com/gpu": "2"})])
    body = upstream.extender_args(pod, nodes=[upstream.node(n) for n in names])
    body["Nodes"] |= {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "42"}}
    whole = ExtenderArgs.model_validate(body)
    assert whole.Nodes is not None
    for raw in (json.dumps(body).encode(), json.dumps(body | {"Future": {"ignored": True}}).encode()):
        sent = sent_args(raw, checked=CheckedNodes(generation_bytes=MIB))
        assert sent.args.Pod == whole.Pod
        assert sent.candidates() == whole.candidates() == names
        assert sent.labels() == {n.metadata.name: n.labels() for n in whole.Nodes.items or []}
        assert sent.node_list is not None
        assert {k: json.loads(bytes(v)) for k, v in sent.node_list.items()} == whole.Nodes.model_dump(
            mode="json", exclude_unset=True, exclude={"items"}
        )
        assert [json.loads(bytes(item)) for item in sent.items] == [n.as_sent() for n in whole.Nodes.items or []]
    names_only = json.dumps(upstream.extender_args(pod, node_names=names)).encode()
    assert sent_args(names_only, checked=CheckedNodes()).candidates() == names


def test_a_large_extender_body_is_refused_exactly_where_the_route_refuses_it(tmp_path: Path) -> None:
    """Reading each Node for its metadata only (and each one once, `CheckedNodes`) refuses what the route's strict
    parser and models refuse — in the metadata, fields the advisor never reads included, and the JSON syntax and UTF-8
    of the whole body — and the service answers those with the route's 422; a Node seen before and sent again is not
    validated again."""
    names = [f"node-{i:05d}" for i in range(800)]
    pod = upstream.pod(containers=[upstream.container(limits={"nvidia.com/gpu": "2"})])
    raw = json.dumps(upstream.extender_args(pod, nodes=[upstream.node(n) for n in names])).encode()
    assert len(raw) > LARGE_BODY_BYTES
    node = b'"name": "node-00007"'
    assert node in raw
    status = raw.index(b'"status": {', raw.index(node)) + len(b'"status": {')

    def in_status(field: bytes) -> bytes:
        """The body with `field` first in node-00007's status, a part of a Node the advisor does not read."""
        return raw[:status] + field + b", " + raw[status:]

    bad = {
        "not JSON": raw.replace(b'"node-00007"', b"NaN", 1),
        "a name that is no string": raw.replace(node, b'"name": 7', 1),
        "a namespace that is no string": raw.replace(node, node + b', "namespace": 7', 1),
        "a label that is no string": raw.replace(
            b'"kubernetes.io/hostname": "node-00007"', b'"kubernetes.io/hostname": 7', 1
        ),
        "metadata that is no object": raw.replace(b'{"metadata": {' + node, b'{"metadata": null, "m": {' + node, 1),
        "a node that is no object": raw.replace(b'"items": [', b'"items": [7, ', 1),
        "an overflowing number in a node": raw.replace(node, node + b', "x": 1e400', 1),
        "an overflowing number outside": raw[:-1] + b', "Future": [1e999]}',
        "an overflowing number in the list": raw.replace(b'"items": [', b'"x": -1e400, "items": [', 1),
        "invalid UTF-8 in a node": raw.replace(node, node + b', "x": "\xff"', 1),
        "an unpaired surrogate": raw.replace(node, node + b', "x": "\\ud800"', 1),
        "an integer past 4,300 digits": raw.replace(node, node + b', "x": ' + b"9" * 5000, 1),
        "a syntax error in a field not read": in_status(b'"x": tru'),
        "invalid UTF-8 in a field not read": in_status(b'"x": "\xff"'),
        "an unpaired surrogate in a field not read": in_status(b'"x": "\\udc00"'),
        "an invalid escape in a field not read": in_status(b'"x": "\\q"'),
        "no pod": json.dumps({"NodeNames": names}).encode(),
        "too many names": json.dumps(
            {"Pod": pod, "NodeNames": [f"n{i}" for i in range(MAX_CANDIDATE_NODES + 1)]}
        ).encode(),
    }
    with TestClient(create_app(_settings(tmp_path))) as c:
        assert c.post("/extender/prioritize", content=raw, headers=AUTH).status_code == 200
        for case, body in bad.items():
            with pytest.raises((ValueError, msgspec.DecodeError, msgspec.ValidationError)):
                sent_args(body, checked=CheckedNodes(generation_bytes=MIB))
            for path in ("/extender/prioritize", "/extender/filter"):
                response = c.post(path, content=body, headers=AUTH)
                assert response.status_code == 422, (case, path, response.status_code)
    checked = CheckedNodes(generation_bytes=64 * MIB)
    sent_args(raw, checked=checked)
    assert len(checked) == len(names)
    again = sent_args(raw, checked=checked)
    assert len(checked) == len(names)
    assert again.candidates() == names


def test_a_node_is_read_for_its_metadata_as_the_routes_model_reads_it() -> None:
    """`node_view` gives the name and labels the route's `V1Node` gives — ASCII or not, metadata absent or partial —
    without building the fields the advisor does not read: a number out of range there is checked for its syntax
    only (kube-scheduler's encoder never writes one), where the route's parser, decoding everything, refuses it."""
    nodes = [
        upstream.node("n-1"),
        {"metadata": {"name": "n-2", "labels": {"zone": "zürich"}}, "status": {"capacity": {"cpu": "4"}}},
        {"metadata": {"name": "n-3", "labels": None}},
        {"metadata": {}},
        {},
    ]
    for obj in nodes:
        for text in (json.dumps(obj).encode(), json.dumps(obj, ensure_ascii=False).encode()):
            node = V1Node.model_validate(decode_json(text))
            assert node_view(text) == (node.metadata.name, node.labels())
    unread = b'{"metadata": {"name": "n-4"}, "status": {"images": [{"sizeBytes": 1e400}]}}'
    with pytest.raises(msgspec.ValidationError):
        decode_json(unread)
    assert node_view(unread) == ("n-4", {})


def test_checked_nodes_keep_two_generations_within_their_budget() -> None:
    nodes = [msgspec.Raw(json.dumps(upstream.node(f"n{i}")).encode()) for i in range(40)]
    size = sum(len(n) for n in nodes[:10])
    checked = CheckedNodes(generation_bytes=size)
    assert [name for name, _ in checked.views(nodes, node_view)] == [f"n{i}" for i in range(40)]
    assert len(checked) <= 2 * 11  # at most the newest two generations
    assert [name for name, _ in checked.views(nodes[-5:], node_view)] == [f"n{i}" for i in range(35, 40)]


def test_a_large_filter_body_is_validated_node_by_node_with_the_routes_answer(tmp_path: Path) -> None:
    """`/extender/filter` with whole Node objects (over 1 MiB) is answered by `fast_filter` — the body validated one
    Node at a time in a worker thread, as prioritize's — with exactly the route's answer; a small body is left to the
    route."""
    names = [f"node-{i:05d}" for i in range(1500)]
    pod = upstream.pod(containers=[upstream.container(limits={"nvidia.com/gpu": "1"})])
    raw = json.dumps(upstream.extender_args(pod, nodes=[upstream.node(n) for n in names])).encode()
    assert len(raw) > LARGE_BODY_BYTES
    with TestClient(create_app(_settings(tmp_path))) as c:
        ctx = c.app.state.ctx  # type: ignore[attr-defined]
        served = c.post("/extender/filter", content=raw, headers=AUTH)
        direct = json.loads(fast_filter(raw, ctx))
        route = json.loads(
            filter_(ExtenderArgs.model_validate(json.loads(raw)), ctx).model_dump_json(exclude_none=True)
        )
        small = json.dumps(upstream.extender_args(pod, node_names=names[:3])).encode()
        with pytest.raises(SmallBodyError):
            fast_filter(small, ctx)
    assert served.status_code == 200
    assert served.json() == direct == route
    assert [n["metadata"]["name"] for n in direct["Nodes"]["items"]] == direct["NodeNames"] == names


def _transports() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, asyncio.selector_events._SelectorSocketTransport))


def test_a_closed_connection_is_freed_without_a_cyclic_collection(guarded_server: tuple[int, list[str]]) -> None:
    # Frozen objects are freed only by reference counting between full collections (the state freezes often): a
    # closed connection's transport must not wait in a reference cycle.
    port, _ = guarded_server
    gc.collect()
    gc.disable()
    try:
        before = _transports()
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", port)) as client:
                client.settimeout(5)
                client.sendall(b"POST /v1/score HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}")
                answer = b""
                while not answer.endswith(b"ok"):
                    answer += client.recv(1024)
        deadline = time.monotonic() + 10
        while _transports() > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _transports() <= before
    finally:
        gc.enable()
