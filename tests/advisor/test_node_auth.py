"""Telemetry tied to its node (issue 40): with `GPUADVISOR_TELEMETRY_AUTH=serviceaccount` a collector's own
ServiceAccount token may push its node's snapshot and no other; the token is reviewed through the API server's
TokenReview (here an HTTP stand-in of that endpoint), once per token a minute; and without credentials the body is
not read."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fastapi.testclient import TestClient

from advisor.api import create_app
from advisor.api.node_auth import NodeCredentials, ReviewUnavailableError
from advisor.cluster.kube import NODE_NAME_CLAIM, TokenReviewer
from advisor.settings import AdvisorSettings
from collector.kube import make_api_client
from collector.kube_errors import KubeTemporaryError
from tests.advisor.factories import process, snapshot

SERVICE_ACCOUNT = "system:serviceaccount:gpuadvisor-collector:gpuadvisor-collector"
TOKENS = {"token-of-n1": "n1", "token-of-n2": "n2"}


def _client(tmp_path: Path, reviewed: list[str]) -> TestClient:
    def review(token: str) -> str | None:
        reviewed.append(token)
        return TOKENS.get(token)

    settings = AdvisorSettings(
        db_url=f"sqlite:///{tmp_path}/n.db", no_kube=True, api_token="shared", telemetry_auth="serviceaccount"
    )
    return TestClient(create_app(settings, review_token=review))


def _push(client: TestClient, token: str, body: dict[str, Any]) -> Any:
    return client.post("/v1/telemetry", json=body, headers={"Authorization": f"Bearer {token}"})


def test_a_collector_pushes_its_own_node_and_no_other(tmp_path: Path) -> None:
    reviewed: list[str] = []
    with _client(tmp_path, reviewed) as client:
        assert _push(client, "token-of-n1", snapshot("n1")).status_code == 202
        foreign = _push(client, "token-of-n1", snapshot("n2", busy={0: [process("evil")]}))
        assert foreign.status_code == 403
        assert foreign.json()["detail"] == "node: this credential pushes for node 'n1' only, not 'n2'"
        assert client.get("/v1/nodes/n2").status_code == 404  # nothing of n2 was taken
        assert _push(client, "token-of-n2", snapshot("n2")).status_code == 202
        assert client.get("/v1/nodes/n2").json()["free_gpus"] == 8
        metrics = client.get("/metrics").text
    assert 'gpuadvisor_advisor_snapshots_total{result="foreign_node"} 1.0' in metrics
    assert reviewed == ["token-of-n1", "token-of-n2"]  # once per token: the rest from the cache


def test_the_shared_token_and_no_token_are_refused_before_the_body_is_read(tmp_path: Path) -> None:
    with _client(tmp_path, []) as client:
        shared = _push(client, "shared", snapshot("n1"))
        assert shared.status_code == 401
        assert "ServiceAccount" in shared.json()["detail"]
        assert shared.headers["connection"] == "close"
        bare = client.post("/v1/telemetry", content=b"{not json", headers={"Content-Type": "application/json"})
        assert bare.status_code == 401  # not a 422: the body was never parsed


@pytest.mark.anyio
async def test_reviews_are_cached_for_their_time_and_bounded_in_flight() -> None:
    now = [0.0]
    calls: list[str] = []

    def review(token: str) -> str | None:
        calls.append(token)
        return "n1"

    credentials = NodeCredentials(review, ttl_seconds=60, clock=lambda: now[0])
    assert await credentials.node_of("t") == "n1"
    now[0] = 59
    assert await credentials.node_of("t") == "n1"
    now[0] = 61
    assert await credentials.node_of("t") == "n1"
    assert calls == ["t", "t"]

    def down(token: str) -> str | None:
        raise KubeTemporaryError("TokenReview: cannot reach the Kubernetes API")

    with pytest.raises(ReviewUnavailableError, match="cannot reach"):
        await NodeCredentials(down).node_of("t")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _TokenReviews(BaseHTTPRequestHandler):
    """The API server's TokenReview endpoint as it answers: the spec echoed, the status of the token."""

    users: ClassVar[dict[str, dict[str, Any]]] = {
        "collector": {"username": SERVICE_ACCOUNT, "extra": {NODE_NAME_CLAIM: ["n1"]}},
        "other-sa": {"username": "system:serviceaccount:ml:default", "extra": {NODE_NAME_CLAIM: ["n1"]}},
        "no-node": {"username": SERVICE_ACCOUNT},
    }

    def do_POST(self) -> None:
        assert self.path == "/apis/authentication.k8s.io/v1/tokenreviews"
        spec = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["spec"]
        assert spec["audiences"] == ["gpuadvisor"]
        user = self.users.get(spec["token"])
        status = {"authenticated": True, "user": user} if user else {"authenticated": False}
        body = json.dumps(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec, "status": status}
        )
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_the_token_review_names_the_node_of_a_collectors_token_only() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TokenReviews)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        api = make_api_client(f"http://127.0.0.1:{server.server_address[1]}")
        reviewer = TokenReviewer(api, service_account=SERVICE_ACCOUNT, audience="gpuadvisor")
        found = {t: reviewer.node_of(t) for t in ("collector", "other-sa", "no-node", "forged")}
    finally:
        server.shutdown()
    assert found == {"collector": "n1", "other-sa": None, "no-node": None, "forged": None}
