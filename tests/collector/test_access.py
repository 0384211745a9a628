"""GPU-access detection: a node that has GPUs where the collector's NVML is absent or sees none (issue 20).

The end-to-end case runs `gpuadvisor collector run` as the DaemonSet does (long-running, Kubernetes API from a
kubeconfig pointing at kmock) with no NVML library in reach, and looks where an operator would: /healthz, /metrics
and the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import kmock
import pytest
from prometheus_client import CollectorRegistry

from collector.access import GpuAccessMonitor, NoGpuBackend, gpu_access_problem, node_gpu_evidence
from collector.agent import CollectorAgent
from collector.backend import NodeReading
from collector.exporter import MetricsServer, SnapshotCollector
from collector.kube import NodeReader, make_api_client
from collector.snapshot import GpuSnapshot, NodeSnapshot
from collector.stats import CollectorStats
from tests.support.net import free_port

ONE_GPU = NodeReading(driver_version="550", gpus=(GpuSnapshot(index=0, uuid="GPU-0"),))
NO_GPU = NodeReading(driver_version="550", gpus=())


@pytest.mark.parametrize(
    ("node", "evidence"),
    [
        ({"metadata": {"labels": {"nvidia.com/gpu.present": "true"}}}, "label nvidia.com/gpu.present=true"),
        ({"metadata": {"labels": {"nvidia.com/gpu.count": "8"}}}, "label nvidia.com/gpu.count=8"),
        ({"metadata": {}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}}, "allocatable nvidia.com/gpu=4"),
        ({"metadata": {"labels": {"nvidia.com/gpu.present": "false"}}, "status": {"allocatable": {}}}, None),
        (
            {"metadata": {"labels": {"nvidia.com/gpu.count": "0"}}, "status": {"allocatable": {"nvidia.com/gpu": "0"}}},
            None,
        ),
        ({"metadata": {"labels": {"nvidia.com/gpu.count": "many"}}}, None),
        ({}, None),
    ],
)
def test_which_nodes_have_gpus(node: Mapping[str, Any], evidence: str | None) -> None:
    assert node_gpu_evidence(node) == evidence


def test_problems() -> None:
    absent = gpu_access_problem("label nvidia.com/gpu.present=true", 0, "NVML library not found: libnvidia-ml.so.1")
    assert absent is not None
    assert absent.reason == "nvml_unavailable"
    assert "nvidia.com/gpu.present=true" in absent.message
    assert "NVML library not found" in absent.message
    assert "docs/install.md#gpu-access" in absent.message
    unseen = gpu_access_problem("allocatable nvidia.com/gpu=4", 0, None)
    assert unseen is not None
    assert unseen.reason == "no_gpu_visible"
    assert gpu_access_problem("allocatable nvidia.com/gpu=4", 4, None) is None
    assert gpu_access_problem(None, 0, None) is None  # a node without GPUs: nothing to see
    assert gpu_access_problem(None, 0, "NVML library not found") is not None  # the collector cannot work at all


class _Recorder:
    def __init__(self) -> None:
        self.snapshots: list[NodeSnapshot] = []

    def submit(self, snapshot: NodeSnapshot) -> None:
        self.snapshots.append(snapshot)


class _Backend:
    def __init__(self, reading: NodeReading) -> None:
        self.reading = reading

    def read(self) -> NodeReading:
        return self.reading

    def close(self) -> None:
        """Nothing to release."""


def test_a_node_whose_gpus_nvml_cannot_see_is_reported_and_not_pushed(caplog: pytest.LogCaptureFixture) -> None:
    answers: list[Mapping[str, Any] | None] = [None, {"metadata": {"labels": {"nvidia.com/gpu.present": "true"}}}]
    stats = CollectorStats()
    now = [0.0]
    monitor = GpuAccessMonitor(lambda: answers.pop(0), stats=stats, recheck_seconds=300, clock=lambda: now[0])
    backend = _Backend(NO_GPU)
    sink = _Recorder()
    agent = CollectorAgent(backend=backend, node="n1", sinks=[sink], stats=stats, access=monitor)
    with caplog.at_level(logging.INFO, logger="collector.access"):
        agent.run_cycle()  # the API did not answer: nothing known, the (empty) snapshot goes out
        now[0] = 10.0
        agent.run_cycle()  # not asked again this soon
        assert len(sink.snapshots) == 2
        assert len(answers) == 1
        now[0] = 40.0
        for _ in range(3):
            agent.run_cycle()
        assert len(sink.snapshots) == 2  # the node has GPUs, NVML sees none: an empty snapshot would mislead
        assert answers == []  # read once, then cached for recheck_seconds
        backend.reading = ONE_GPU  # access granted
        agent.run_cycle()
    assert len(sink.snapshots) == 3
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1  # one line when it appears, not one per cycle
    assert "NVML sees no GPU" in errors[0]
    assert any("GPU access restored" in r.getMessage() for r in caplog.records)
    assert stats.view().errors == {"gpu_access": 3}
    assert stats.view().gpu_access_reason is None


def test_healthz_and_metric_name_the_reason() -> None:
    stats = CollectorStats()
    monitor = GpuAccessMonitor(
        lambda: {"status": {"allocatable": {"nvidia.com/gpu": "8"}}},
        stats=stats,
        nvml_error="NVML library not found: libnvidia-ml.so.1",
    )
    agent = CollectorAgent(backend=NoGpuBackend(), node="n1", stats=stats, access=monitor)
    assert agent.run_cycle() is not None  # the cycle itself works: it is the access that is missing
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: agent.latest, stats, "n1"))
    missing = "gpuadvisor_collector_gpu_access_missing"
    assert registry.get_sample_value(missing, {"node": "n1", "reason": "nvml_unavailable"}) == 1
    assert registry.get_sample_value("gpuadvisor_collector_errors_total", {"node": "n1", "kind": "gpu_access"}) == 1
    server = MetricsServer(registry, stats, host="127.0.0.1", port=0)
    server.start()
    try:
        health = httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5)
        live = httpx.get(f"http://127.0.0.1:{server.port}/livez", timeout=5)
    finally:
        server.stop()
    assert live.status_code == 200  # restarting the pod would not give it GPU access
    assert health.status_code == 503
    assert "allocatable nvidia.com/gpu=8" in health.text
    assert "NVML library not found" in health.text


@pytest.mark.asyncio
async def test_node_reader_reads_the_node_and_counts_an_unreachable_api(kmock: kmock.KubernetesEmulator) -> None:
    kmock.objects["v1/nodes", None, "n1"] = {
        "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.present": "true"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }
    stats = CollectorStats()
    node = await asyncio.to_thread(NodeReader(make_api_client(str(kmock.url).rstrip("/")), "n1", stats=stats))
    assert node is not None
    assert node_gpu_evidence(node) == "label nvidia.com/gpu.present=true"
    unreachable = NodeReader(make_api_client(f"http://127.0.0.1:{free_port()}"), "n1", stats=stats)
    assert await asyncio.to_thread(unreachable) is None
    assert stats.view().errors == {"kube": 1}


@pytest.mark.asyncio
async def test_daemonset_without_nvml_keeps_running_and_says_why(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    kmock.objects["v1/nodes", None, "n1"] = {"metadata": {"name": "n1", "labels": {"nvidia.com/gpu.present": "true"}}}
    kmock.objects["v1/pods", "ml", "elsewhere"] = {"metadata": {"name": "elsewhere", "uid": "u"}, "spec": {}}
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "k", "cluster": {"server": str(kmock.url).rstrip("/")}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    env = {
        **os.environ,
        "GPUADVISOR_NVML_LIBRARY": str(tmp_path / "absent" / "libnvidia-ml.so.1"),  # the runtime injected nothing
        "KUBECONFIG": str(kubeconfig),
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    port = free_port()
    args = [
        "collector",
        "run",
        "--node",
        "n1",
        "--port",
        str(port),
        "--interval-s",
        "0.2",
        "--proc-root",
        str(tmp_path),
    ]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "advisor.cli", *args, env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        health: httpx.Response | None = None
        async with httpx.AsyncClient(timeout=2) as client:
            for _ in range(200):
                await asyncio.sleep(0.1)
                try:
                    health = await client.get(f"http://127.0.0.1:{port}/healthz")
                    if health.status_code == 503 and "no GPU access" in health.text:
                        break
                except httpx.TransportError:
                    continue
            metrics = await client.get(f"http://127.0.0.1:{port}/metrics")
        assert process.returncode is None, "the collector must keep running without NVML"
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr_bytes = await asyncio.wait_for(process.communicate(), timeout=30)
    assert health is not None
    assert health.status_code == 503
    assert "label nvidia.com/gpu.present=true" in health.text
    assert "NVML is unavailable" in health.text
    assert re.search(r'^gpuadvisor_collector_gpu_access_missing\{node="n1",reason="nvml_unavailable"\} 1\.0$',
                     metrics.text, re.M)  # fmt: skip
    stderr = stderr_bytes.decode()
    assert stderr.count("no GPU access") == 1, stderr
    assert "Traceback" not in stderr, stderr
    assert process.returncode == 0


def test_a_collector_that_sees_gpus_never_reads_its_node() -> None:
    def read_node() -> Mapping[str, Any] | None:
        raise AssertionError("the node object is not needed while NVML sees GPUs")

    stats = CollectorStats()
    agent = CollectorAgent(
        backend=_Backend(ONE_GPU), node="n1", stats=stats, access=GpuAccessMonitor(read_node, stats=stats)
    )
    assert agent.run_cycle() is not None
    assert stats.view().errors == {}
