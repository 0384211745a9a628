"""The hot routes' fast path (`advisor.api.fastpath`): its JSON decoder reads valid bodies exactly as the routes'
parser does and refuses everything that parser refuses (so the route answers those, with its 422), and the
prioritize answer it writes is the HostPriorityList, whatever the node names."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.api.errors import BodyError, parse_json
from advisor.api.fastpath import decode_json
from advisor.cluster.state import ClusterState
from advisor.settings import AdvisorSettings
from tests.advisor.factories import snapshot, v1_pod

JSON = {"Content-Type": "application/json"}


def random_document(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return rng.choice((None, True, False))
    if kind == 1:
        return rng.randrange(-(2**62), 2**62)
    if kind == 2:  # floats of every magnitude, written as Python and as other encoders would
        return rng.random() * 10 ** rng.randint(-300, 300) * rng.choice((1, -1))
    if kind in (3, 4):
        return "".join(rng.choice('ab"\\/\n\té€\U0001f600 ') for _ in range(rng.randrange(6)))
    if kind == 5:
        return [random_document(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{i}é": random_document(rng, depth + 1) for i in range(rng.randrange(4))}


@pytest.mark.parametrize("seed", range(5))
def test_valid_json_decodes_to_what_the_routes_parser_reads(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        document = random_document(rng)
        for text in (json.dumps(document), json.dumps(document, ensure_ascii=False, indent=1)):
            body = text.encode()
            assert decode_json(body) == parse_json(body)
    for number in ("1.7976931348623157e308", "5e-324", "-0.0", "0.1", "123456789012345678", "1E+2"):
        assert decode_json(number.encode()) == parse_json(number.encode())


@pytest.mark.parametrize(
    "body",
    [
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b'{"a": -Infinity}',
        b'{"a": 1e400}',
        b'{"a": "r\xffn"}',
        rb'{"a": "\ud800"}',
        rb'{"\udcff": 1}',
        b'{"a": 1' + b"0" * 5000 + b"}",
        b'{"a": 1,}',
        b"",
    ],
)
def test_what_the_routes_parser_refuses_the_decoder_refuses(body: bytes) -> None:
    with pytest.raises(BodyError):
        parse_json(body)
    with pytest.raises(Exception):  # noqa: B017,PT011 - any error: the request then goes on to the route
        decode_json(body)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = AdvisorSettings(
        db_url=f"sqlite:///{tmp_path}/f.db", no_kube=True, allow_unauthenticated_writes=True, staleness_seconds=3600
    )
    with TestClient(create_app(settings, state=ClusterState())) as c:
        for name in ("n1", "n-2"):
            assert c.post("/v1/telemetry", json=snapshot(name)).status_code == 202
        yield c


def test_the_prioritize_answer_is_the_host_priority_list_for_any_names(client: TestClient) -> None:
    names = ["n1", 'odd"name\\', "nö\U0001f600", "n-2", "n1"]
    response = client.post("/extender/prioritize", json={"Pod": v1_pod(gpus=1), "NodeNames": names}, headers=JSON)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    hosts = response.json()
    assert [h["Host"] for h in hosts] == names
    assert {h["Host"]: h["Score"] for h in hosts}['odd"name\\'] == 5  # unknown: neutral
    assert hosts[0] == hosts[4]
    assert all(type(h["Score"]) is int and 0 <= h["Score"] <= 10 for h in hosts)
    assert max(h["Score"] for h in hosts) == 10
    empty = client.post("/extender/prioritize", json={"Pod": v1_pod(gpus=1), "NodeNames": []}, headers=JSON)
    assert (empty.status_code, empty.json()) == (200, [])


def test_each_kind_of_fall_back_to_the_ordinary_route_is_logged_once(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A fast path that stops answering shows in the log, without a line per request: the route still answers."""
    unknown = {"pod": v1_pod(gpus=1), "nodes": ["nope"]}
    with caplog.at_level(logging.INFO, logger="advisor.api.fastpath"):
        for _ in range(3):
            assert client.post("/v1/score", json=unknown, headers=JSON).status_code == 404
            text = client.post("/v1/score", content=json.dumps(unknown), headers={"Content-Type": "text/plain"})
            assert text.status_code != 200
    lines = sorted(r.getMessage() for r in caplog.records)
    assert len(lines) == 2
    assert "/v1/score fell back to the ordinary route (HTTPException)" in lines[0]
    assert "/v1/score fell back to the ordinary route (not a JSON content type)" in lines[1]
