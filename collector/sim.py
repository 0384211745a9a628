"""A deterministic simulated node (`collector run --simulate N`, `gpuadvisor up`, load tests).

N GPUs of one model, each with resident training processes that belong to simulated pods. The same seed gives
the same pods, placements and value sequence; values drift from read to read so dashboards show movement.
The backend also provides the PID → pod mapping and pod index for its processes, since those PIDs do not exist
in this machine's /proc.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from collector.backend import NodeReading
from collector.keys import WORKLOAD_LABEL
from collector.podmap import CgroupIdentity, ProcessGoneError
from collector.pods import PodInfo, StaticPods
from collector.snapshot import GpuSnapshot, Link, LinkLevel, ProcessSnapshot

GIB = 1024**3
# Label-safe signatures of job types in the Gavel data the bundled models are trained on ("ResNet-50 (batch size
# 64)" is resnet50-bs64), so that the residents of a simulated cluster reach the learned models.
SIM_WORKLOADS: tuple[tuple[str, int], ...] = (
    ("resnet50-bs64", 22 * GIB),
    ("transformer-bs32", 14 * GIB),
    ("lm-bs20", 30 * GIB),
    ("resnet18-bs128", 18 * GIB),
    ("recommendation-bs2048", 9 * GIB),
)
SIM_NAMESPACE = "sim"


@dataclass(frozen=True, slots=True)
class _Resident:
    pid: int
    gpu: int
    pod_uid: str
    container_id: str
    workload: str
    memory_bytes: int
    base_sm_ratio: float


def sim_link_level(a: int, b: int) -> LinkLevel:
    """Topology of a simulated 8-GPU board: NVLink pairs, PCIe switch quads, two NUMA halves per board."""
    if a // 2 == b // 2:
        return LinkLevel.NVLINK
    if a // 4 == b // 4:
        return LinkLevel.PCIE_SWITCH
    if a // 8 == b // 8:
        return LinkLevel.NUMA
    return LinkLevel.SYSTEM


class SimulatedBackend:
    """`GpuBackend` of N simulated GPUs; `resolver` and `pods` attribute its processes to simulated pods."""

    def __init__(
        self,
        gpus: int,
        *,
        seed: int = 0,
        node: str = "sim-node",
        model: str = "NVIDIA A100-SXM4-80GB",
        memory_total_bytes: int = 80 * GIB,
        max_power_watts: float = 400.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if gpus < 1:
            raise ValueError(f"gpus: expected at least 1 simulated GPU, got {gpus}")
        self.gpu_count = gpus
        self.seed = seed
        self.node = node
        self.model = model
        self.memory_total_bytes = memory_total_bytes
        self.max_power_watts = max_power_watts
        self._clock = clock
        self._rng = random.Random(f"{seed}/{node}")
        self._reads = 0
        self._last_read_seconds: float | None = None
        self._energy_joules = [0.0] * gpus
        self._uuids = [f"GPU-{uuid.UUID(int=self._rng.getrandbits(128), version=4)}" for _ in range(gpus)]
        self._residents = self._place_residents()
        pods: dict[str, PodInfo] = {}
        for r in self._residents:
            pods[r.pod_uid] = PodInfo(
                uid=r.pod_uid,
                namespace=SIM_NAMESPACE,
                name=f"{r.workload}-{node}-{r.pid}",
                labels={WORKLOAD_LABEL: r.workload},
                owner_kind="Job",
                owner_name=f"{r.workload}-{node}",
                containers={r.container_id: "main"},
            )
        self.pods = StaticPods(pods)
        self._by_pid = {r.pid: CgroupIdentity(r.pod_uid, r.container_id) for r in self._residents}

    def _place_residents(self) -> list[_Resident]:
        residents: list[_Resident] = []
        pid = 10_000
        for gpu in range(self.gpu_count):
            for _ in range(self._rng.choice((0, 1, 1, 2))):
                workload, memory_bytes = self._rng.choice(SIM_WORKLOADS)
                pid += self._rng.randint(1, 500)
                residents.append(
                    _Resident(
                        pid=pid,
                        gpu=gpu,
                        pod_uid=str(uuid.UUID(int=self._rng.getrandbits(128), version=4)),
                        container_id=f"{self._rng.getrandbits(256):064x}",
                        workload=workload,
                        memory_bytes=memory_bytes,
                        base_sm_ratio=self._rng.uniform(0.3, 0.9),
                    )
                )
        return residents

    def resolve(self, pid: int) -> CgroupIdentity | None:
        """PID → simulated pod (the `PidResolver` of this backend)."""
        try:
            return self._by_pid[pid]
        except KeyError as e:
            raise ProcessGoneError(f"simulated process {pid} does not exist") from e

    def read(self) -> NodeReading:
        now = self._clock()
        elapsed_seconds = 0.0 if self._last_read_seconds is None else max(0.0, now - self._last_read_seconds)
        self._last_read_seconds = now
        self._reads += 1
        phase = self._reads / 7.0
        gpus: list[GpuSnapshot] = []
        for gpu in range(self.gpu_count):
            residents = [r for r in self._residents if r.gpu == gpu]
            processes = tuple(
                ProcessSnapshot(
                    pid=r.pid,
                    memory_used_bytes=r.memory_bytes,
                    sm_utilization_ratio=_clamp(r.base_sm_ratio + 0.08 * math.sin(phase + r.pid)),
                )
                for r in residents
            )
            sm_total = _clamp(sum(p.sm_utilization_ratio or 0.0 for p in processes))
            power_watts = round(60.0 + (self.max_power_watts - 60.0) * sm_total, 1)
            self._energy_joules[gpu] += power_watts * elapsed_seconds
            used_bytes = min(self.memory_total_bytes, sum(r.memory_bytes for r in residents) + (512 << 20))
            gpus.append(
                GpuSnapshot(
                    index=gpu,
                    uuid=self._uuids[gpu],
                    model=self.model,
                    pci_bus_id=f"00000000:{0x10 + gpu * 0x10:02X}:00.0",
                    memory_total_bytes=self.memory_total_bytes,
                    memory_used_bytes=used_bytes,
                    utilization_ratio=round(sm_total, 4),
                    memory_bandwidth_utilization_ratio=round(sm_total * 0.55, 4),
                    power_watts=power_watts,
                    temperature_celsius=round(32.0 + 40.0 * sm_total, 1),
                    energy_joules_total=round(self._energy_joules[gpu], 3),
                    processes=processes,
                )
            )
        links = tuple(
            Link(a=a, b=b, level=sim_link_level(a, b))
            for a in range(self.gpu_count)
            for b in range(a + 1, self.gpu_count)
        )
        return NodeReading(driver_version="550.54.15-sim", gpus=tuple(gpus), links=links)

    def close(self) -> None:
        """Nothing to release."""


def _clamp(value: float) -> float:
    return round(min(1.0, max(0.0, value)), 4)
