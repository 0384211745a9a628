"""`gpuadvisor collector run` as a user runs it (DESIGN §2/§3 "done when": stand-in NVML + fixture /proc)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import kmock
import pytest
from typer.testing import CliRunner

from advisor.cli.main import app
from collector.snapshot import NodeSnapshot, PodRef
from tests.cli.test_cli_smoke import gpuadvisor
from tests.cli.test_errors import assert_one_error_line
from tests.collector.conftest import ConfigureNvml, write_proc
from tests.support.fake_nvml import DRIVER_NOT_LOADED, FakeGpu, FakeNvmlConfig, FakeProcess, FakeSample

GIB = 1024**3
UID_A = "11111111-2222-4333-8444-555555555555"
UID_B = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
CID = "cd" * 32
CONFIG = FakeNvmlConfig(
    driver_version="550.54.15",
    gpus=[
        FakeGpu(
            uuid="GPU-aaaa",
            pci_bus_id="00000000:17:00.0",
            memory_used_bytes=10 * GIB,
            utilization_percent=75,
            memory_utilization_percent=30,
            power_milliwatts=300_000,
            temperature_celsius=60,
            energy_millijoules=5_000_000,
            processes=[FakeProcess(1001, 6 * GIB), FakeProcess(1002, 3 * GIB)],
            samples=[FakeSample(1001, 55), FakeSample(1002, 20)],
            nvlink_peers=[1],
        ),
        FakeGpu(
            uuid="GPU-bbbb",
            pci_bus_id="00000000:18:00.0",
            memory_used_bytes=2 * GIB,
            power_milliwatts=80_000,
            processes=[FakeProcess(1003, 2 * GIB)],
        ),
        FakeGpu(uuid="GPU-cccc", pci_bus_id="00000000:19:00.0", lost=True),
    ],
)
METRICS = (
    "gpuadvisor_gpu_info",
    "gpuadvisor_gpu_memory_total_bytes",
    "gpuadvisor_gpu_memory_used_bytes",
    "gpuadvisor_gpu_utilization_ratio",
    "gpuadvisor_gpu_memory_bandwidth_utilization_ratio",
    "gpuadvisor_gpu_power_watts",
    "gpuadvisor_gpu_temperature_celsius",
    "gpuadvisor_gpu_energy_joules_total",
    "gpuadvisor_gpu_healthy",
    "gpuadvisor_pod_gpu_memory_used_bytes",
    "gpuadvisor_pod_gpu_utilization_ratio",
    "gpuadvisor_collector_cycle_duration_seconds",
    "gpuadvisor_collector_errors_total",
    "gpuadvisor_collector_last_success_timestamp_seconds",
)


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    return write_proc(
        tmp_path / "proc",
        {
            1001: f"0::/kubepods.slice/kubepods-pod{UID_A.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
            1002: f"12:memory:/kubepods/besteffort/pod{UID_B}/{CID}\n",
            1003: f"0::/kubepods.slice/kubepods-pod{UID_A.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
        },
    )


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    samples = {}
    for line in text.splitlines():
        match = re.fullmatch(r"(\w+)\{(.*)\} (\S+)", line)
        if match:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
            samples[(match.group(1), labels)] = float(match.group(3))
    return samples


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "advisor.cli", "collector", "run", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
        check=False,
    )


def test_once_prometheus_prints_every_metric_with_pods(configure_nvml: ConfigureNvml, proc_root: Path) -> None:
    configure_nvml(CONFIG)
    result = _run("--once", "--format", "prometheus", "--no-kube", "--proc-root", str(proc_root), "--node", "n1")
    assert result.returncode == 0, result.stderr
    for name in METRICS:
        assert re.search(rf"^{name}\{{", result.stdout, re.MULTILINE), name
    samples = _samples(result.stdout)
    gpu0 = {("node", "n1"), ("gpu", "0"), ("uuid", "GPU-aaaa")}
    assert samples[("gpuadvisor_gpu_memory_used_bytes", frozenset(gpu0))] == 10 * GIB
    assert samples[("gpuadvisor_gpu_utilization_ratio", frozenset(gpu0))] == 0.75
    assert samples[("gpuadvisor_gpu_power_watts", frozenset(gpu0))] == 300.0
    assert samples[("gpuadvisor_gpu_energy_joules_total", frozenset(gpu0))] == 5000.0
    pod_a = gpu0 | {("namespace", ""), ("pod", ""), ("container", ""), ("owner_kind", ""), ("owner_name", "")}
    assert samples[("gpuadvisor_pod_gpu_memory_used_bytes", frozenset(pod_a | {("pod_uid", UID_A)}))] == 6 * GIB
    assert samples[("gpuadvisor_pod_gpu_utilization_ratio", frozenset(pod_a | {("pod_uid", UID_A)}))] == 0.55
    assert samples[("gpuadvisor_pod_gpu_memory_used_bytes", frozenset(pod_a | {("pod_uid", UID_B)}))] == 3 * GIB
    healthy = {
        (labels_dict["gpu"], labels_dict["uuid"]): value
        for (name, labels), value in samples.items()
        if name == "gpuadvisor_gpu_healthy"
        for labels_dict in [dict(labels)]
    }
    # GPU 2 was lost before start-up: NVML cannot even tell its UUID any more
    assert healthy == {("0", "GPU-aaaa"): 1.0, ("1", "GPU-bbbb"): 1.0, ("2", ""): 0.0}
    assert samples[("gpuadvisor_collector_errors_total", frozenset({("node", "n1"), ("kind", "gpu_lost")}))] == 1


def test_once_json_is_a_node_snapshot(configure_nvml: ConfigureNvml, proc_root: Path) -> None:
    configure_nvml(CONFIG)
    args = [
        "collector",
        "run",
        "--once",
        "--format",
        "json",
        "--no-kube",
        "--proc-root",
        str(proc_root),
        "--node",
        "n1",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    snapshot = NodeSnapshot.model_validate_json(result.stdout)
    assert snapshot.node == "n1"
    assert snapshot.driver_version == "550.54.15"
    assert [(g.uuid, g.healthy) for g in snapshot.gpus] == [("GPU-aaaa", True), ("GPU-bbbb", True), ("", False)]
    pods = {p.pid: (p.pod.uid if p.pod else None) for g in snapshot.gpus for p in g.processes}
    assert pods == {1001: UID_A, 1002: UID_B, 1003: UID_A}
    assert [(link.a, link.b, link.level.value) for link in snapshot.links] == [(0, 1, "NVLINK")]
    raw = json.loads(result.stdout)
    assert set(raw["gpus"][0]) >= {
        "index",
        "uuid",
        "model",
        "healthy",
        "memory_total_bytes",
        "memory_used_bytes",
        "utilization_ratio",
        "memory_bandwidth_utilization_ratio",
        "power_watts",
        "temperature_celsius",
        "processes",
    }
    assert set(raw["gpus"][0]["processes"][0]["pod"]) >= {"namespace", "name", "uid", "container"}


def test_missing_library_exits_3_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUADVISOR_NVML_LIBRARY", str(tmp_path / "libnvidia-ml.so.1"))
    result = CliRunner().invoke(app, ["collector", "run", "--once", "--no-kube", "--node", "n1"])
    assert result.exit_code == 3
    assert result.stderr.startswith("error: NVML library not found:")
    assert len(result.stderr.strip().splitlines()) == 1


def test_init_failure_exits_3(configure_nvml: ConfigureNvml) -> None:
    configure_nvml(FakeNvmlConfig(init_error=DRIVER_NOT_LOADED))
    result = CliRunner().invoke(app, ["collector", "run", "--once", "--no-kube", "--node", "n1"])
    assert result.exit_code == 3
    assert "NVML initialisation failed" in result.stderr


def test_simulate_needs_no_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUADVISOR_NVML_LIBRARY", str(tmp_path / "missing.so"))
    result = CliRunner().invoke(
        app, ["collector", "run", "--simulate", "8", "--once", "--format", "json", "--node", "s"]
    )
    assert result.exit_code == 0, result.output
    snapshot = NodeSnapshot.model_validate_json(result.stdout)
    assert len(snapshot.gpus) == 8
    assert len(snapshot.links) == 28


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "yaml"], "yaml"),
        (["--interval-s", "0"], "--interval-s"),
        (["--interval-s", "nan"], "--interval-s"),  # ran with "every nans" and never cycled
        (["--interval-s", "inf"], "--interval-s"),  # OverflowError from the cycle's wait: a traceback
        (["--interval-s", "1e400"], "--interval-s"),
        (["--interval-s", "3601"], "at most 3600"),
        (["--proc-root", "/nonexistent/proc"], "--proc-root"),
    ],
)
def test_bad_flags_exit_2(args: list[str], message: str, configure_nvml: ConfigureNvml) -> None:
    configure_nvml(CONFIG)
    result = CliRunner().invoke(app, ["collector", "run", "--once", "--no-kube", *args])
    assert result.exit_code == 2
    assert message in result.stderr


@pytest.mark.parametrize("value", ["inf", "nan", "7200"])
def test_an_interval_setting_that_cannot_be_waited_on_is_one_error_line(value: str) -> None:
    """`GPUADVISOR_INTERVAL_SECONDS=inf` passed the settings and ended in a traceback from the cycle's wait."""
    result = gpuadvisor(
        "collector", "run", "--simulate", "1", "--once", "--no-kube", env={"GPUADVISOR_INTERVAL_SECONDS": value}
    )
    assert_one_error_line(result, 2, "GPUADVISOR_INTERVAL_SECONDS")


def test_without_kubernetes_configuration_exits_3(
    configure_nvml: ConfigureNvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure_nvml(CONFIG)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = CliRunner().invoke(app, ["collector", "run", "--once", "--node", "n1"])
    assert result.exit_code == 3
    assert "Kubernetes API not configured" in result.stderr
    assert "--no-kube" in result.stderr


@pytest.mark.asyncio
async def test_once_with_pod_index_names_pods_and_owners(
    kmock: kmock.KubernetesEmulator,
    configure_nvml: ConfigureNvml,
    proc_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pod index comes from the kubeconfig's API server (here kmock): processes get namespace, name, owner."""
    kmock.objects["v1/pods", "ml", "train-0"] = {
        "metadata": {
            "name": "train-0",
            "namespace": "ml",
            "uid": UID_A,
            "labels": {"gpuadvisor.io/workload": "resnet50-bs64"},
            "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "rn50", "controller": True}
            ],
        },
        "spec": {"nodeName": "n1"},
        "status": {"containerStatuses": [{"name": "trainer", "containerID": f"containerd://{CID}"}]},
    }
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
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # no kubelet here (a machine with one would otherwise be asked): the pods come from the API server's list
    monkeypatch.setenv("GPUADVISOR_POD_RESOURCES_SOCKET", str(tmp_path / "no-kubelet.sock"))
    configure_nvml(CONFIG)
    args = ["collector", "run", "--once", "--format", "json", "--proc-root", str(proc_root), "--node", "n1"]
    result = await asyncio.to_thread(CliRunner().invoke, app, args)
    assert result.exit_code == 0, result.output
    snapshot = NodeSnapshot.model_validate_json(result.stdout)
    pods = {p.pid: p.pod for g in snapshot.gpus for p in g.processes}
    assert pods[1001] == PodRef(
        namespace="ml",
        name="train-0",
        uid=UID_A,
        container="trainer",
        workload="resnet50-bs64",
        owner_kind="PyTorchJob",
        owner_name="rn50",
    )
    assert pods[1002] == PodRef(uid=UID_B)  # not in the index: known by UID only


def test_bad_advisor_url_exits_2() -> None:
    result = CliRunner().invoke(app, ["collector", "run", "--simulate", "1", "--advisor-url", "advisor:8080"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --advisor-url:")
