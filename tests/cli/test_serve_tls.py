"""`gpuadvisor advisor serve --tls-cert-file --tls-key-file` serves HTTPS that a client trusting the CA can call (the
TLS option of deploy/profiles/tls), and a bad certificate pair is one `error:` line before anything starts."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from advisor.cli.serve import app as serve_app
from tests.support.binaries import require_binary
from tests.support.net import free_port, wait_until

HOST = "gpuadvisor-advisor.gpuadvisor.svc"


def _openssl(*args: str, cwd: Path) -> None:
    openssl = require_binary("openssl", "openssl makes the test CA and serving certificate")
    subprocess.run([openssl, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and a certificate for the advisor's Service name (as cert-manager issues it), plus a stray key."""
    d = tmp_path_factory.mktemp("tls")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=ca", cwd=d)
    _openssl("req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", f"/CN={HOST}", cwd=d)
    (d / "san.ext").write_text(f"subjectAltName=DNS:{HOST}\n")
    _openssl(
        "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "tls.crt", "-days", "2", "-extfile", "san.ext", cwd=d,
    )  # fmt: skip
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", "other.key", cwd=d)
    return d


def _serve(tmp_path: Path, *tls: str, port: int) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "advisor.cli", "advisor", "serve", "--no-kube", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--db", f"sqlite:///{tmp_path}/store.db", *tls]
    env = {**os.environ, "GPUADVISOR_MODEL_DIR": str(tmp_path / "models")}
    return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_the_advisor_serves_https_to_clients_that_trust_its_ca(certificates: Path, tmp_path: Path) -> None:
    port = free_port()
    proc = _serve(
        tmp_path,
        f"--tls-cert-file={certificates / 'tls.crt'}",
        f"--tls-key-file={certificates / 'tls.key'}",
        port=port,
    )
    trusting = ssl.create_default_context(cafile=certificates / "ca.crt")
    # the address is loopback; the name checked is the Service's, sent as SNI as the collectors do
    url = f"https://127.0.0.1:{port}/healthz"
    extensions = {"sni_hostname": HOST}
    try:
        with httpx.Client(verify=trusting, headers={"Host": HOST}) as client:
            assert wait_until(lambda: client.get(url, extensions=extensions).status_code == 200, 90), proc.poll()
        with httpx.Client(verify=ssl.create_default_context()) as untrusting, pytest.raises(httpx.ConnectError):
            untrusting.get(url, extensions=extensions)
        with httpx.Client() as plain, pytest.raises(httpx.HTTPError):
            plain.get(f"http://127.0.0.1:{port}/healthz")
    finally:
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (("tls.crt", None), "--tls-cert-file and --tls-key-file go together"),
        (("tls.crt", "other.key"), "cannot load"),
        (("missing.crt", "tls.key"), "no such file"),
    ],
)
def test_a_bad_certificate_pair_is_one_error_line(
    certificates: Path, tmp_path: Path, files: tuple[str, str | None], expected: str
) -> None:
    cert, key = files
    tls = [f"--tls-cert-file={certificates / cert}"] + ([f"--tls-key-file={certificates / key}"] if key else [])
    result = CliRunner().invoke(serve_app, ["serve", "--no-kube", "--db", f"sqlite:///{tmp_path}/store.db", *tls])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error:")
    assert expected in line
    assert not (tmp_path / "store.db").exists(), "nothing starts with a bad certificate"
