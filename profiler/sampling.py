"""Telemetry of a set of processes from one collector reading: what the local runner samples for its trials.

Pure: takes the collector backend's `NodeReading` (NVML, the simulated backend or the stand-in library all
produce it) and the host PIDs of a trial side; the local runner does the reading and the process-tree walk.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from collector.backend import NodeReading
from profiler.summary import TelemetrySample


def telemetry_for(reading: NodeReading, pids: Iterable[int], t_seconds: float) -> TelemetrySample | None:
    """The GPU use of `pids` at `t_seconds`, or None when none of them is on a GPU in this reading.

    Memory and SM utilisation are the processes' own (summed over their GPUs; a GPU without per-process
    utilisation falls back to the whole GPU's); memory bandwidth is averaged and power summed over the GPUs
    they run on, which for a shared GPU includes the partner.
    """
    wanted = set(pids)
    memory = 0
    memory_known = False
    sm: list[float] = []
    bandwidth: list[float] = []
    power: list[float] = []
    for gpu in reading.gpus:
        mine = [p for p in gpu.processes if p.pid in wanted]
        if not mine or not gpu.healthy:
            continue
        for process in mine:
            if process.memory_used_bytes is not None:
                memory += process.memory_used_bytes
                memory_known = True
        per_process = [p.sm_utilization_ratio for p in mine if p.sm_utilization_ratio is not None]
        if per_process:
            sm.append(min(1.0, sum(per_process)))
        elif gpu.utilization_ratio is not None:
            sm.append(gpu.utilization_ratio)
        if gpu.memory_bandwidth_utilization_ratio is not None:
            bandwidth.append(gpu.memory_bandwidth_utilization_ratio)
        if gpu.power_watts is not None:
            power.append(gpu.power_watts)
    if not (memory_known or sm or bandwidth or power):
        return None
    return TelemetrySample(
        t_seconds=t_seconds,
        sm_utilization_ratio=sum(sm) / len(sm) if sm else None,
        memory_bandwidth_utilization_ratio=sum(bandwidth) / len(bandwidth) if bandwidth else None,
        memory_used_bytes=memory if memory_known else None,
        power_watts=sum(power) if power else None,
    )


def process_tree(root_pid: int, proc_root: Path = Path("/proc")) -> set[int]:
    """`root_pid` and all its descendants (a workload may be a shell that starts the real trainer)."""
    children: dict[int, list[int]] = {}
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may contain spaces and parentheses; the fields after the last ')' are fixed.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 2:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree = {root_pid}
    frontier = [root_pid]
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in tree:
                tree.add(child)
                frontier.append(child)
    return tree
