"""The trace's side of FGD fragmentation: a pod list as the target workload, for the `fgd` policy (numpy form, CPU
and memory included) and for the advisor's scorer (`ScoringConfig.task_mix`). The math is `advisor.fragmentation`.
"""

from __future__ import annotations

from collections.abc import Sequence

from advisor.fragmentation import TaskMix, Workload, workload_of_requests
from advisor.sim.model import GPU_MILLI, Pod


def workload_of(pods: Sequence[Pod]) -> Workload:
    """The target workload: every distinct request of `pods`, weighted by how often it occurs."""
    if not pods:
        raise ValueError("the workload needs at least one pod")
    return workload_of_requests([(p.num_gpu, p.gpu_milli, p.cpu_milli, p.memory_mib) for p in pods])


def task_mix_of(pods: Sequence[Pod]) -> TaskMix:
    """The trace's GPU requests as `ScoringConfig.task_mix`: (GPUs, milli per GPU, share of the GPU pods)."""
    counts: dict[tuple[int, int], int] = {}
    for p in pods:
        if p.num_gpu > 0:
            shape = (p.num_gpu, int(min(p.gpu_milli, GPU_MILLI)) if p.num_gpu == 1 else GPU_MILLI)
            counts[shape] = counts.get(shape, 0) + 1
    total = sum(counts.values())
    if total == 0:
        raise ValueError("the trace has no pod that requests a GPU")
    return tuple((k, m, n / total) for (k, m), n in sorted(counts.items()))
