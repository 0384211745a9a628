"""The trace's side of FGD fragmentation: a pod list as the target workload, for the `fgd` policy (numpy form) and
for the advisor's scorer (`ScoringConfig.task_mix`), CPU and memory included in both. The math is
`advisor.placement.fragmentation`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from advisor.placement.fragmentation import TaskMix, Workload, workload_of_requests
from advisor.sim.model import GPU_MILLI, Cluster, Pod

UNUSABLE_CPU_MILLI = 1e12
"""The CPU request a task mix gives a request that cannot use a node's GPUs (a GPU model it does not accept, or no GPU
at all: `task_mix_for_model`, `task_mix_of`): no node has that much, so the scorer counts all of a node's free GPU
share as fragment for it — FGD's rule for a node a task cannot use."""


PodSpec = tuple[float, int, int, tuple[str, ...]]
"""A pod's spec as the FGD authors count popularity: (milli-CPU, GPUs, milli-GPU per GPU or 0, acceptable models)."""


def pod_spec(pod: Pod) -> PodSpec:
    return (float(pod.cpu_milli), pod.num_gpu, pod.gpu_milli if pod.num_gpu else 0, pod.gpu_models)


def popular_specs(pods: Sequence[Pod], coverage_ratio: float) -> list[tuple[PodSpec, int]]:
    """The most popular specs of `pods` with their counts, until they cover `coverage_ratio` of the pods (1: every
    spec); equal counts in spec order — the FGD authors' target workload (`podPopularityThreshold`)."""
    counts = Counter(map(pod_spec, pods))
    if not counts:
        raise ValueError("the target workload needs at least one pod")
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    kept: list[tuple[PodSpec, int]] = []
    covered = 0
    for spec, n in ranked:
        if covered >= coverage_ratio * len(pods):
            break
        kept.append((spec, n))
        covered += n
    return kept


def popular_pods(pods: Sequence[Pod], coverage_ratio: float) -> list[Pod]:
    """The pods whose spec is among `popular_specs`: a trace as its most popular requests see it."""
    kept = {spec for spec, _ in popular_specs(pods, coverage_ratio)}
    return [p for p in pods if pod_spec(p) in kept]


def workload_of(pods: Sequence[Pod]) -> Workload:
    """The target workload: every distinct request of `pods`, weighted by how often it occurs."""
    if not pods:
        raise ValueError("the workload needs at least one pod")
    return workload_of_requests([(p.num_gpu, p.gpu_milli, p.cpu_milli, p.memory_mib) for p in pods])


def task_mix_of(pods: Sequence[Pod], *, with_resources: bool = True, without_gpu_all_fragment: bool = True) -> TaskMix:
    """The trace's requests as `ScoringConfig.task_mix`: (GPUs, milli per GPU, share, CPU milli, memory MiB) per
    distinct request, pods without GPU included, shares of all pods — the workload `workload_of` gives `fgd`.

    A request without GPU asks for `UNUSABLE_CPU_MILLI` (`without_gpu_all_fragment`, the default): it can use none
    of a node's GPUs, so all their free share is fragment for it, FGD's definition. Its own CPU (False) would make
    packing keep CPU free for pods that allocate no GPU. `with_resources=False`: GPU requests only, (GPUs, milli per
    GPU, share of the GPU pods) — GPU-only packing.
    """
    if not any(p.num_gpu > 0 for p in pods):
        raise ValueError("the trace has no pod that requests a GPU")
    if with_resources:
        counts: dict[tuple[int, int, float, float], int] = {}
        for p in pods:
            cpu = UNUSABLE_CPU_MILLI if without_gpu_all_fragment and p.num_gpu == 0 else float(p.cpu_milli)
            key = (p.num_gpu, _milli_of(p), cpu, float(p.memory_mib))
            counts[key] = counts.get(key, 0) + 1
        return tuple((k, m, n / len(pods), c, mem) for (k, m, c, mem), n in sorted(counts.items()))
    shapes: dict[tuple[int, int], int] = {}
    for p in pods:
        if p.num_gpu > 0:
            shapes[(p.num_gpu, _milli_of(p))] = shapes.get((p.num_gpu, _milli_of(p)), 0) + 1
    total = sum(shapes.values())
    return tuple((k, m, n / total) for (k, m), n in sorted(shapes.items()))


def task_mix_for_model(
    pods: Sequence[Pod],
    gpu_model: str,
    capacity_gpus: Mapping[str, float],
    *,
    without_gpu_all_fragment: bool = True,
) -> TaskMix:
    """`task_mix_of(pods)` as seen from a node of `gpu_model`, for a cluster with `capacity_gpus` GPUs per model.

    A request whose acceptable GPU models (`Pod.gpu_models`) leave `gpu_model` out asks for `UNUSABLE_CPU_MILLI`, so
    it fits none of that model's nodes (FGD: all their free GPU share is fragment for it); so does a request without
    GPU, as in `task_mix_of`. A request that constrains the model weighs its count × cluster GPUs / GPUs of the
    models it accepts (`scarcity_weight`): its pods all land on that part of the cluster, so a GPU there is that
    much more likely to be wanted by one of them. Placing a pod on a node then lowers the node's fragmentation by the
    weight of the requests that cannot use its model, so pods that may run anywhere go where the constrained ones
    cannot, and room on a model few pods may use is kept for them."""
    if not any(p.num_gpu > 0 for p in pods):
        raise ValueError("the trace has no pod that requests a GPU")
    counts: dict[tuple[int, int, float, float], float] = {}
    for p in pods:
        usable = (p.num_gpu > 0 or not without_gpu_all_fragment) and (not p.gpu_models or gpu_model in p.gpu_models)
        key = (p.num_gpu, _milli_of(p), float(p.cpu_milli) if usable else UNUSABLE_CPU_MILLI, float(p.memory_mib))
        counts[key] = counts.get(key, 0.0) + scarcity_weight(p.gpu_models, capacity_gpus)
    return tuple((k, m, n / len(pods), c, mem) for (k, m, c, mem), n in sorted(counts.items()))


def model_task_mixes(cluster: Cluster, pods: Sequence[Pod]) -> dict[str, TaskMix]:
    """`task_mix_for_model` for every GPU model of `cluster` (`ScoringConfig.model_task_mix`, what an admin sets per
    node pool as GPUADVISOR_MODEL_TASK_MIX); empty when no pod constrains the GPU model."""
    if not any(p.gpu_models for p in pods):
        return {}
    capacity: dict[str, float] = {}
    for node in cluster.nodes:
        capacity[node.gpu_model] = capacity.get(node.gpu_model, 0.0) + node.gpus
    return {m: task_mix_for_model(pods, m, capacity) for m in sorted(m for m, n in capacity.items() if n > 0)}


def scarcity_weight(gpu_models: tuple[str, ...], capacity_gpus: Mapping[str, float]) -> float:
    """How much one pod accepting `gpu_models` (empty: any) weighs in a per-model task mix: the cluster's GPUs over
    the GPUs of the models it accepts (1 for a pod that accepts any; a pod no GPU in the cluster accepts, 1)."""
    if not gpu_models:
        return 1.0
    usable = sum(capacity_gpus.get(m, 0.0) for m in set(gpu_models))
    return sum(capacity_gpus.values()) / usable if usable > 0 else 1.0


def _milli_of(pod: Pod) -> int:
    """Milli-GPU per GPU as the task mix writes it: a share's milli, 1000 for whole GPUs, 0 without GPU."""
    if pod.num_gpu == 0:
        return 0
    return int(min(pod.gpu_milli, GPU_MILLI)) if pod.num_gpu == 1 else GPU_MILLI
