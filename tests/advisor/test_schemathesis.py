"""Property test over the advisor's OpenAPI schema: whatever a client sends, the answer is never a 5xx.

503 is exempt: it is the deliberate "a backend this instance needs is unavailable" answer (no Kubernetes API for
`/v1/trialruns` under `--no-kube`, a store without its schema for `/readyz`), not a failure to handle the input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from advisor.api import create_app
from advisor.settings import AdvisorSettings
from profiler.store import db
from tests.advisor.factories import process, snapshot, two_socket_links

EXAMPLES_PER_OPERATION = 25
UNAVAILABLE = 503


def test_no_operation_answers_a_5xx(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/fuzz.db"
    engine = db.make_engine(url)
    db.upgrade(engine)
    engine.dispose()
    app = create_app(AdvisorSettings(db_url=url, no_kube=True))
    client = TestClient(app)
    for raw in (
        snapshot("a"),
        snapshot("b", busy={0: [process("x")], 1: [process("y"), process("z")]}, links=two_socket_links()),
    ):
        assert client.post("/v1/telemetry", json=raw).status_code == 202
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {"POST /extender/prioritize", "POST /v1/telemetry", "POST /v1/score"} <= {op.label for op in operations}
    failures: list[str] = []
    for operation in operations:
        _fuzz(operation, failures)
    assert not failures, "\n".join(failures[:10])


def _fuzz(operation: Any, failures: list[str]) -> None:
    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck))
    def check(case: Any) -> None:
        response = case.call()
        if response.status_code >= 500 and response.status_code != UNAVAILABLE:
            failures.append(f"{operation.label}: {response.status_code} for {case.body!r:.300}")

    check()
