"""A validating admission webhook served by the test itself, so that the real API server refuses a request with a
status of the test's choosing (a 503 the client should retry, a 403 it should not).

The API server passes a webhook's denial on to the client as it is (k8s.io/apiserver, webhook/errors.ToStatusErr:
the `status` of the AdmissionReview response, its code kept when it is 400 or more, its message prefixed with
`admission webhook "<name>" denied the request:`, and a `details.retryAfterSeconds` sent as the Retry-After header
by the response writer). The webhook is served over HTTPS on loopback with a self-signed certificate made with the
openssl CLI; its configuration names exactly one label and namespace, fails open (`failurePolicy: Ignore`) and is
deleted on exit, so other tests on the session's control plane never meet it.
"""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.binaries import require_binary
from tests.support.kube import KubeApi, KubeApiError
from tests.support.net import wait_until

CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
Obj = dict[str, Any]


@dataclass
class Refusals:
    """What the webhook answers: every creation denied with `code` and `message` (and `retry_after_seconds` when
    set) until `lift()`, then allowed. Dry-run requests are allowed and only counted, so a test can see the webhook is
    in force without being refused itself."""

    code: int
    message: str
    retry_after_seconds: int = 0
    refused: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)
    dry_runs: int = 0
    _lifted: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def lift(self) -> None:
        with self._lock:
            self._lifted = True

    def answer(self, request: Mapping[str, Any]) -> Obj:
        name = str((request.get("object") or {}).get("metadata", {}).get("name", ""))
        with self._lock:
            if request.get("dryRun"):
                self.dry_runs += 1
                return {"uid": request["uid"], "allowed": True}
            if self._lifted:
                self.allowed.append(name)
                return {"uid": request["uid"], "allowed": True}
            self.refused.append(name)
        status: Obj = {"code": self.code, "message": self.message}
        if self.retry_after_seconds:
            status["details"] = {"retryAfterSeconds": self.retry_after_seconds}
        return {"uid": request["uid"], "allowed": False, "status": status}


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        refusals: Refusals = self.server.refusals  # type: ignore[attr-defined]
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": refusals.answer(review["request"]),
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def _certificate(workdir: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA: the webhook configuration's caBundle) and its key."""
    openssl = require_binary("openssl", "the test webhook's certificate is made with openssl")
    cert, key = workdir / "webhook.crt", workdir / "webhook.key"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@contextmanager
def refusing_webhook(
    api: KubeApi, workdir: Path, name: str, *, namespace: str, labels: Mapping[str, str], refusals: Refusals
) -> Iterator[Refusals]:
    """Jobs created in `namespace` with `labels` go past `refusals` (a ValidatingWebhookConfiguration `name`) until
    the block ends; it is in force (a dry-run Job seen by it) when the block starts."""
    cert, key = _certificate(workdir)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.refusals = refusals  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    configuration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": f"{name}.tests.gpuadvisor.io",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{server.server_address[1]}/validate",
                    "caBundle": base64.b64encode(cert.read_bytes()).decode(),
                },
                "rules": [
                    {
                        "apiGroups": ["batch"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["jobs"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "objectSelector": {"matchLabels": dict(labels)},
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 2,
            }
        ],
    }
    api.create(CONFIGURATIONS, configuration)
    try:
        probe = _job(f"{name}-probe", labels)

        def in_force() -> bool:
            api.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", probe, dryRun="All")
            return refusals.dry_runs > 0

        # the API server picks the configuration up from its informer, a moment after it is created
        if not wait_until(in_force, timeout_s=60, interval_s=0.2):
            raise AssertionError(f"webhook {name} not called by the API server within 60 s")
        yield refusals
    finally:
        try:
            api.delete(f"{CONFIGURATIONS}/{name}")
        except KubeApiError as e:
            if e.status_code != 404:
                raise
        server.shutdown()
        server.server_close()


def _job(name: str, labels: Mapping[str, str]) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "probe", "image": "busybox"}]},
            }
        },
    }
