"""The collector on drivers other than the newest and with GPUs that fell off the bus (issue 20).

Each case builds the stand-in libnvidia-ml.so.1 without some symbols, the way an older driver ships it, and runs
`gpuadvisor collector run --once` in a fresh interpreter (nvidia-ml-py loads one library per process) as a user
would: it must exit 0, print no traceback, report every healthy GPU with its processes attributed to their pods,
and count what it could not read.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from collector.nvml import NvmlBackend
from collector.snapshot import NodeSnapshot
from tests.collector.conftest import ConfigureNvml, write_proc
from tests.support.fake_nvml import FakeGpu, FakeNvmlConfig, FakeProcess, build_library, fake_nvml_env, write_config

GIB = 1024**3
UID = "0f0e0d0c-0b0a-4908-8706-050403020100"
CID = "ef" * 32
# an R470-era driver: no _v3 process lists, no nvmlDeviceGetMemoryInfo_v2
R470 = ("v3", "nvmlDeviceGetMemoryInfo_v2")
# only the first version of every entry point this collector uses
OLDEST = (
    "v3",
    "v2",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlInitWithFlags",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetPciInfo_v2",
)
CONFIG = FakeNvmlConfig(
    driver_version="470.256.02",
    gpus=[
        FakeGpu(uuid="GPU-lost", pci_bus_id="00000000:17:00.0", lost=True, processes=[FakeProcess(4001, GIB)]),
        FakeGpu(
            uuid="GPU-pod",
            pci_bus_id="00000000:18:00.0",
            memory_used_bytes=21 * GIB,
            processes=[
                FakeProcess(4002, 20 * GIB),
                FakeProcess(4004, 2 * GIB),
                FakeProcess(4003, GIB, kind="graphics"),
            ],
        ),
        FakeGpu(uuid="GPU-idle", pci_bus_id="00000000:19:00.0"),
    ],
)


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    return write_proc(
        tmp_path / "proc",
        {
            4002: f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
            4003: "0::/system.slice/Xorg.service\n",
            4004: f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
        },
    )


def _collect(
    omit: Sequence[str], config: FakeNvmlConfig, proc_root: Path, tmp_path: Path, output: str
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **fake_nvml_env(build_library(omit), write_config(config, tmp_path / "nvml.conf"))}
    args = ["collector", "run", "--once", "--format", output, "--no-kube", "--proc-root", str(proc_root)]
    return subprocess.run(
        [sys.executable, "-m", "advisor.cli", *args, "--node", "n1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _snapshot(result: subprocess.CompletedProcess[str]) -> NodeSnapshot:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return NodeSnapshot.model_validate_json(result.stdout)


@pytest.mark.parametrize(
    "omit",
    [
        pytest.param(R470, id="r470-no-v3"),
        pytest.param(("v3", "v2", "nvmlDeviceGetMemoryInfo_v2"), id="v1-lists-only"),
        pytest.param(("nvmlDeviceGetHandleByIndex_v2",), id="no-handle-v2"),
        pytest.param(OLDEST, id="oldest"),
    ],
)
def test_older_drivers_report_every_healthy_gpu_with_its_pod(
    omit: Sequence[str], proc_root: Path, tmp_path: Path
) -> None:
    snapshot = _snapshot(_collect(omit, CONFIG, proc_root, tmp_path, "json"))
    assert snapshot.driver_version == "470.256.02"
    assert [(g.index, g.uuid, g.healthy) for g in snapshot.gpus] == [
        (0, "", False),  # lost before start-up: NVML gives no handle, so not even its UUID
        (1, "GPU-pod", True),
        (2, "GPU-idle", True),
    ]
    _, with_pod, idle = snapshot.gpus
    assert with_pod.memory_used_bytes == 21 * GIB
    # the v1 PCI info has only the legacy, 4-digit-domain bus id
    assert with_pod.pci_bus_id == ("0000:18:00.0" if omit == OLDEST else "00000000:18:00.0")
    processes = {p.pid: p for p in with_pod.processes}
    # two entries in one list: the entry layout of each list version is read right
    assert {pid: p.memory_used_bytes for pid, p in processes.items()} == {4002: 20 * GIB, 4003: GIB, 4004: 2 * GIB}
    assert processes[4002].pod is not None
    assert processes[4002].pod.uid == UID
    assert processes[4003].memory_used_bytes == GIB
    assert processes[4003].pod is None  # a host process
    assert idle.processes == ()


def test_r470_prometheus_counts_the_lost_gpu(proc_root: Path, tmp_path: Path) -> None:
    result = _collect(R470, CONFIG, proc_root, tmp_path, "prometheus")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    healthy = dict(re.findall(r'^gpuadvisor_gpu_healthy\{.*gpu="(\d)".*\} (\S+)$', result.stdout, re.MULTILINE))
    assert healthy == {"0": "0.0", "1": "1.0", "2": "1.0"}
    pod_memory = re.search(
        rf'^gpuadvisor_pod_gpu_memory_used_bytes\{{.*pod_uid="{UID}".*\}} (\S+)$', result.stdout, re.M
    )
    assert pod_memory is not None
    assert float(pod_memory.group(1)) == 22 * GIB
    errors = dict(re.findall(r'^gpuadvisor_collector_errors_total\{.*kind="(\w+)".*\} (\S+)$', result.stdout, re.M))
    assert errors["gpu_lost"] == "1.0"
    assert errors["nvml"] == "0.0"  # missing entry points are absent values, not failures


def test_a_library_without_any_process_list_reports_gpus_without_processes(proc_root: Path, tmp_path: Path) -> None:
    """Not a real driver, but the worst mix: GPUs and their values still come through."""
    library = build_library(("v3", "v2", "nvmlDeviceGetComputeRunningProcesses"))
    config = write_config(CONFIG, tmp_path / "nvml.conf")
    script = (
        "from collector.nvml import NvmlBackend; r = NvmlBackend().read(); "
        "print([(g.healthy, g.memory_used_bytes, [p.pid for p in g.processes]) for g in r.gpus], r.error_counts)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, **fake_nvml_env(library, config)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    # compute processes unknown (no symbol); the graphics list still answers through its unversioned symbol
    assert result.stdout.strip() == (
        f"[(False, None, []), (True, {21 * GIB}, [4003]), (True, 0, [])] (('gpu_lost', 1),)"
    )


def test_a_gpu_lost_at_start_is_asked_for_again_and_comes_back(configure_nvml: ConfigureNvml) -> None:
    lost = FakeNvmlConfig(gpus=[FakeGpu(uuid="GPU-0"), FakeGpu(uuid="GPU-1", pci_bus_id="00000000:18:00.0", lost=True)])
    configure_nvml(lost)
    backend = NvmlBackend()
    try:
        first = backend.read()
        assert [(g.uuid, g.healthy) for g in first.gpus] == [("GPU-0", True), ("", False)]
        assert dict(first.error_counts) == {"gpu_lost": 1}
        assert dict(backend.read().error_counts) == {"gpu_lost": 1}  # counted every cycle it stays lost
        configure_nvml(
            FakeNvmlConfig(gpus=[FakeGpu(uuid="GPU-0"), FakeGpu(uuid="GPU-1", pci_bus_id="00000000:18:00.0")])
        )
        back = backend.read()
        assert [(g.uuid, g.pci_bus_id, g.healthy) for g in back.gpus][1] == ("GPU-1", "00000000:18:00.0", True)
        assert back.error_counts == ()
        assert [(link.a, link.b) for link in back.links] == [(0, 1)]
    finally:
        backend.close()
