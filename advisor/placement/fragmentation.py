"""GPU fragmentation as FGD defines it (Weng et al., "Beware of Fragmentation", USENIX ATC'23): the one definition
that both the service's scorer (`advisor.placement.scoring`, packing component) and the simulator (`advisor.sim`, `fgd`
policy and the fragmentation figures) use.

For a node n and a task type m of the target workload M (popularity p_m):

* if m cannot run on n at all (too few free GPUs, no GPU with a large enough free share, or — where the caller
  knows them — not enough CPU or memory), every unallocated GPU share of n is a fragment: F_n(m) = Σ_g R_g;
* otherwise the fragments are the GPUs whose free share is smaller than what m needs from one GPU:
  F_n(m) = Σ_g R_g · [R_g < min(D_m, 1)], with D_m the task's GPU demand (a share below 1, or k whole GPUs).

F_n(M) = Σ_m p_m F_n(m) is the expected fragmentation; FGD places each pod where it increases F_n(M) the least.
Amounts are in milli-GPU. A task type is a share when it asks for one GPU and less than 1000 milli of it; every
other GPU task needs `gpus` wholly free GPUs.

Two forms of the same F:

* `node_fragmentation_milli` — one node, plain Python, cached per (free shares, NVLink islands, task mix): the
  scorer's form. It knows the node's topology: a task of 1 < k ≤ largest-NVLink-island GPUs only counts as runnable
  when one island has k free GPUs (a node without NVLink has singleton islands and this is exactly FGD). GPU-only;
  `node_fragmentation_fit_milli` adds CPU and memory when the task mix gives them (`MixResources`: which task types
  fit the node's free CPU/memory, read from the same cumulative `Workload` table as the vectorised form, keyed by a
  fit index so that the result stays cacheable).
* `Workload` / `NodeCache` — many nodes at once with numpy, CPU and memory included, per-node sums cached and a
  placement's effect computed from the one or few GPUs it changes: the simulator's form for ~10,000 pods over
  1,213 nodes in seconds (its nodes carry no NVLink islands for this purpose).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

GPU_MILLI = 1000

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

TaskType = tuple[int, int, float] | tuple[int, int, float, float | None, float | None]
"""One request shape of the target workload: (GPUs, milli-GPU per GPU, popularity), optionally followed by its CPU
request in milli-CPU and its memory request in MiB (None: unknown, counts as fitting anywhere). A share is
(1, milli < 1000, p); a task without GPU is (0, 0, p, cpu, memory) and only matters through its CPU and memory."""

TaskMix = tuple[TaskType, ...]
"""The target workload's request shapes (`TaskType`); popularities need not sum to 1 (they scale F)."""

DEFAULT_TASK_MIX: TaskMix = (
    (1, 250, 0.10),
    (1, 500, 0.20),
    (1, 1000, 0.30),
    (2, 1000, 0.15),
    (4, 1000, 0.15),
    (8, 1000, 0.10),
)
"""A typical mix for a shared inference + training cluster: 30% GPU shares (quarter and half GPUs), 30% one-GPU,
40% multi-GPU pods. Alibaba's openb trace has ~44% shares among its GPU pods; set your own from your pod history."""


class TaskMixError(ValueError):
    """A task mix that cannot describe a workload; the message names the offending entry."""


def validate_task_mix(mix: TaskMix) -> None:
    """Raise `TaskMixError` unless every entry is (GPUs ≥ 1, 1..1000 milli, popularity ≥ 0[, CPU ≥ 0, memory ≥ 0]) or a
    task without GPU (0, 0, popularity, CPU, memory) with its CPU or memory given, and some popularity is > 0."""
    if not mix:
        raise TaskMixError("task_mix must list at least one (gpus, milli, probability) entry")
    for i, entry in enumerate(mix):
        if len(entry) not in (3, 5):
            raise TaskMixError(
                f"task_mix[{i}]: expected [gpus, milli, probability] or [gpus, milli, probability, cpu_milli, "
                f"memory_mib], got {len(entry)} values"
            )
        gpus, milli, p = entry[:3]
        cpu, memory = (entry[3], entry[4]) if len(entry) == 5 else (None, None)
        if gpus < 0:
            raise TaskMixError(f"task_mix[{i}]: gpus must be >= 0, got {gpus}")
        if gpus == 0:
            if milli != 0:
                raise TaskMixError(f"task_mix[{i}]: gpus 0 (a task without GPU) needs milli 0, got {milli}")
            if cpu is None and memory is None:
                raise TaskMixError(f"task_mix[{i}]: a task without GPU needs its cpu_milli or memory_mib")
        elif not 1 <= milli <= GPU_MILLI:
            raise TaskMixError(f"task_mix[{i}]: milli must be within 1..{GPU_MILLI}, got {milli}")
        if p < 0:
            raise TaskMixError(f"task_mix[{i}]: probability must be >= 0, got {p}")
        if cpu is not None and cpu < 0:
            raise TaskMixError(f"task_mix[{i}]: cpu_milli must be >= 0, got {cpu}")
        if memory is not None and memory < 0:
            raise TaskMixError(f"task_mix[{i}]: memory_mib must be >= 0, got {memory}")
    if sum(entry[2] for entry in mix) <= 0:
        raise TaskMixError("task_mix probabilities must not all be 0")


_TASK_FIELDS = ("gpus", "milli", "probability", "cpu_milli", "memory_mib")


def parse_task_mix(raw: object) -> TaskMix:
    """A task mix from JSON-like data (a list of 3- or 5-number lists, CPU/memory may be null), validated."""
    if not isinstance(raw, (list, tuple)):
        raise TaskMixError(
            f"task_mix must be a list of [gpus, milli, probability(, cpu_milli, memory_mib)], got {raw!r}"
        )
    out: list[TaskType] = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, (list, tuple)) or len(entry) not in (3, 5):
            raise TaskMixError(
                f"task_mix[{i}]: expected [gpus, milli, probability] or [gpus, milli, probability, cpu_milli, "
                f"memory_mib], got {entry!r}"
            )
        for name, value in zip(_TASK_FIELDS, entry, strict=False):
            optional = name in ("cpu_milli", "memory_mib")
            if (
                (value is None and not optional)
                or isinstance(value, bool)
                or not isinstance(value, (int, float, type(None)))
            ):
                what = "a number or null" if optional else "a number"
                raise TaskMixError(f"task_mix[{i}]: {name} must be {what}, got {value!r}")
        gpus, milli = entry[0], entry[1]
        if gpus != int(gpus) or milli != int(milli):
            raise TaskMixError(f"task_mix[{i}]: gpus and milli must be whole numbers, got {gpus}, {milli}")
        if len(entry) == 3:
            out.append((int(gpus), int(milli), float(entry[2])))
        else:
            cpu, memory = entry[3], entry[4]
            out.append(
                (
                    int(gpus),
                    int(milli),
                    float(entry[2]),
                    None if cpu is None else float(cpu),
                    None if memory is None else float(memory),
                )
            )
    mix = tuple(out)
    validate_task_mix(mix)
    return mix


def whole_gpu_mix(task_sizes: Sequence[tuple[int, float]]) -> TaskMix:
    """A task mix of whole-GPU requests only, from (GPUs, probability) pairs (sizes ≤ 0 are dropped)."""
    return tuple((k, GPU_MILLI, p) for k, p in task_sizes if k > 0)


@lru_cache(maxsize=131072)
def node_fragmentation_milli(
    free_milli: tuple[int, ...], islands: tuple[int, ...], largest_island: int, mix: TaskMix
) -> float:
    """F_n(M) in milli-GPU of one node from each GPU's free milli (0 for an unhealthy GPU), GPU-only.

    `islands` are the NVLink islands as bit masks over GPU positions and `largest_island` the size of the largest.
    """
    if sum(free_milli) == 0:
        return 0.0
    fragments = _fragments(free_milli, islands, largest_island, _shapes_of(mix))
    out = 0.0
    for entry, x in zip(mix, fragments, strict=True):
        out += entry[2] * x
    return out


@lru_cache(maxsize=256)
def _shapes_of(mix: TaskMix) -> tuple[tuple[int, int], ...]:
    return tuple((e[0], e[1]) for e in mix)


def _fragments(
    free_milli: tuple[int, ...], islands: tuple[int, ...], largest_island: int, shapes: tuple[tuple[int, int], ...]
) -> tuple[float, ...]:
    """F_n(m) in milli-GPU for each (GPUs, milli per GPU) shape, GPU-only (a shape without GPU: 0, it always fits)."""
    total = sum(free_milli)
    full_mask = 0
    for pos, r in enumerate(free_milli):
        if r >= GPU_MILLI:
            full_mask |= 1 << pos
    full = full_mask.bit_count()
    partial = total - full * GPU_MILLI
    max_free = max(free_milli, default=0)
    out: list[float] = []
    for k, milli in shapes:
        if k == 0:
            out.append(0.0)
            continue
        if k == 1 and milli < GPU_MILLI:
            out.append(total if max_free < milli else sum(r for r in free_milli if r < milli))
            continue
        if 1 < k <= largest_island:
            fits = any((full_mask & island).bit_count() >= k for island in islands)
        else:
            fits = full >= k
        out.append(partial if fits else total)
    return tuple(out)


task_fragments_milli = lru_cache(maxsize=131072)(_fragments)
"""`_fragments`, cached: the per-shape fragments of a node state, shared by every CPU/memory fit index."""


class MixResources:
    """The CPU and memory side of a task mix whose entries give them: which task types still fit a node's free CPU
    and memory. Built on `Workload`'s cumulative table (the same one the vectorised form uses); the GPU side stays
    the scalar, topology-aware `task_fragments_milli`.

    A node's free CPU and memory map to a fit index (a, b) — how many distinct CPU and memory requests of the mix
    are at most what is free — and F_n(M) depends on them only through that index, so it is cached per index.
    Hashed by identity (build one per `ScoringConfig`).
    """

    __slots__ = ("_cpu_grid", "_memory_grid", "_weights", "all_weights", "full_index", "shapes", "workload")

    def __init__(self, mix: TaskMix) -> None:
        requests = [
            (e[0], e[1], float(e[3] or 0.0), float(e[4] or 0.0)) if len(e) == 5 else (e[0], e[1], 0.0, 0.0) for e in mix
        ]
        self.workload = workload_of_requests(requests, weights=[e[2] for e in mix])
        w = self.workload
        self.shapes: tuple[tuple[int, int], ...] = tuple(
            (int(k), int(m)) for k, m in zip(w.class_gpus, w.class_milli, strict=True)
        )
        self._cpu_grid: list[float] = [float(x) for x in w.cpu_grid]
        self._memory_grid: list[float] = [float(x) for x in w.memory_grid]
        self._weights: dict[tuple[int, int], tuple[float, ...]] = {}
        self.full_index = (len(self._cpu_grid), len(self._memory_grid))
        self.all_weights = self.weights(*self.full_index)

    def fit_index(self, cpu_free_milli: float, memory_free_mib: float) -> tuple[int, int]:
        """(a, b): how many of the mix's distinct CPU / memory requests fit in what is free."""
        return bisect_right(self._cpu_grid, cpu_free_milli), bisect_right(self._memory_grid, memory_free_mib)

    def cpu_at(self, a: int) -> float:
        """The free milli-CPU that CPU fit index `a` vouches for: the largest of the mix's CPU requests that fits
        (0 below every request)."""
        return self._cpu_grid[a - 1] if a > 0 else 0.0

    def weights(self, a: int, b: int) -> tuple[float, ...]:
        """Per GPU shape (`shapes`), the popularity of its task types that fit at fit index (a, b)."""
        found = self._weights.get((a, b))
        if found is None:
            found = self._weights[(a, b)] = tuple(float(x) for x in self.workload.table[:, a, b])
        return found


def mix_resources(mix: TaskMix) -> MixResources | None:
    """The mix's CPU/memory side, or None when no entry gives a CPU or memory request (GPU-only fragmentation)."""
    if all(len(e) == 3 or (e[3] is None and e[4] is None) for e in mix):
        return None
    return MixResources(mix)


@lru_cache(maxsize=131072)
def node_fragmentation_fit_milli(
    free_milli: tuple[int, ...],
    islands: tuple[int, ...],
    largest_island: int,
    resources: MixResources,
    fit: tuple[int, int],
) -> float:
    """F_n(M) in milli-GPU with CPU and memory: a task type whose CPU or memory does not fit the node's free amounts
    (fit index `fit`, `MixResources.fit_index`) cannot run there, so every free GPU share counts as its fragment."""
    total = sum(free_milli)
    if total == 0:
        return 0.0
    fragments = task_fragments_milli(free_milli, islands, largest_island, resources.shapes)
    out = 0.0
    for x, w, w_all in zip(fragments, resources.weights(*fit), resources.all_weights, strict=True):
        out += w * x + (w_all - w) * total
    return out


# --------------------------------------------------------------------------------------------------------------------
# The vectorised form (many nodes, CPU and memory included)


@dataclass(frozen=True)
class Workload:
    """The target workload, grouped into GPU classes j = (GPUs, milli per GPU) with CPU/memory tables.

    `table[j, a, b]` is the total popularity of the types of class j whose CPU request is at most `cpu_grid[a-1]`
    and memory request at most `memory_grid[b-1]` (index 0 = below every request).
    """

    class_gpus: IntArray
    class_milli: FloatArray
    threshold_milli: FloatArray
    cpu_grid: FloatArray
    memory_grid: FloatArray
    table: FloatArray

    @property
    def is_share(self) -> NDArray[np.bool_]:
        share: NDArray[np.bool_] = (self.class_gpus == 1) & (self.class_milli < GPU_MILLI)
        return share

    def weight_fitting(self, cpu_free: FloatArray, memory_free: FloatArray) -> FloatArray:
        """(C, J): popularity of each class's types whose CPU and memory fit in the given free amounts."""
        a = np.searchsorted(self.cpu_grid, cpu_free, side="right")
        b = np.searchsorted(self.memory_grid, memory_free, side="right")
        return self.table[:, a, b].T


def workload_of_requests(
    requests: Sequence[tuple[int, int, float, float]], weights: Sequence[float] | None = None
) -> Workload:
    """The target workload: every (GPUs, milli per GPU, CPU milli, memory MiB) request with its popularity (`weights`
    as given, or by default each request 1 / len(requests), i.e. weighted by how often it occurs)."""
    if not requests:
        raise ValueError("the workload needs at least one request")
    keys = [(k, m if k else 0, c, mem) for k, m, c, mem in requests]
    classes = sorted({(k, m) for k, m, _, _ in keys})
    class_index = {c: i for i, c in enumerate(classes)}
    cpu_grid = np.array(sorted({c for _, _, c, _ in keys}), dtype=np.float64)
    memory_grid = np.array(sorted({m for _, _, _, m in keys}), dtype=np.float64)
    counts = np.zeros((len(classes), len(cpu_grid) + 1, len(memory_grid) + 1))
    if weights is not None and len(weights) != len(keys):
        raise ValueError(f"{len(weights)} weights for {len(keys)} requests")
    for i, (k, m, c, mem) in enumerate(keys):
        a = int(np.searchsorted(cpu_grid, c)) + 1
        b = int(np.searchsorted(memory_grid, mem)) + 1
        counts[class_index[(k, m)], a, b] += 1.0 if weights is None else weights[i]
    table = counts.cumsum(axis=1).cumsum(axis=2)
    if weights is None:
        table = table / len(keys)
    class_gpus = np.array([k for k, _ in classes], dtype=np.int64)
    class_milli = np.array([m for _, m in classes], dtype=np.float64)
    threshold = np.where(class_gpus == 0, 0.0, np.minimum(class_milli, GPU_MILLI)).astype(np.float64)
    return Workload(class_gpus, class_milli, threshold, cpu_grid, memory_grid, table)


def class_sums(free: FloatArray, workload: Workload) -> FloatArray:
    """(C, J): Σ_g R_g · [R_g < threshold_j] for node rows `free` (C, G)."""
    below = free[:, :, None] < workload.threshold_milli[None, None, :]
    sums: FloatArray = (free[:, :, None] * below).sum(axis=1)
    return sums


def expected_fragmentation(
    sums: FloatArray,
    total: FloatArray,
    *,
    full: FloatArray,
    max_free: FloatArray,
    cpu_free: FloatArray,
    memory_free: FloatArray,
    workload: Workload,
) -> FloatArray:
    """F_n(M) in milli-GPU for C node states given their per-class sums and summary statistics (all (C,) but sums)."""
    gpu_ok = np.where(
        workload.class_gpus[None, :] == 0,
        True,
        np.where(
            workload.is_share[None, :],
            max_free[:, None] >= workload.class_milli[None, :],
            full[:, None] >= workload.class_gpus[None, :],
        ),
    )
    fitting = workload.weight_fitting(cpu_free, memory_free) * gpu_ok
    result: FloatArray = total - (fitting * (total[:, None] - sums)).sum(axis=1)
    return result


class NodeCache:
    """Per-node aggregates of a fragmentation run, updated node by node as pods are placed."""

    def __init__(self, free: FloatArray, cpu_free: FloatArray, memory_free: FloatArray, workload: Workload) -> None:
        self.workload = workload
        self.sums = class_sums(free, workload)
        self.total = free.sum(axis=1)
        self.full = (free >= GPU_MILLI).sum(axis=1).astype(np.float64)
        ordered = -np.sort(-free, axis=1)
        self.max1 = ordered[:, 0].copy()
        self.max2 = ordered[:, 1].copy() if free.shape[1] > 1 else np.zeros(len(free))
        below_full = np.where(free < GPU_MILLI, free, 0.0)
        self.max_partial = below_full.max(axis=1)
        self.frag = expected_fragmentation(
            self.sums,
            self.total,
            full=self.full,
            max_free=self.max1,
            cpu_free=cpu_free,
            memory_free=memory_free,
            workload=workload,
        )

    def refresh(self, node: int, free_row: FloatArray, cpu_free: float, memory_free: float) -> None:
        row = free_row[None, :]
        self.sums[node] = class_sums(row, self.workload)[0]
        self.total[node] = free_row.sum()
        self.full[node] = float((free_row >= GPU_MILLI).sum())
        ordered = np.sort(free_row)[::-1]
        self.max1[node] = ordered[0]
        self.max2[node] = ordered[1] if len(ordered) > 1 else 0.0
        self.max_partial[node] = float(np.where(free_row < GPU_MILLI, free_row, 0.0).max())
        self.frag[node] = expected_fragmentation(
            self.sums[node : node + 1],
            self.total[node : node + 1],
            full=self.full[node : node + 1],
            max_free=self.max1[node : node + 1],
            cpu_free=np.array([cpu_free]),
            memory_free=np.array([memory_free]),
            workload=self.workload,
        )[0]

    def _h(self, values: FloatArray) -> FloatArray:
        """(C, J): R · [R < threshold_j] for one GPU value per candidate."""
        return values[:, None] * (values[:, None] < self.workload.threshold_milli[None, :])

    def delta_share(
        self, nodes: IntArray, gpu_free: FloatArray, milli: float, cpu_after: FloatArray, memory_after: FloatArray
    ) -> FloatArray:
        """ΔF for taking `milli` from a GPU with `gpu_free` free on each candidate node."""
        after = gpu_free - milli
        sums = self.sums[nodes] - self._h(gpu_free) + self._h(after)
        total = self.total[nodes] - milli
        full = self.full[nodes] - (gpu_free >= GPU_MILLI)
        other = np.where(
            (gpu_free < self.max1[nodes]) | (self.max2[nodes] == self.max1[nodes]), self.max1[nodes], self.max2[nodes]
        )
        max_free = np.maximum(after, other)
        return self._delta(
            nodes, sums, total, full=full, max_free=max_free, cpu_after=cpu_after, memory_after=memory_after
        )

    def delta_whole(self, nodes: IntArray, gpus: int, cpu_after: FloatArray, memory_after: FloatArray) -> FloatArray:
        """ΔF for taking `gpus` whole free GPUs on each candidate node (which ones does not matter for F)."""
        full_value = np.full(len(nodes), float(GPU_MILLI))
        sums = self.sums[nodes] - gpus * self._h(full_value)
        total = self.total[nodes] - gpus * GPU_MILLI
        full = self.full[nodes] - gpus
        max_free = np.where(full > 0, float(GPU_MILLI), self.max_partial[nodes])
        return self._delta(
            nodes, sums, total, full=full, max_free=max_free, cpu_after=cpu_after, memory_after=memory_after
        )

    def _delta(
        self,
        nodes: IntArray,
        sums: FloatArray,
        total: FloatArray,
        *,
        full: FloatArray,
        max_free: FloatArray,
        cpu_after: FloatArray,
        memory_after: FloatArray,
    ) -> FloatArray:
        """ΔF of the candidate nodes from their state after the placement."""
        new = expected_fragmentation(
            sums,
            total,
            full=full,
            max_free=max_free,
            cpu_free=cpu_after,
            memory_free=memory_after,
            workload=self.workload,
        )
        delta: FloatArray = new - self.frag[nodes]
        return delta
