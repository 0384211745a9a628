"""gpuadvisor-scheduler (kube-scheduler with the GPUAdvisor plugin, k8s/cmd/gpuadvisor-scheduler) started against a
control plane of tests/support/kube.py with the profile shipped in deploy/plugin/: for the `plugin` tests and
bench/scheduler_throughput.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.binaries import in_ci
from tests.support.kube import ADMIN_TOKEN, ControlPlane, Process
from tests.support.net import free_port

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_CONFIG = ROOT / "deploy" / "plugin" / "scheduler-config.yaml"
PLUGIN_BINARY = "gpuadvisor-scheduler"
PLUGIN_NAME = "GPUAdvisor"

Obj = dict[str, Any]


def require_plugin_binary(bin_dir: Path) -> Path:
    """The gpuadvisor-scheduler built beside the control plane (k8s/build.sh); skips, or fails under CI, without."""
    binary = bin_dir / PLUGIN_BINARY
    if not os.access(binary, os.X_OK):
        message = f"{binary} not built: run `make kube-bin`"
        if in_ci():
            pytest.fail(message + " (CI=true: required)")
        pytest.skip(message)
    return binary


def plugin_scheduler_config(kubeconfig: Path, advisor_url: str, scheduler_name: str, **args: Any) -> Obj:
    """The profile of deploy/plugin/ as shipped, but for where the API server and the advisor are, the profile's
    name, no leader election, and any plugin args given."""
    config: Obj = yaml.safe_load(PLUGIN_CONFIG.read_text())
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    config["leaderElection"] = {"leaderElect": False}
    (profile,) = config["profiles"]
    profile["schedulerName"] = scheduler_name
    (plugin,) = [c for c in profile["pluginConfig"] if c["name"] == PLUGIN_NAME]
    plugin["args"] = {**plugin["args"], "advisorURL": advisor_url, **args}
    return config


@contextmanager
def plugin_scheduler(
    plane: ControlPlane, advisor_url: str, scheduler_name: str, workdir: Path, **args: Any
) -> Iterator[SchedulerProcess]:
    """gpuadvisor-scheduler with the shipped plugin profile under `scheduler_name`, asking the advisor at
    `advisor_url`."""
    binary = require_plugin_binary(plane.bin_dir)
    config = workdir / f"{scheduler_name}.yaml"
    config.write_text(yaml.safe_dump(plugin_scheduler_config(plane.kubeconfig, advisor_url, scheduler_name, **args)))
    port = free_port()
    process = Process(
        f"gpuadvisor-scheduler ({scheduler_name})",
        [
            str(binary),
            f"--config={config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--authentication-kubeconfig={plane.kubeconfig}",
            f"--authorization-kubeconfig={plane.kubeconfig}",
        ],
        workdir / f"{scheduler_name}.log",
    ).start()
    started = SchedulerProcess(process, f"https://127.0.0.1:{port}")
    try:
        process.wait_ready(lambda: httpx.get(f"{started.url}/healthz", verify=False).status_code == 200)
        yield started
    finally:
        process.stop()


class SchedulerProcess:
    """A running scheduler and its secure endpoint (/metrics needs a token the API server authorises)."""

    def __init__(self, process: Process, url: str) -> None:
        self.process, self.url = process, url

    def metrics_text(self) -> str:
        """The scheduler's /metrics, as Prometheus text."""
        return httpx.get(
            f"{self.url}/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, verify=False, timeout=10
        ).text

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels` on the scheduler's /metrics (0 if none)."""
        total = 0.0
        for line in self.metrics_text().splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total
