"""The simulator's vocabulary: a cluster, the pods of a fragmentation run, the jobs of a JCT run, true throughputs.

Plain frozen dataclasses, no I/O; the loaders build them from files and the engines only read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GPU_MILLI = 1000
"""One whole GPU in milli-GPU units (openb's `gpu_milli`; docs/design.md §5 annotation `gpuadvisor.io/gpu-milli`)."""


@dataclass(frozen=True, slots=True)
class SimNode:
    """One node: its GPUs, optionally its CPU and memory, and which GPUs are joined by NVLink.

    `nvlink_groups` lists disjoint GPU index groups whose members talk over NVLink; GPUs in different groups (or on a
    node without groups) talk over PCIe/the host. `cpu_milli`/`memory_mib` are None when the cluster file does not say.
    """

    name: str
    gpu_model: str
    gpus: int
    cpu_milli: float | None = None
    memory_mib: float | None = None
    nvlink_groups: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class Cluster:
    nodes: tuple[SimNode, ...]

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def max_gpus_per_node(self) -> int:
        return max((n.gpus for n in self.nodes), default=0)


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod of a fragmentation run: `num_gpu` GPUs of `gpu_milli` each (a share of one GPU when below 1000)."""

    name: str
    num_gpu: int
    gpu_milli: int
    cpu_milli: float = 0.0
    memory_mib: float = 0.0

    @property
    def gpu_demand(self) -> float:
        """GPUs this pod asks for (a share counts as its fraction)."""
        return self.num_gpu * self.gpu_milli / GPU_MILLI


@dataclass(frozen=True, slots=True)
class Job:
    """A job of a JCT run: arrives, needs `num_gpus` GPUs, and is done after `work` units.

    `work` is in steps when the trace comes with a throughput table (Gavel: `total_steps`), otherwise in seconds of
    run time on a well-placed GPU set (Philly's `duration`, openb's run time, an execution record's start→end).
    """

    job_id: str
    job_type: str
    arrival_s: float
    num_gpus: int
    work: float


@dataclass(frozen=True, slots=True)
class Throughputs:
    """Ground truth of a JCT run (the oracle reads it; nobody else does).

    `isolated[(gpu_model, job_type, gpu_count, consolidated)]` = steps/s alone, `consolidated` meaning on one node.
    `colocated[(gpu_model, job_a, job_b)]` = (throughput of a, throughput of b) while the two 1-GPU jobs share one GPU;
    a pair missing from the table, or measured as (0, 0), cannot share.
    """

    isolated: dict[tuple[str, str, int, bool], float] = field(default_factory=dict)
    colocated: dict[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)

    @property
    def job_types(self) -> set[str]:
        return {k[1] for k in self.isolated}

    @property
    def gpu_models(self) -> set[str]:
        return {k[0] for k in self.isolated}


def best_index(values: np.ndarray, rng: np.random.Generator | None) -> int:
    """The position of the largest of `values`, a tie broken uniformly at random as kube-scheduler's `selectHost`
    does (the first one when `rng` is None). Without the random draw a tie always goes to the node listed first, and
    on a cluster file listed K80 first that makes spread look slower than kube-scheduler is."""
    top = np.flatnonzero(values >= np.max(values))
    if rng is None or len(top) == 1:
        return int(top[0])
    return int(top[int(rng.integers(len(top)))])
