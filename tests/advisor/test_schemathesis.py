"""Property tests over the advisor's OpenAPI schema: whatever a client sends, the answer is never a 5xx, its status
is one the operation documents, and every error body has its documented shape (422: a list of `{loc, msg, type}`; any
other error: `{"detail": "..."}`).

Two passes over every operation: schemathesis' own generated requests, and for every operation with a body, generated
bodies with one value turned into a non-finite number (`NaN`, `Infinity`, `1e400`), a string holding invalid UTF-8 or
an unpaired surrogate escape (`"\\udcff"`) — JSON that a generator from the schema never produces and that FastAPI's
defaults answered with a 500. Those must be a 422 naming that value's location.

503 is exempt: it is the deliberate "a backend this instance needs is unavailable" answer (no Kubernetes API for
`/v1/trialruns` under `--no-kube`, a store without its schema for `/readyz`), not a failure to handle the input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.api import create_app
from advisor.settings import AdvisorSettings
from profiler.store import db
from tests.advisor.factories import process, snapshot, two_socket_links

EXAMPLES_PER_OPERATION = 25
MUTATED_EXAMPLES_PER_OPERATION = 12
UNAVAILABLE = 503
TOKEN = "fuzz-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NON_FINITE = ("NaN", "Infinity", "-Infinity", "1e400")
MARK = "\u2603mark\u2603"  # a string no generated body contains, replaced by the bad bytes after serialising


def _app(tmp_path: Path) -> tuple[Any, TestClient]:
    url = f"sqlite:///{tmp_path}/fuzz.db"
    engine = db.make_engine(url)
    db.upgrade(engine)
    engine.dispose()
    app = create_app(AdvisorSettings(db_url=url, no_kube=True, api_token=TOKEN))
    client = TestClient(app)
    for raw in (
        snapshot("a"),
        snapshot("b", busy={0: [process("x")], 1: [process("y"), process("z")]}, links=two_socket_links()),
    ):
        assert client.post("/v1/telemetry", json=raw, headers=AUTH).status_code == 202
    return app, client


def _operations(app: Any) -> list[Any]:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {"POST /extender/prioritize", "POST /v1/telemetry", "POST /v1/score"} <= {op.label for op in operations}
    return operations


def _shape_problem(response: httpx.Response) -> str | None:
    """Why an error response does not have its documented shape (None: it does, or it is no error)."""
    if response.status_code < 400:
        return None
    try:
        body = response.json()
    except ValueError:
        return "not JSON"
    detail = body.get("detail") if isinstance(body, dict) else None
    if response.status_code == 422:
        if not isinstance(detail, list) or not detail:
            return f"422 detail is not a list: {detail!r:.200}"
        if any(not isinstance(e, dict) or set(e) != {"loc", "msg", "type"} for e in detail):
            return f"422 entries are not {{loc, msg, type}}: {detail!r:.200}"
        return None
    if not isinstance(detail, str) or "\n" in detail:
        return f"detail is not one line: {detail!r:.200}"
    return None


def test_no_operation_answers_a_5xx(tmp_path: Path) -> None:
    app, _ = _app(tmp_path)
    failures: list[str] = []
    for operation in _operations(app):
        _fuzz(operation, failures)
    assert not failures, "\n".join(failures[:10])


def _fuzz(operation: Any, failures: list[str]) -> None:
    documented = set(operation.definition.raw["responses"])

    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck))
    def check(case: Any) -> None:
        response = case.call()
        if response.status_code >= 500 and response.status_code != UNAVAILABLE:
            failures.append(f"{operation.label}: {response.status_code} for {case.body!r:.300}")
        if str(response.status_code) not in documented:
            failures.append(f"{operation.label}: {response.status_code} is not among its documented {documented}")
        problem = _shape_problem(response)
        if problem is not None and response.status_code != UNAVAILABLE:
            failures.append(f"{operation.label}: {response.status_code} {problem}")

    check()


# --------------------------------------------------------------------------------------------------------------------
# Non-finite numbers and invalid UTF-8


def _places(value: Any, loc: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Every location in a JSON document whose value can be replaced (the document itself included)."""
    places = [loc]
    if isinstance(value, dict):
        for key, child in value.items():
            places += _places(child, (*loc, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            places += _places(child, (*loc, i))
    return places


def _replace(value: Any, loc: tuple[str | int, ...], new: Any) -> Any:
    if not loc:
        return new
    head, rest = loc[0], loc[1:]
    if isinstance(value, dict):
        return {k: _replace(v, rest, new) if k == head else v for k, v in value.items()}
    return [_replace(v, rest, new) if i == head else v for i, v in enumerate(value)]


def _mutated(body: Any, data: st.DataObject) -> tuple[bytes, list[str | int]]:
    """`body` with one place (or a new key) made non-finite, invalid UTF-8 or an unpaired surrogate escape (valid
    JSON that no UTF-8 encoder can write back), serialised; and where that is."""
    body = body if isinstance(body, dict) and body else {"x": 1}
    places = [p for p in _places(body) if p]
    loc = data.draw(st.sampled_from(places))
    kind = data.draw(st.sampled_from(["number", "utf8", "surrogate"]))
    if kind == "number":
        number = data.draw(st.sampled_from(NON_FINITE))
        raw = json.dumps(_replace(body, loc, MARK)).replace(json.dumps(MARK), number)
        return raw.encode(), ["body", *loc]
    if kind == "surrogate":
        return json.dumps(_replace(body, loc, "ok\udcff")).encode(), ["body", *loc]
    raw = json.dumps(_replace(body, loc, f"ok{MARK}"), ensure_ascii=False)
    return raw.encode().replace(MARK.encode(), b"\xff\xfe"), ["body", *loc]


def test_non_finite_numbers_and_invalid_utf8_are_a_422_naming_the_place_on_every_operation(tmp_path: Path) -> None:
    app, client = _app(tmp_path)
    failures: list[str] = []
    posts = [op for op in _operations(app) if op.method.upper() == "POST"]
    assert len(posts) >= 8
    for operation in posts:
        _fuzz_bad_values(operation, client, failures)
    assert not failures, "\n".join(failures[:10])


def _volcano_reads(loc: list[str | int]) -> bool:
    """Whether the Volcano routes read the place `loc` of their body: the task's pod, the node names and what holds
    them."""
    if loc[1:3] == ["task", "Pod"] or loc[1:] in (["task"], ["nodes"], ["node"], ["node", "Name"]):
        return True
    return loc[1:2] == ["nodes"] and loc[3:] in ([], ["Name"])


def _fuzz_bad_values(operation: Any, client: TestClient, failures: list[str]) -> None:
    @given(case=operation.as_strategy(), data=st.data())
    @settings(max_examples=MUTATED_EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck))
    def check(case: Any, data: st.DataObject) -> None:
        raw, loc = _mutated(case.body if isinstance(case.body, dict) else None, data)
        headers = {**AUTH, "Content-Type": "application/json"}
        response = client.post(case.formatted_path, content=raw, headers=headers)
        where = f"{operation.label} with {raw[:200]!r}"
        if response.status_code == 202 and operation.label == "POST /v1/telemetry" and b"1e400" in raw:
            return  # in a field the snapshot schema ignores, an overflowing number is never read (telemetry.py)
        if response.status_code == 200 and operation.label.startswith("POST /volcano/") and not _volcano_reads(loc):
            return  # a Volcano body is skipped unread but for the task's pod and the node names (volcano.py)
        if response.status_code != 422:
            failures.append(f"{where}: {response.status_code}, not 422")
            return
        problem = _shape_problem(response)
        if problem is not None:
            failures.append(f"{where}: {problem}")
            return
        found = [error["loc"] for error in response.json()["detail"]]
        if loc not in found:  # among them: a snapshot may also have, say, a GPU index twice
            failures.append(f"{where}: locs {found}, expected {loc} among them")

    check()
