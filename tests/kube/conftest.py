"""The session's control plane (tests/support/kube.py), the advisor it consults and the kube-scheduler that runs
the profile shipped in deploy/scheduler/ with its extender pointed at that advisor."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.kube import ControlPlane, KubeApi, Process, control_plane, kube_bin_dir, kube_scheduler
from tests.support.net import free_port

ADVISOR_TOKEN = "kube-suite-advisor-token"
SCHEDULER_NAME = "gpuadvisor-scheduler"


@dataclass(frozen=True)
class Advisor:
    """`gpuadvisor advisor serve` watching the control plane (pods, nodes, pending pods) through its kubeconfig."""

    url: str
    token: str
    process: Process

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=30)


@pytest.fixture(scope="session")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    bin_dir = kube_bin_dir()
    with control_plane(bin_dir, tmp_path_factory.mktemp("kube")) as started:
        yield started


@pytest.fixture(scope="session")
def api(plane: ControlPlane) -> KubeApi:
    return plane.api


def start_advisor(plane: ControlPlane, workdir: Path, *extra_env: tuple[str, str]) -> Advisor:
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUADVISOR_") and k != "KUBECONFIG"}
    env = {**clean, "KUBECONFIG": str(plane.kubeconfig), "GPUADVISOR_API_TOKEN": ADVISOR_TOKEN, **dict(extra_env)}
    argv = ["advisor", "serve", "--host", "127.0.0.1", "--port", str(port), "--db", f"sqlite:///{workdir}/a.db"]
    process = Process("advisor", [sys.executable, "-m", "advisor.cli", *argv], workdir / "advisor.log", env).start()
    url = f"http://127.0.0.1:{port}"
    process.wait_ready(lambda: httpx.get(f"{url}/healthz", timeout=2).status_code == 200)
    return Advisor(url, ADVISOR_TOKEN, process)


@pytest.fixture(scope="session")
def advisor(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Advisor]:
    started = start_advisor(plane, tmp_path_factory.mktemp("advisor"))
    try:
        yield started
    finally:
        started.process.stop()


@pytest.fixture(scope="session")
def scheduler(plane: ControlPlane, advisor: Advisor, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The scheduler's name (pods set `spec.schedulerName` to it)."""
    with kube_scheduler(plane, f"{advisor.url}/extender", SCHEDULER_NAME, tmp_path_factory.mktemp("scheduler")):
        yield SCHEDULER_NAME
