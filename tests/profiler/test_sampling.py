"""Telemetry of a trial side's processes from one collector reading, and the process-tree walk over /proc."""

from __future__ import annotations

from pathlib import Path

from collector.backend import NodeReading
from collector.snapshot import GpuSnapshot, ProcessSnapshot
from profiler.sampling import process_tree, telemetry_for


def _gpu(index: int, *processes: ProcessSnapshot, utilization: float | None = 0.9) -> GpuSnapshot:
    return GpuSnapshot(
        index=index,
        uuid=f"GPU-{index}",
        model="NVIDIA A100",
        pci_bus_id=f"0000:0{index}:00.0",
        utilization_ratio=utilization,
        memory_bandwidth_utilization_ratio=0.3 + index / 10,
        power_watts=200.0,
        processes=processes,
    )


def test_a_side_gets_its_own_processes_memory_and_utilisation_across_its_gpus() -> None:
    reading = NodeReading(
        driver_version="550",
        gpus=(
            _gpu(
                0,
                ProcessSnapshot(pid=10, memory_used_bytes=2 << 30, sm_utilization_ratio=0.4),
                ProcessSnapshot(pid=99, memory_used_bytes=5 << 30, sm_utilization_ratio=0.5),
            ),
            _gpu(1, ProcessSnapshot(pid=11, memory_used_bytes=1 << 30, sm_utilization_ratio=None), utilization=0.7),
            _gpu(2, ProcessSnapshot(pid=99, memory_used_bytes=1 << 30, sm_utilization_ratio=0.2)),
        ),
    )
    sample = telemetry_for(reading, {10, 11}, 5.0)
    assert sample is not None
    assert sample.memory_used_bytes == 3 << 30
    assert sample.sm_utilization_ratio == (0.4 + 0.7) / 2  # GPU 1 has no per-process figure: the GPU's
    assert sample.memory_bandwidth_utilization_ratio == (0.3 + 0.4) / 2
    assert sample.power_watts == 400.0
    assert telemetry_for(reading, {12345}, 5.0) is None


def test_process_tree_follows_children_in_a_proc_tree(tmp_path: Path) -> None:
    for pid, ppid, name in (
        (1, 0, "init"),
        (20, 1, "sh"),
        (21, 20, "python (trainer)"),
        (22, 21, "worker"),
        (30, 1, "x"),
    ):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) S {ppid} 1 1 0 -1\n")
    (tmp_path / "self").mkdir()
    assert process_tree(20, tmp_path) == {20, 21, 22}
