"""The shared Kubernetes error tree (`collector.kube`) as the profiler meets it and hands it to kopf: a refused call
(403, 404, an invalid request) is given up on, one that may heal (503, 429, a timeout, no answer) is retried; the
client's own error is kept as the cause; a temporary one is retried after the delay the server's Retry-After asks for.

A fake server answers here because the statuses are those of reads (a node list): a real API server can be made to
refuse a write with any status (tests/kube/test_profiler_operator.py does, with an admission webhook answering 503),
but not a read with 400, 408, 422, 429, 500 or 503 at the test's choosing; and "no answer" is no server at all."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from collector.kube import make_api_client
from collector.kube_errors import KubePermanentError, KubeTemporaryError
from profiler.kube import KubeCluster, kopf_error
from tests.support.net import free_port


class _Answering(http.server.BaseHTTPRequestHandler):
    """An API server that answers every request with its server's `status`."""

    def do_GET(self) -> None:
        status: int = self.server.status  # type: ignore[attr-defined]
        body = json.dumps({"kind": "Status", "code": status, "message": "nodes is forbidden"}).encode()
        self.send_response(status)
        retry_after: str | None = getattr(self.server, "retry_after", None)
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def server() -> Iterator[http.server.ThreadingHTTPServer]:
    serving = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answering)
    threading.Thread(target=serving.serve_forever, daemon=True).start()
    yield serving
    serving.shutdown()
    serving.server_close()


@pytest.mark.parametrize(
    ("status", "temporary"),
    [(400, False), (403, False), (404, False), (422, False), (408, True), (429, True), (500, True), (503, True)],
)
def test_an_http_failure_is_temporary_only_when_retrying_can_help(
    server: http.server.ThreadingHTTPServer, status: int, temporary: bool
) -> None:
    server.status = status  # type: ignore[attr-defined]
    cluster = KubeCluster(make_api_client(f"http://127.0.0.1:{server.server_address[1]}"))
    with pytest.raises(KubeTemporaryError if temporary else KubePermanentError) as caught:
        cluster.list_nodes()
    assert caught.value.temporary is temporary
    assert isinstance(caught.value.__cause__, ApiException)
    assert str(caught.value) == f"list nodes: HTTP {status} nodes is forbidden"
    assert isinstance(kopf_error(caught.value), kopf.TemporaryError if temporary else kopf.PermanentError)


def test_no_answer_from_the_api_server_is_retried() -> None:
    cluster = KubeCluster(make_api_client(f"http://127.0.0.1:{free_port()}"))
    with pytest.raises(KubeTemporaryError) as caught:
        cluster.list_nodes()
    assert "list nodes: cannot reach the Kubernetes API" in str(caught.value)
    assert caught.value.__cause__ is not None
    assert isinstance(kopf_error(caught.value), kopf.TemporaryError)


@pytest.mark.parametrize(("retry_after", "delay_seconds"), [("7", 7.0), (None, 60.0), ("soon", 60.0)])
def test_a_temporary_failure_is_retried_when_the_server_asks(
    server: http.server.ThreadingHTTPServer, retry_after: str | None, delay_seconds: float
) -> None:
    """The server's Retry-After (whole seconds, as the API server sends it with a Status' retryAfterSeconds) is the
    delay kopf retries after; without one, or one that is not a number of seconds, kopf's own default (60 s)."""
    server.status = 503  # type: ignore[attr-defined]
    server.retry_after = retry_after  # type: ignore[attr-defined]
    cluster = KubeCluster(make_api_client(f"http://127.0.0.1:{server.server_address[1]}"))
    with pytest.raises(KubeTemporaryError) as caught:
        cluster.list_nodes()
    retried = kopf_error(caught.value)
    assert isinstance(retried, kopf.TemporaryError)
    assert retried.delay == delay_seconds


@pytest.mark.timeout(120)
def test_an_api_server_that_never_answers_fails_the_call_at_its_deadline() -> None:
    """A connection accepted and never answered (an API server gone without closing it): the call fails as a
    temporary error at the cluster's request deadline instead of hanging, which would hold the controller's lock and
    keep a deleted TrialRun's delete handler from ever running. No fake HTTP server: a socket that only listens."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        cluster = KubeCluster(
            make_api_client(f"http://127.0.0.1:{silent.getsockname()[1]}"), request_timeout_seconds=0.5
        )
        # the delete handler's first call (the client tries a few times, each up to the deadline)
        with pytest.raises(KubeTemporaryError) as caught:
            cluster.list_jobs("ml", {"gpuadvisor.io/trialrun": "r"})
        assert "list jobs in ml: cannot reach the Kubernetes API" in str(caught.value)
