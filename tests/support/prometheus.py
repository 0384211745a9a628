"""A private Prometheus server and promtool for the tests: temp config on a loopback port, queried over the HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.binaries import require_binary
from tests.support.net import free_port, wait_until


class PrometheusQueryError(RuntimeError):
    """The server rejected a query (bad PromQL, unknown function, ...)."""


@dataclass(frozen=True)
class PrometheusServer:
    url: str
    log_path: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query `expr` now; the `result` list of the API reply (one entry per series)."""
        with urllib.request.urlopen(
            f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=10
        ) as r:
            reply: dict[str, Any] = json.load(r)
        if reply.get("status") != "success":
            raise PrometheusQueryError(f"{expr!r}: {reply.get('error')}")
        data: dict[str, Any] = reply["data"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def targets_up(self) -> bool:
        """Every configured scrape target has been scraped successfully at least once."""
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=10) as r:
            active = json.load(r)["data"]["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """Run promtool with `args`; the caller asserts on `returncode` and the output."""
    binary = require_binary("promtool", "promtool checks and unit-tests the Prometheus rules")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60, check=False)


@contextmanager
def prometheus_server(
    targets: Mapping[str, Sequence[str]],
    rule_files: Sequence[Path] = (),
    interval_s: float = 1.0,
    ready_timeout_s: float = 30.0,
) -> Iterator[PrometheusServer]:
    """Start Prometheus scraping `targets` (job -> host:port list), evaluating `rule_files` every `interval_s`."""
    binary = require_binary("prometheus", "the dashboard queries are checked against a real Prometheus")
    root = Path(tempfile.mkdtemp(prefix="gpuadvisor-prom-"))
    interval = f"{int(interval_s * 1000)}ms"
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": [str(p.resolve()) for p in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": list(addresses)}]} for job, addresses in targets.items()
        ],
    }
    (root / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log_path = root / "prometheus.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = PrometheusServer(url=f"http://127.0.0.1:{port}", log_path=log_path)
    try:

        def ready() -> bool:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as r:
                return r.status == 200

        if not wait_until(ready, ready_timeout_s, interval_s=0.2):
            raise RuntimeError(f"prometheus did not become ready: {log_path.read_text()[-2000:]}")
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)
