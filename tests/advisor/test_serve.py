"""`gpuadvisor advisor serve --no-kube` as a user runs it: fed NodeSnapshots, asked by the scheduler."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.advisor.factories import process, snapshot, two_socket_links, v1_pod
from tests.support.net import free_port, wait_until

NODES = 500
TOKEN = "serve-token"


@contextmanager
def serving(tmp_path: Path, env: dict[str, str]) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    argv = ["advisor", "serve", "--host", "127.0.0.1", "--port", str(port), "--db", f"sqlite:///{tmp_path}/s.db"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUADVISOR_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "advisor.cli", *argv, "--no-kube"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**clean, **env},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: httpx.get(f"{base}/healthz").status_code == 200, timeout_s=60)
        yield base, proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def advisor_url(tmp_path: Path) -> Iterator[str]:
    with serving(tmp_path, {"GPUADVISOR_API_TOKEN": TOKEN}) as (base, _):
        yield base


def test_serve_without_a_token_refuses_writes_and_says_so_at_start_up(tmp_path: Path) -> None:
    with serving(tmp_path, {}) as (base, proc):
        refused = httpx.post(f"{base}/v1/telemetry", json=snapshot("n1"))
        assert refused.status_code == 401
        assert "GPUADVISOR_API_TOKEN" in refused.json()["detail"]
    assert proc.stdout is not None
    assert "write routes answer 401: no GPUADVISOR_API_TOKEN is configured" in proc.stdout.read().decode()


def test_serve_no_kube_fed_500_nodes_answers_a_host_priority_list(advisor_url: str) -> None:
    names = [f"gpu-{i:03d}" for i in range(NODES)]
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=advisor_url, timeout=30) as client:
        for i, name in enumerate(names):
            if i == 7:  # the one node with 7 of 8 GPUs taken: where a 1-GPU pod fragments least
                raw = snapshot(name, busy={g: [process(f"{name}-{g}")] for g in range(7)})
            elif i % 2:
                raw = snapshot(name, links=two_socket_links(), busy={0: [process(f"{name}-0")]})
            else:
                raw = snapshot(name)
            assert client.post("/v1/telemetry", json=raw, headers=auth).status_code == 202
        response = client.post("/extender/prioritize", json={"Pod": v1_pod(gpus=1), "Nodes": None, "NodeNames": names})
        assert response.status_code == 200
        hosts = response.json()
        assert [h["Host"] for h in hosts] == names
        assert all(type(h["Score"]) is int and 0 <= h["Score"] <= 10 for h in hosts)
        best = max(hosts, key=lambda h: h["Score"])
        assert best["Host"] == "gpu-007"
        assert best["Score"] > hosts[0]["Score"]
        listed = client.get("/v1/nodes").json()["nodes"]
        assert len(listed) == NODES
        metrics = client.get("/metrics").text
        route = 'method="POST",route="/extender/prioritize",status="200"'
        assert f"gpuadvisor_advisor_request_duration_seconds_count{{{route}}} 1.0" in metrics
