"""The NVML backend through the real nvidia-ml-py bindings, loaded against the stand-in libnvidia-ml.so.1."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.backend import BackendUnavailableError
from collector.nvml import CALL_SECONDS_BUCKETS, SM_SAMPLE_MAX_AGE_SECONDS, CallLatency, NvmlBackend
from collector.snapshot import LinkLevel
from tests.collector.conftest import ConfigureNvml
from tests.support.fake_nvml import (
    COMPUTE_MODE_DEFAULT,
    COMPUTE_MODE_EXCLUSIVE_PROCESS,
    COMPUTE_MODE_PROHIBITED,
    DRIVER_NOT_LOADED,
    NOT_SUPPORTED,
    TOPOLOGY_HOSTBRIDGE,
    TOPOLOGY_MULTIPLE,
    TOPOLOGY_NODE,
    TOPOLOGY_SYSTEM,
    UNKNOWN_ERROR,
    FakeGpu,
    FakeMig,
    FakeNvmlConfig,
    FakeProcess,
    FakeSample,
    build_library,
    fake_nvml_env,
    write_config,
)

GIB = 1024**3


@pytest.fixture
def open_backend() -> Iterator[list[NvmlBackend]]:
    opened: list[NvmlBackend] = []
    yield opened
    for backend in opened:
        backend.close()


def _open(opened: list[NvmlBackend]) -> NvmlBackend:
    backend = NvmlBackend()
    opened.append(backend)
    return backend


def test_reads_gpus_in_base_units(configure_nvml: ConfigureNvml, open_backend: list[NvmlBackend]) -> None:
    configure_nvml(
        FakeNvmlConfig(
            driver_version="555.42.06",
            gpus=[
                FakeGpu(
                    uuid="GPU-0",
                    name="NVIDIA A100-SXM4-40GB",
                    pci_bus_id="00000000:07:00.0",
                    memory_total_bytes=40 * GIB,
                    memory_used_bytes=12 * GIB,
                    utilization_percent=87,
                    memory_utilization_percent=43,
                    power_milliwatts=312_500,
                    temperature_celsius=66,
                    energy_millijoules=9_876_543,
                )
            ],
        )
    )
    reading = _open(open_backend).read()
    assert reading.driver_version == "555.42.06"
    (gpu,) = reading.gpus
    assert (gpu.index, gpu.uuid, gpu.model, gpu.pci_bus_id, gpu.healthy) == (
        0,
        "GPU-0",
        "NVIDIA A100-SXM4-40GB",
        "00000000:07:00.0",
        True,
    )
    assert gpu.memory_total_bytes == 40 * GIB
    assert gpu.memory_used_bytes == 12 * GIB
    assert gpu.utilization_ratio == pytest.approx(0.87)
    assert gpu.memory_bandwidth_utilization_ratio == pytest.approx(0.43)
    assert gpu.power_watts == pytest.approx(312.5)
    assert gpu.temperature_celsius == 66.0
    assert gpu.energy_joules_total == pytest.approx(9876.543)
    assert reading.error_counts == ()


def test_processes_from_all_lists_with_newest_utilisation_sample(
    configure_nvml: ConfigureNvml, open_backend: list[NvmlBackend]
) -> None:
    configure_nvml(
        FakeNvmlConfig(
            gpus=[
                FakeGpu(
                    uuid="GPU-0",
                    processes=[
                        FakeProcess(100, 3 * GIB),
                        FakeProcess(200, 1 * GIB, kind="graphics"),
                        FakeProcess(300, 2 * GIB, kind="mps"),
                        FakeProcess(100, 3 * GIB, kind="graphics"),
                    ],
                    samples=[
                        FakeSample(100, 20, timestamp_us=10),
                        FakeSample(100, 70, timestamp_us=30),
                        FakeSample(300, 5, 20),
                    ],
                )
            ]
        )
    )
    now = [100.0]
    backend = NvmlBackend(clock=lambda: now[0])
    open_backend.append(backend)
    processes = {p.pid: p for p in backend.read().gpus[0].processes}
    assert {pid: p.memory_used_bytes for pid, p in processes.items()} == {100: 3 * GIB, 200: GIB, 300: 2 * GIB}
    assert processes[100].sm_utilization_ratio == pytest.approx(0.70)
    assert processes[300].sm_utilization_ratio == pytest.approx(0.05)
    # NVML had no sample for 200 (`nvidia-smi pmon` shows "-"): unknown, not idle
    assert processes[200].sm_utilization_ratio is None
    # no new samples since the last read: each process keeps its last sample for a bounded time, then is unknown
    now[0] += SM_SAMPLE_MAX_AGE_SECONDS - 1
    assert [p.sm_utilization_ratio for p in backend.read().gpus[0].processes] == pytest.approx([0.70, None, 0.05])
    now[0] += 2
    assert [p.sm_utilization_ratio for p in backend.read().gpus[0].processes] == [None, None, None]


def test_not_supported_is_absent_and_logged_once_other_errors_counted(
    configure_nvml: ConfigureNvml, open_backend: list[NvmlBackend], caplog: pytest.LogCaptureFixture
) -> None:
    configure_nvml(
        FakeNvmlConfig(
            gpus=[
                FakeGpu(
                    uuid="GPU-0",
                    power_milliwatts=100_000,
                    errors={"power": NOT_SUPPORTED, "process_utilization": NOT_SUPPORTED, "temperature": UNKNOWN_ERROR},
                    processes=[FakeProcess(5, GIB)],
                )
            ]
        )
    )
    backend = _open(open_backend)
    with caplog.at_level(logging.INFO, logger="collector.nvml"):
        first = backend.read()
        second = backend.read()
    gpu = first.gpus[0]
    assert gpu.healthy
    assert gpu.power_watts is None
    assert gpu.temperature_celsius is None
    assert gpu.processes[0].sm_utilization_ratio is None
    assert gpu.memory_total_bytes == 80 * GIB
    assert first.error_counts == (("nvml", 1),) == second.error_counts
    messages = [r.getMessage() for r in caplog.records]
    assert sum("nvmlDeviceGetPowerUsage" in m for m in messages) == 1
    assert sum("nvmlDeviceGetTemperature" in m for m in messages) == 1


def test_lost_gpu_is_unhealthy_while_the_others_report(
    configure_nvml: ConfigureNvml, open_backend: list[NvmlBackend]
) -> None:
    healthy = FakeGpu(uuid="GPU-0", memory_used_bytes=GIB, processes=[FakeProcess(1, GIB)])
    configure_nvml(FakeNvmlConfig(gpus=[healthy, FakeGpu(uuid="GPU-1", pci_bus_id="00000000:18:00.0")]))
    backend = _open(open_backend)
    assert all(g.healthy for g in backend.read().gpus)
    configure_nvml(FakeNvmlConfig(gpus=[healthy, FakeGpu(uuid="GPU-1", pci_bus_id="00000000:18:00.0", lost=True)]))
    reading = backend.read()
    ok, lost = reading.gpus
    assert ok.healthy
    assert ok.memory_used_bytes == GIB
    assert len(ok.processes) == 1
    assert not lost.healthy
    assert (lost.uuid, lost.pci_bus_id) == ("GPU-1", "00000000:18:00.0")  # identity known from start-up
    assert lost.memory_used_bytes is None
    assert lost.processes == ()
    assert dict(reading.error_counts)["gpu_lost"] == 1


def test_topology_levels_for_every_pair(configure_nvml: ConfigureNvml, open_backend: list[NvmlBackend]) -> None:
    configure_nvml(
        FakeNvmlConfig(
            gpus=[
                FakeGpu(
                    uuid="GPU-0",
                    nvlink_peers=[1],
                    topology={2: TOPOLOGY_MULTIPLE, 3: TOPOLOGY_HOSTBRIDGE, 4: TOPOLOGY_NODE, 5: TOPOLOGY_SYSTEM},
                ),
                *(FakeGpu(uuid=f"GPU-{i}") for i in range(1, 6)),
            ]
        )
    )
    links = {(link.a, link.b): link.level for link in _open(open_backend).read().links}
    assert len(links) == 15
    assert links[(0, 1)] is LinkLevel.NVLINK
    assert links[(0, 2)] is LinkLevel.PCIE_SWITCH
    assert links[(0, 3)] is LinkLevel.PCIE_HOSTBRIDGE
    assert links[(0, 4)] is LinkLevel.NUMA
    assert links[(0, 5)] is LinkLevel.SYSTEM


def test_mig_devices_memory_with_parent(configure_nvml: ConfigureNvml, open_backend: list[NvmlBackend]) -> None:
    configure_nvml(
        FakeNvmlConfig(
            gpus=[
                FakeGpu(
                    uuid="GPU-0",
                    mig_devices=[FakeMig("MIG-a", 1, 0, 10 * GIB, 3 * GIB), FakeMig("MIG-b", 2, 0, 20 * GIB, 0)],
                ),
                FakeGpu(uuid="GPU-1"),
            ]
        )
    )
    parent, plain = _open(open_backend).read().gpus
    assert [(m.uuid, m.gpu_instance_id, m.memory_total_bytes, m.memory_used_bytes) for m in parent.mig_devices] == [
        ("MIG-a", 1, 10 * GIB, 3 * GIB),
        ("MIG-b", 2, 20 * GIB, 0),
    ]
    assert plain.mig_devices == ()


def _mig_gpu(uuid: str, **kwargs: object) -> FakeGpu:
    """An A100 80GB with a 3g.40gb, a 2g.20gb and a 1g.10gb instance (the 2g.20gb one on GPU instance 5)."""
    return FakeGpu(
        uuid=uuid,
        name="NVIDIA A100-SXM4-80GB",
        mig_devices=[
            FakeMig("MIG-3g", 2, 0, 40 * GIB, 0, profile="3g.40gb"),
            FakeMig("MIG-2g", 5, 0, 20 * GIB, 0, profile="2g.20gb"),
            FakeMig("MIG-1g", 9, 0, 10 * GIB, GIB, profile="1g.10gb"),
        ],
        **kwargs,  # type: ignore[arg-type]
    )


def test_mig_devices_carry_their_profile_from_nvml_profile_info(
    configure_nvml: ConfigureNvml, open_backend: list[NvmlBackend]
) -> None:
    configure_nvml(FakeNvmlConfig(gpus=[_mig_gpu("GPU-0"), FakeGpu(uuid="GPU-1")]))
    backend = _open(open_backend)
    for _ in range(2):  # the profile table is read once per GPU
        parent, plain = backend.read().gpus
        assert [(m.uuid, m.profile) for m in parent.mig_devices] == [
            ("MIG-3g", "3g.40gb"),
            ("MIG-2g", "2g.20gb"),
            ("MIG-1g", "1g.10gb"),
        ]
    assert plain.mig_devices == ()
    latency = backend.call_latency()
    assert latency["nvmlGpuInstanceGetInfo"].count == 6  # each instance's profile id, every read
    assert latency["nvmlDeviceGetGpuInstanceProfileInfoV"].count == 18  # NVML_GPU_INSTANCE_PROFILE_COUNT, once


def test_a_compute_instance_smaller_than_its_gpu_instance_has_its_own_profile(
    configure_nvml: ConfigureNvml, open_backend: list[NvmlBackend]
) -> None:
    """Two compute instances of one slice in a 3g.40gb GPU instance are `1c.3g.40gb` each (as the device names them),
    not two 3g.40gb instances; a whole-GPU-instance device beside them keeps its GPU instance's profile."""
    configure_nvml(
        FakeNvmlConfig(
            gpus=[
                FakeGpu(
                    uuid="GPU-0",
                    name="NVIDIA A100-SXM4-80GB",
                    mig_devices=[
                        FakeMig("MIG-c0", 1, 0, 40 * GIB, 0, profile="3g.40gb", compute_slices=1),
                        FakeMig("MIG-c1", 1, 1, 40 * GIB, 0, profile="3g.40gb", compute_slices=1),
                        FakeMig("MIG-2g", 5, 0, 20 * GIB, 0, profile="2g.20gb"),
                    ],
                )
            ]
        )
    )
    (parent,) = _open(open_backend).read().gpus
    assert [m.profile for m in parent.mig_devices] == ["1c.3g.40gb", "1c.3g.40gb", "2g.20gb"]


def test_mig_profile_from_the_device_name_where_profile_info_is_not_supported(
    configure_nvml: ConfigureNvml, open_backend: list[NvmlBackend]
) -> None:
    configure_nvml(FakeNvmlConfig(gpus=[_mig_gpu("GPU-0", errors={"mig_profile": NOT_SUPPORTED})]))
    (parent,) = _open(open_backend).read().gpus
    assert [m.profile for m in parent.mig_devices] == ["3g.40gb", "2g.20gb", "1g.10gb"]


def test_mig_profile_unknown_when_nvml_names_none(
    configure_nvml: ConfigureNvml, open_backend: list[NvmlBackend]
) -> None:
    configure_nvml(FakeNvmlConfig(gpus=[FakeGpu(uuid="GPU-0", mig_devices=[FakeMig("MIG-a", 1, 0, 10 * GIB, 0)])]))
    (parent,) = _open(open_backend).read().gpus
    assert [(m.uuid, m.profile) for m in parent.mig_devices] == [("MIG-a", None)]


def test_mig_profile_from_the_device_name_on_a_driver_without_versioned_profile_info(tmp_path: Path) -> None:
    """An older driver: no nvmlDeviceGetGpuInstanceProfileInfoV (function not found), its MIG devices still named."""
    library = build_library(omit=("nvmlDeviceGetGpuInstanceProfileInfoV",))
    config = write_config(FakeNvmlConfig(gpus=[_mig_gpu("GPU-0")]), tmp_path / "nvml.conf")
    script = (
        "import json; from collector.nvml import NvmlBackend; b = NvmlBackend(); "
        "g = [b.read() for _ in range(2)][-1].gpus[0]; "
        "print(json.dumps([[m.profile for m in g.mig_devices], b.call_latency()["
        "'nvmlDeviceGetGpuInstanceProfileInfoV'].count]))"
    )
    env = {**os.environ, **fake_nvml_env(library, config)}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == [["3g.40gb", "2g.20gb", "1g.10gb"], 1]  # asked once, then known absent


def test_config_rewrite_is_seen_by_an_open_backend(
    configure_nvml: ConfigureNvml, open_backend: list[NvmlBackend]
) -> None:
    configure_nvml(FakeNvmlConfig(gpus=[FakeGpu(uuid="GPU-0")]))
    backend = _open(open_backend)
    assert backend.read().gpus[0].processes == ()
    configure_nvml(FakeNvmlConfig(gpus=[FakeGpu(uuid="GPU-0", processes=[FakeProcess(os.getpid(), GIB)])]))
    assert [p.pid for p in backend.read().gpus[0].processes] == [os.getpid()]


def test_init_failure_is_backend_unavailable(configure_nvml: ConfigureNvml) -> None:
    configure_nvml(FakeNvmlConfig(init_error=DRIVER_NOT_LOADED))
    with pytest.raises(BackendUnavailableError, match="NVML initialisation failed"):
        NvmlBackend()


def test_missing_library_is_backend_unavailable(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailableError, match="NVML library not found"):
        NvmlBackend(str(tmp_path / "libnvidia-ml.so.1"))


def test_missing_functions_become_absent_values(tmp_path: Path) -> None:
    """A driver without energy or per-process utilisation support: the library lacks the symbols entirely."""
    library = build_library(omit=("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetProcessUtilization"))
    config = write_config(
        FakeNvmlConfig(gpus=[FakeGpu(uuid="GPU-0", energy_millijoules=5, processes=[FakeProcess(9, GIB)])]),
        tmp_path / "nvml.conf",
    )
    script = (
        "import json; from collector.nvml import NvmlBackend; g = NvmlBackend().read().gpus[0]; "
        "p = g.processes[0]; "
        "print(json.dumps([g.healthy, g.energy_joules_total, p.sm_utilization_ratio, g.memory_used_bytes]))"
    )
    env = {**os.environ, **fake_nvml_env(library, config)}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == [True, None, None, 0]


def test_sharing_facts_name_the_mps_clients_and_the_mig_mode(
    configure_nvml: ConfigureNvml, open_backend: list[NvmlBackend]
) -> None:
    mig = FakeMig(uuid="MIG-0", gpu_instance_id=1, compute_instance_id=0, memory_total_bytes=GIB, memory_used_bytes=0)
    configure_nvml(
        FakeNvmlConfig(
            gpus=[
                FakeGpu(uuid="GPU-0", processes=[FakeProcess(100, GIB), FakeProcess(300, GIB, kind="mps")]),
                FakeGpu(uuid="GPU-1", mig_devices=[mig]),
            ]
        )
    )
    backend = _open(open_backend)
    plain, partitioned = backend.sharing_facts(0), backend.sharing_facts(1)
    assert plain.mps_pids == frozenset({300})
    assert plain.mig_enabled is False
    assert plain.compute_mode is None  # the stand-in library has no nvmlDeviceGetComputeMode: unknown, not a guess
    assert partitioned.mig_enabled is True


def test_the_snapshot_says_how_each_gpu_is_shared(
    configure_nvml: ConfigureNvml, open_backend: list[NvmlBackend], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "no-mps"))  # no control daemon listens
    mig = FakeMig(uuid="MIG-0", gpu_instance_id=1, compute_instance_id=0, memory_total_bytes=GIB, memory_used_bytes=0)
    configure_nvml(
        FakeNvmlConfig(
            gpus=[
                FakeGpu(uuid="GPU-0", compute_mode=COMPUTE_MODE_DEFAULT, processes=[FakeProcess(100, GIB)]),
                FakeGpu(uuid="GPU-1", compute_mode=COMPUTE_MODE_DEFAULT, mig_devices=[mig]),
                FakeGpu(uuid="GPU-2", compute_mode=COMPUTE_MODE_EXCLUSIVE_PROCESS),
                FakeGpu(
                    uuid="GPU-3",
                    compute_mode=COMPUTE_MODE_EXCLUSIVE_PROCESS,
                    processes=[FakeProcess(300, GIB, kind="mps")],
                ),
                FakeGpu(uuid="GPU-4", compute_mode=COMPUTE_MODE_PROHIBITED),
                FakeGpu(uuid="GPU-5"),  # no nvmlDeviceGetComputeMode answer: two contexts would still take turns
            ]
        )
    )
    backend = _open(open_backend)
    gpus = backend.read().gpus
    assert [(g.sharing, g.compute_mode) for g in gpus] == [
        ("time-slicing", "default"),
        ("mig", "default"),
        ("", "exclusive-process"),  # one process at a time: no sharing to speak of without MPS
        ("mps", "exclusive-process"),  # the driver lists an MPS client: an MPS server runs on it
        ("", "prohibited"),
        ("time-slicing", None),
    ]
    assert len(gpus[1].mig_devices) == 1
    latency = backend.call_latency()
    assert latency["nvmlDeviceGetComputeMode"].count == len(gpus)  # once per GPU and read
    assert latency["nvmlDeviceGetMigMode"].count == len(gpus)  # shared by the sharing facts and the MIG devices


def test_an_mps_control_daemon_makes_every_gpu_mps(
    configure_nvml: ConfigureNvml,
    open_backend: list[NvmlBackend],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configure_nvml(FakeNvmlConfig(gpus=[FakeGpu(uuid="GPU-0", compute_mode=COMPUTE_MODE_DEFAULT)]))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "mps"))
    backend = _open(open_backend)
    assert backend.read().gpus[0].sharing == "time-slicing"
    (tmp_path / "mps").mkdir()
    (tmp_path / "mps" / "control").touch()  # the control daemon's pipe
    assert backend.read().gpus[0].sharing == "mps"


def test_every_nvml_call_is_timed_per_function_and_logged_when_verbose(
    configure_nvml: ConfigureNvml, open_backend: list[NvmlBackend], caplog: pytest.LogCaptureFixture
) -> None:
    configure_nvml(FakeNvmlConfig(gpus=[FakeGpu(uuid="GPU-0", processes=[FakeProcess(100, GIB)])]))
    backend = _open(open_backend)
    with caplog.at_level(logging.DEBUG, logger="collector.nvml"):
        backend.read()
        backend.read()
    latency = backend.call_latency()
    for function in ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetProcessUtilization"):
        assert latency[function].count == 2, function
        assert sum(latency[function].bucket_counts) == 2
        assert 0 < latency[function].total_seconds <= 2 * latency[function].max_seconds
    assert latency["nvmlDeviceGetUUID"].count == 1  # a static fact: read once at start-up, not per read
    assert any(name.startswith("nvmlDeviceGetComputeRunningProcesses") for name in latency)
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("NVML nvmlDeviceGetMemoryInfo:")]
    assert len(logged) == 1  # after the first read only (then every 60 reads)
    assert "1 calls in 1 reads" in logged[0]


def test_call_latency_histogram_bounds_its_quantiles() -> None:
    latency = CallLatency()
    for seconds in (3e-6, 4e-5, 4e-5, 4e-5, 0.2):
        latency.observe(seconds)
    assert latency.bucket_counts[0] == 1
    assert latency.bucket_counts[CALL_SECONDS_BUCKETS.index(5e-5)] == 3
    assert latency.bucket_counts[-1] == 1  # slower than the last bound
    assert latency.quantile_bound_seconds(0.5) == 5e-5
    assert latency.quantile_bound_seconds(0.99) == 0.2
