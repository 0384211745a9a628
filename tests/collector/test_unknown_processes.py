"""Unknown is never free (issue 40): a GPU whose process list could not be read is marked so in the snapshot, through
the real nvidia-ml-py bindings against the stand-in libnvidia-ml.so.1; and a /proc that cannot be read leaves every
process in, unresolved, rather than dropping them as exited."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.agent import CollectorAgent
from collector.attribution import UNRESOLVED_OWNER_KIND
from collector.backend import NodeReading
from collector.nvml import NvmlBackend
from collector.snapshot import GpuSnapshot, ProcessSnapshot
from tests.collector.conftest import ConfigureNvml
from tests.support.fake_nvml import NOT_SUPPORTED, UNKNOWN_ERROR, FakeGpu, FakeNvmlConfig, FakeProcess

GIB = 1024**3
TIMEOUT = 10
INSUFFICIENT_SIZE = 7  # on the retry too: the list could not be read whole


@pytest.fixture
def backend_of(configure_nvml: ConfigureNvml) -> Iterator[list[NvmlBackend]]:
    opened: list[NvmlBackend] = []
    yield opened
    for backend in opened:
        backend.close()


def _read(configure_nvml: ConfigureNvml, opened: list[NvmlBackend], gpu: FakeGpu) -> GpuSnapshot:
    configure_nvml(FakeNvmlConfig(gpus=[gpu]))
    backend = NvmlBackend()
    opened.append(backend)
    (snapshot,) = backend.read().gpus
    return snapshot


@pytest.mark.parametrize("code", [UNKNOWN_ERROR, TIMEOUT, INSUFFICIENT_SIZE])
def test_a_failed_process_list_marks_the_gpus_processes_unknown(
    configure_nvml: ConfigureNvml, backend_of: list[NvmlBackend], code: int
) -> None:
    busy = FakeGpu(
        uuid="GPU-0",
        memory_used_bytes=40 * GIB,
        utilization_percent=90,
        processes=[FakeProcess(100, 40 * GIB)],
        errors={"processes": code},
    )
    gpu = _read(configure_nvml, backend_of, busy)
    assert gpu.processes == ()
    assert gpu.processes_known is False
    assert gpu.healthy  # the rest of the GPU still reports
    assert gpu.memory_used_bytes == 40 * GIB


def test_a_process_list_the_driver_lacks_or_an_idle_gpu_is_known(
    configure_nvml: ConfigureNvml, backend_of: list[NvmlBackend]
) -> None:
    idle = _read(configure_nvml, backend_of, FakeGpu(uuid="GPU-0"))
    assert (idle.processes, idle.processes_known) == ((), True)
    unsupported = _read(configure_nvml, backend_of, FakeGpu(uuid="GPU-0", errors={"processes": NOT_SUPPORTED}))
    assert unsupported.processes_known is True
    busy = _read(configure_nvml, backend_of, FakeGpu(uuid="GPU-0", processes=[FakeProcess(7, GIB)]))
    assert ([p.pid for p in busy.processes], busy.processes_known) == ([7], True)


class _Reading:
    """A backend that reports one GPU with two processes."""

    def read(self) -> NodeReading:
        processes = (ProcessSnapshot(pid=100, memory_used_bytes=GIB), ProcessSnapshot(pid=200, memory_used_bytes=GIB))
        return NodeReading(driver_version="x", gpus=(GpuSnapshot(index=0, uuid="GPU-0", processes=processes),))

    def close(self) -> None:
        pass


def test_an_unreadable_proc_root_keeps_every_process_unresolved_instead_of_dropping_it(tmp_path: Path) -> None:
    agent = CollectorAgent(node="n1", backend=_Reading(), proc_root=tmp_path / "no-proc")
    (gpu,) = agent.collect_once().gpus
    assert [p.pid for p in gpu.processes] == [100, 200]
    assert all(p.pod is not None and p.pod.owner_kind == UNRESOLVED_OWNER_KIND for p in gpu.processes)


def test_with_a_readable_proc_root_an_exited_process_is_still_left_out(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "100").mkdir(parents=True)
    (proc / "100" / "cgroup").write_text("0::/system.slice/sshd.service\n")
    agent = CollectorAgent(node="n1", backend=_Reading(), proc_root=proc)
    (gpu,) = agent.collect_once().gpus
    assert [p.pid for p in gpu.processes] == [100]
