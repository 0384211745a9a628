"""The stand-in `libnvidia-ml.so.1`: build it from C, describe GPUs in Python, point NVML users at it.

The real nvidia-ml-py bindings load the library (the collector pre-loads the path in GPUADVISOR_NVML_LIBRARY,
whose soname is libnvidia-ml.so.1, so pynvml's own `CDLL("libnvidia-ml.so.1")` finds it). The library reads the
text file named by FAKE_NVML_CONFIG and re-reads it whenever it changes, so a test may rewrite the config (e.g. add
a live child PID) while a collector keeps running.

Typical use::

    lib = build_library()
    cfg = FakeNvmlConfig(gpus=[FakeGpu(uuid="GPU-a", processes=[FakeProcess(pid=42, memory_bytes=1 << 30)])])
    env = fake_nvml_env(lib, write_config(cfg, tmp_path / "nvml.conf"))   # set these in os.environ / subprocess env
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.binaries import require_binary

SOURCE = Path(__file__).parent / "fake_nvml" / "fake_nvml.c"
BUILD_DIR = Path(__file__).resolve().parents[1] / ".build"

# nvmlReturn_t codes a test may inject with FakeGpu.errors.
NOT_SUPPORTED = 3
UNKNOWN_ERROR = 999
DRIVER_NOT_LOADED = 9

# NVML topology levels (nvmlGpuTopologyLevel_t) for FakeGpu.topology.
TOPOLOGY_SINGLE = 10
TOPOLOGY_MULTIPLE = 20
TOPOLOGY_HOSTBRIDGE = 30
TOPOLOGY_NODE = 40
TOPOLOGY_SYSTEM = 50

# NVML compute modes (nvmlComputeMode_t) for FakeGpu.compute_mode.
COMPUTE_MODE_DEFAULT = 0
COMPUTE_MODE_PROHIBITED = 2
COMPUTE_MODE_EXCLUSIVE_PROCESS = 3

PROCESS_KINDS = {"compute": 0, "graphics": 1, "mps": 2}


@dataclass(frozen=True)
class FakeProcess:
    pid: int
    memory_bytes: int
    kind: str = "compute"


@dataclass(frozen=True)
class FakeSample:
    """One per-process utilisation sample (percentages, as NVML reports them; timestamp in microseconds)."""

    pid: int
    sm_percent: int
    timestamp_us: int = 1_000_000
    memory_percent: int = 0


@dataclass(frozen=True)
class FakeMig:
    """A MIG device. With a `profile` ("1g.10gb") its GPU instance has that profile (NVML's profile info names it
    "MIG 1g.10gb") and the device is named "<parent name> MIG 1g.10gb"; without one, the device carries its parent's
    name and its GPU instance a profile id the parent's profile table lacks. `compute_slices` (with a profile): its
    compute instance is that much of the GPU instance, and the device is named "<parent name> MIG 1c.3g.40gb"."""

    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    memory_total_bytes: int
    memory_used_bytes: int
    profile: str = ""
    compute_slices: int = 0


@dataclass(frozen=True)
class FakeGpu:
    """One GPU. `errors` maps a query (uuid, name, pci, memory, utilization, power, temperature, energy, processes,
    process_utilization, mig, topology, mig_profile: the GPU instance and profile-info calls) to the nvmlReturn_t it
    answers; `topology` maps a peer index to a level; `compute_mode` is an nvmlComputeMode_t (None: the library
    answers NOT_SUPPORTED for it)."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    pci_bus_id: str = "00000000:17:00.0"
    memory_total_bytes: int = 80 * 1024**3
    memory_used_bytes: int = 0
    utilization_percent: int = 0
    memory_utilization_percent: int = 0
    power_milliwatts: int = 0
    temperature_celsius: int = 30
    energy_millijoules: int = 0
    lost: bool = False
    processes: Sequence[FakeProcess] = ()
    samples: Sequence[FakeSample] = ()
    mig_devices: Sequence[FakeMig] = ()
    nvlink_peers: Iterable[int] = ()
    topology: dict[int, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    compute_mode: int | None = None


@dataclass(frozen=True)
class FakeNvmlConfig:
    gpus: Sequence[FakeGpu] = ()
    driver_version: str = "550.54.15"
    init_error: int = 0


def render_config(config: FakeNvmlConfig) -> str:
    lines = [f"driver {config.driver_version}", f"init_error {config.init_error}"]
    for gpu in config.gpus:
        lines += [
            "gpu",
            f"uuid {gpu.uuid}",
            f"name {gpu.name}",
            f"pci {gpu.pci_bus_id}",
            f"memory {gpu.memory_total_bytes} {gpu.memory_used_bytes}",
            f"utilization {gpu.utilization_percent} {gpu.memory_utilization_percent}",
            f"power_mw {gpu.power_milliwatts}",
            f"temperature {gpu.temperature_celsius}",
            f"energy_mj {gpu.energy_millijoules}",
            f"lost {int(gpu.lost)}",
        ]
        lines += [f"error {key} {code}" for key, code in gpu.errors.items()]
        lines += [f"process {p.pid} {p.memory_bytes} {PROCESS_KINDS[p.kind]}" for p in gpu.processes]
        lines += [f"sample {s.pid} {s.timestamp_us} {s.sm_percent} {s.memory_percent}" for s in gpu.samples]
        if gpu.mig_devices:
            lines.append("mig_mode 1")
        if gpu.compute_mode is not None:
            lines.append(f"compute_mode {gpu.compute_mode}")
        lines += [
            f"mig {m.uuid} {m.gpu_instance_id} {m.compute_instance_id} {m.memory_total_bytes} {m.memory_used_bytes}"
            + (f" {m.profile}" if m.profile else "")
            + (f" {m.compute_slices}" if m.profile and m.compute_slices else "")
            for m in gpu.mig_devices
        ]
        lines += [f"nvlink {peer}" for peer in gpu.nvlink_peers]
        lines += [f"topology {peer} {level}" for peer, level in gpu.topology.items()]
    return "\n".join(lines) + "\n"


def write_config(config: FakeNvmlConfig, path: Path) -> Path:
    """Write atomically (new inode), so a library re-reading the file never sees half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_config(config))
    tmp.replace(path)
    return path


def build_library(omit: Sequence[str] = ()) -> Path:
    """Compile the stand-in library once per source version (cached under tests/.build/); `omit` leaves symbols out."""
    gcc = require_binary("gcc", "compiles the stand-in libnvidia-ml.so.1")
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + "\0".join(sorted(omit)).encode()).hexdigest()[:16]
    target = BUILD_DIR / f"fake-nvml-{key}" / "libnvidia-ml.so.1"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".libnvidia-ml.so.1.{os.getpid()}")
    defines = [f"-DOMIT_{name}" for name in omit]
    command = [gcc, "-O2", "-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1", *defines, "-o", str(partial)]
    subprocess.run([*command, str(SOURCE), "-lpthread"], check=True, capture_output=True)
    partial.replace(target)
    return target


def fake_nvml_env(library: Path, config: Path) -> dict[str, str]:
    """Environment variables that make the collector (or any NVML user of ours) use the stand-in library."""
    return {"GPUADVISOR_NVML_LIBRARY": str(library), "FAKE_NVML_CONFIG": str(config)}
