"""The FGD paper's policies as its authors' simulator runs them (Weng et al., "Beware of Fragmentation", USENIX
ATC'23; hkust-adsl/kubernetes-scheduler-simulator), so that `gpuadvisor simulate` compares against the numbers the
paper's readers know: Random, DotProd, GpuClustering, GpuPacking, BestFit and FGD, with the authors' target workload
("typical pods") and fragmentation measure. Written from the paper and a reading of that simulator, not copied.

The authors' choices, each measured in docs/evaluation.md ("The paper's policies"):

* target workload (`typical_pods`): pod specs — CPU, GPUs, milli-GPU per GPU, acceptable GPU models — by decreasing
  count, the most popular until they cover 95 % of the trace's pods (CPU-only pods included), popularities
  renormalised over those;
* a node's fragment for one task type (`TypicalFragmentation`): all its free GPU share when the task asks for no GPU
  (it can use none of it), when the node's GPU model is not one the task accepts, when the node lacks the task's CPU
  or has too few GPUs with room for it; otherwise the free share of the GPUs with less free than the task needs from
  one GPU. Memory is not part of it;
* every score is an integer 0..100, and of the nodes with the highest score the first by name wins
  (`first_best`) — by the name the authors' simulator gives each node: before creating the nodes it prefixes each
  name with its index in a random permutation drawn from the run's seed, so ties go in a random order fixed for the
  run (`authors_node_rank`), not in the trace's name order. FGD's score is ⌊100 · sigmoid(ΔF / 1000)⌋ with ΔF the
  decrease of the node's expected fragmentation in milli-GPU; a GPU share is scored on each GPU it fits, the first
  best GPU taken;
* the other policies choose a share's GPU as the authors' GPU-share plugin does by default (the fullest GPU it fits,
  `_best_gpu`) and whole GPUs as the lowest-index fully free ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from advisor.sim.model import GPU_MILLI, Cluster, Pod
from advisor.sim.packing import BoolArray, PackState
from advisor.sim.target_workload import popular_specs

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

MAX_NODE_SCORE = 100
MAX_SPEC_CPU_MILLI = 128_000.0
"""The authors' normalisation for CPU (DotProd, BestFit): the largest node's milli-CPU in openb."""
MAX_SPEC_GPU_MILLI = 8_000.0
"""The authors' normalisation for GPU (DotProd, BestFit, GpuClustering): eight whole GPUs."""
TYPICAL_COVERAGE_RATIO = 0.95
"""Share of the trace's pods the target workload's specs cover (the authors' `podPopularityThreshold` 95)."""
SCORE_DIGITS = 6
"""ΔF is rounded to this many decimals of a milli-GPU before the integer score, so float noise in a sum over task
types cannot move an exact 50 (ΔF = 0) to 49."""


@dataclass(frozen=True, slots=True)
class TypicalPods:
    """The target workload: one entry per pod spec, with its popularity (summing to 1)."""

    cpu_milli: FloatArray
    gpus: IntArray
    gpu_milli: FloatArray
    gpu_models: tuple[tuple[str, ...], ...]
    popularity: FloatArray


def typical_pods(
    pods: Sequence[Pod], *, coverage_ratio: float = TYPICAL_COVERAGE_RATIO, with_cpu_pods: bool = True
) -> TypicalPods:
    """The most popular pod specs of `pods` until they cover `coverage_ratio` of them (1: every spec); equal counts
    in spec order. `with_cpu_pods=False` leaves pods without GPU out."""
    kept = popular_specs([p for p in pods if with_cpu_pods or p.num_gpu > 0], coverage_ratio)
    covered = sum(n for _, n in kept)
    return TypicalPods(
        cpu_milli=np.array([s[0] for s, _ in kept], dtype=np.float64),
        gpus=np.array([s[1] for s, _ in kept], dtype=np.int64),
        gpu_milli=np.array([s[2] for s, _ in kept], dtype=np.float64),
        gpu_models=tuple(s[3] for s, _ in kept),
        popularity=np.array([n / covered for _, n in kept], dtype=np.float64),
    )


class TypicalFragmentation:
    """Each node's expected fragmentation F_n = Σ_m p_m F_n(m) over the typical pods, in milli-GPU, with per-node
    sums cached so that a placement's effect is computed from the one or few GPUs it changes.

    `cpu_only_all_fragment=False` is the ablation where a task without GPU makes the node's free GPU share a fragment
    only when the node lacks its CPU (the advisor's own definition) instead of always (the authors').
    """

    def __init__(
        self,
        typical: TypicalPods,
        cluster: Cluster,
        free: FloatArray,
        cpu_free: FloatArray,
        *,
        cpu_only_all_fragment: bool = True,
    ) -> None:
        self.typical = typical
        self._milli = typical.gpu_milli
        self._gpus = typical.gpus
        self._cpu = typical.cpu_milli
        self._p = typical.popularity
        self._cpu_only_all = cpu_only_all_fragment
        self._no_gpu = typical.gpus == 0
        models = np.array([n.gpu_model for n in cluster.nodes])
        self._access: BoolArray = np.column_stack(
            [np.isin(models, list(m)) if m else np.ones(len(models), dtype=bool) for m in typical.gpu_models]
        )
        self._thresholds, column = np.unique(self._milli, return_inverse=True)
        self._column = column.reshape(-1)
        n = len(cluster.nodes)
        self.below = np.zeros((n, len(self._thresholds)))
        self.count = np.zeros((n, len(self._thresholds)))
        self.total = np.zeros(n)
        self.cpu_free = np.array(cpu_free, dtype=np.float64)
        self.frag = np.zeros(n)
        for i in range(n):
            self.refresh(i, free[i], float(cpu_free[i]))

    def _h(self, values: FloatArray) -> FloatArray:
        """(C, T): a GPU's free share where it is below threshold t (what a task needs from one GPU), else 0."""
        return values[:, None] * (values[:, None] < self._thresholds[None, :])

    def _ge(self, values: FloatArray) -> FloatArray:
        """(C, T): 1 where a GPU has room for threshold t, else 0."""
        return (values[:, None] >= self._thresholds[None, :]).astype(np.float64)

    def fragmentation(
        self, nodes: IntArray, below: FloatArray, count: FloatArray, total: FloatArray, cpu: FloatArray
    ) -> FloatArray:
        """F_n of nodes in the given state (per-threshold sums `below` and GPU counts with room `count`, free
        `total`)."""
        below = below[:, self._column]
        count = count[:, self._column]
        fits = self._access[nodes] & (count >= self._gpus[None, :]) & (cpu[:, None] >= self._cpu[None, :])
        cpu_fits = cpu[:, None] >= self._cpu[None, :]
        lost = np.where(self._no_gpu[None, :], self._cpu_only_all | ~cpu_fits, ~fits)
        per_task = np.where(lost, total[:, None], np.where(self._no_gpu[None, :], 0.0, below))
        out: FloatArray = per_task @ self._p
        return out

    def refresh(self, node: int, free_row: FloatArray, cpu_free: float) -> None:
        """Recompute node `node` from its GPUs' free milli and its free CPU."""
        row = np.asarray(free_row, dtype=np.float64)
        self.below[node] = self._h(row).sum(axis=0)
        self.count[node] = self._ge(row).sum(axis=0)
        self.total[node] = row.sum()
        self.cpu_free[node] = cpu_free
        idx = np.array([node])
        self.frag[node] = self.fragmentation(
            idx, self.below[idx], self.count[idx], self.total[idx], self.cpu_free[idx]
        )[0]

    def after_share(self, nodes: IntArray, gpu_free: FloatArray, milli: float, cpu_after: FloatArray) -> FloatArray:
        """F_n after taking `milli` from a GPU with `gpu_free` free on each of `nodes`."""
        after = gpu_free - milli
        below = self.below[nodes] - self._h(gpu_free) + self._h(after)
        count = self.count[nodes] - self._ge(gpu_free) + self._ge(after)
        return self.fragmentation(nodes, below, count, self.total[nodes] - milli, cpu_after)

    def after_whole(self, nodes: IntArray, gpus: int, cpu_after: FloatArray) -> FloatArray:
        """F_n after taking `gpus` fully free GPUs (none for a CPU-only pod) on each of `nodes`."""
        full = np.full(len(nodes), float(GPU_MILLI))
        empty = np.zeros(len(nodes))
        below = self.below[nodes] - gpus * (self._h(full) - self._h(empty))
        count = self.count[nodes] - gpus * (self._ge(full) - self._ge(empty))
        return self.fragmentation(nodes, below, count, self.total[nodes] - gpus * GPU_MILLI, cpu_after)


AUTHORS_NODE_ORDER_STREAM = 1
"""Second word of the seed of the random stream that draws `authors_node_rank`'s permutation (the first is the run's
seed), so that it is independent of the stream that draws the pod order (`authors_sequence`)."""


def authors_node_rank(cluster: Cluster, seed: int) -> IntArray:
    """Each node's position in the order the authors' simulator breaks ties by, for the run seeded `seed`.

    Their simulator sorts the nodes by name, then renames node i to `f"{perm[i]:04d}-{name}"` with `perm` a random
    permutation from the run's seeded random source (hkust-adsl/kubernetes-scheduler-simulator,
    pkg/simulator/simulator.go, `syncClusterResourceList`), and its scheduler takes the smallest name among equal
    scores (its vendored kube-scheduler's `selectHost`). So ties go in a random node order, fixed for the run and
    the same for every policy of one seed. Go's random source is not reproduced: the permutation is drawn from
    numpy's, seeded with (`seed`, `AUTHORS_NODE_ORDER_STREAM`)."""
    n = len(cluster.nodes)
    by_name = np.argsort(np.array([x.name for x in cluster.nodes]), kind="stable")
    prefix = np.random.default_rng((seed, AUTHORS_NODE_ORDER_STREAM)).permutation(n)
    rank = np.empty(n, dtype=np.int64)
    rank[by_name] = prefix
    return rank


def first_best(scores: FloatArray, nodes: IntArray, state: PackState, rng: np.random.Generator | None = None) -> int:
    """The position in `scores` of the highest score, among equal ones the first node by name (`state.name_rank`,
    the authors' node names where the run gives them: `authors_node_rank`; `rng`: at random, as stock
    kube-scheduler's `selectHost`)."""
    top = np.flatnonzero(scores >= scores.max())
    if len(top) == 1:
        return int(top[0])
    if rng is not None:
        return int(top[int(rng.integers(len(top)))])
    return int(top[np.argmin(state.name_rank[nodes[top]])])


def _best_gpu(state: PackState, node: int, pod: Pod) -> tuple[int, ...]:
    """The authors' default GPU choice: a share on the fullest GPU it fits (lowest index among equal), whole GPUs on
    the lowest-index fully free ones."""
    if pod.num_gpu == 0:
        return ()
    if pod.gpu_milli < GPU_MILLI:
        free = state.free[node]
        fits = np.flatnonzero(free >= pod.gpu_milli)
        return (int(fits[np.argmin(free[fits])]),)
    return state.whole_gpus(node, pod.num_gpu)


def _known_cpu(state: PackState, nodes: IntArray) -> FloatArray:
    """Free milli-CPU of `nodes`, 0 where the cluster file does not give CPU (the term then drops out)."""
    cpu: FloatArray = np.where(np.isfinite(state.cpu_free[nodes]), state.cpu_free[nodes], 0.0)
    return cpu


class RandomFit:
    """Random: any node where the pod fits, drawn uniformly; the GPUs as `_best_gpu`."""

    name = "random"

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def choose(self, pod: Pod, state: PackState, candidates: IntArray) -> tuple[int, tuple[int, ...]]:
        node = int(candidates[int(self._rng.integers(len(candidates)))])
        return node, _best_gpu(state, node, pod)


class DotProd:
    """DotProd (Tetris-style, as the authors configure it: GPU dimensions merged, normalised by the largest node):
    score ⌊100 · (1 − (free CPU · CPU request + free GPU · GPU request) / 2)⌋ over normalised vectors — the node whose
    free resources align least with the request, i.e. the tightest."""

    name = "dotprod"

    def choose(self, pod: Pod, state: PackState, candidates: IntArray) -> tuple[int, tuple[int, ...]]:
        cpu = _known_cpu(state, candidates) / MAX_SPEC_CPU_MILLI * (pod.cpu_milli / MAX_SPEC_CPU_MILLI)
        gpu = (
            state.free[candidates].sum(axis=1) / MAX_SPEC_GPU_MILLI * (pod.gpu_demand * GPU_MILLI / MAX_SPEC_GPU_MILLI)
        )
        scores = np.floor(MAX_NODE_SCORE * (1.0 - (cpu + gpu) / 2.0))
        node = int(candidates[first_best(scores, candidates, state)])
        return node, _best_gpu(state, node, pod)


class BestFit:
    """BestFit: ⌊100 · (1 − ½ leftover CPU / 128 CPUs − ½ leftover GPU / 8 GPUs)⌋, then min–max normalised to
    0..100 in integers as the authors' plugin does; the tightest node wins."""

    name = "bestfit"

    def choose(self, pod: Pod, state: PackState, candidates: IntArray) -> tuple[int, tuple[int, ...]]:
        cpu_left = np.where(np.isfinite(state.cpu_free[candidates]), state.cpu_free[candidates] - pod.cpu_milli, 0.0)
        gpu_left = state.free[candidates].sum(axis=1) - pod.gpu_demand * GPU_MILLI
        raw = np.floor(
            (1.0 - 0.5 * cpu_left / MAX_SPEC_CPU_MILLI - 0.5 * gpu_left / MAX_SPEC_GPU_MILLI) * MAX_NODE_SCORE
        )
        low, high = raw.min(), raw.max()
        scores = np.zeros(len(raw)) if high == low else np.floor((raw - low) * MAX_NODE_SCORE / (high - low))
        node = int(candidates[first_best(scores, candidates, state)])
        return node, _best_gpu(state, node, pod)


class GpuPacking:
    """GpuPacking: a share on an already used GPU first (100 − its free tenths, at least 50), then fully free GPUs on
    a used node (50 − GPUs taken, at least 33), then an idle node (33 − its GPUs); pods without GPU score 0."""

    name = "gpupacking"

    def choose(self, pod: Pod, state: PackState, candidates: IntArray) -> tuple[int, tuple[int, ...]]:
        if pod.num_gpu == 0:
            scores = np.zeros(len(candidates))
        else:
            free = state.free[candidates]
            gpus = state.gpu_capacity[candidates] / GPU_MILLI
            fully_free = (free >= GPU_MILLI).sum(axis=1).astype(np.float64)
            idle = fully_free >= gpus
            if pod.gpu_milli < GPU_MILLI:
                room = np.where(free >= pod.gpu_milli, free, np.inf)
                fullest = room.min(axis=1)
                shared = np.maximum(MAX_NODE_SCORE - np.floor(np.floor(fullest * 100 / GPU_MILLI) / 10), 50.0)
                used = np.where(fullest >= GPU_MILLI, np.maximum(50.0 - 1.0, 33.0), shared)
            else:
                used = np.full(len(candidates), max(50.0 - pod.num_gpu, 33.0))
            scores = np.where(idle, np.maximum(33.0 - fully_free, fully_free), used)
        node = int(candidates[first_best(scores, candidates, state)])
        return node, _best_gpu(state, node, pod)


class GpuClustering:
    """GpuClustering: pods of one kind (a share, or k whole GPUs) together — a node holding only that kind scores
    75..100, one holding it among others 50..75, an idle node 25..50, a node of other kinds 0..25, each band by how
    full the node's GPUs are; pods without GPU score 0. The kinds a node holds are those this policy put there."""

    name = "gpuclustering"

    def __init__(self, node_count: int) -> None:
        self._kinds: list[Counter[str]] = [Counter() for _ in range(node_count)]

    def choose(self, pod: Pod, state: PackState, candidates: IntArray) -> tuple[int, tuple[int, ...]]:
        if pod.num_gpu == 0:
            scores = np.zeros(len(candidates))
        else:
            kind = "share-gpu" if pod.gpu_milli < GPU_MILLI else f"{pod.num_gpu}-gpu"
            left = state.free[candidates].sum(axis=1)
            fill = np.floor(25.0 * (MAX_SPEC_GPU_MILLI - left) / MAX_SPEC_GPU_MILLI)
            band = np.array(
                [
                    (75.0 if len(k) == 1 else 50.0) if k[kind] > 0 else (25.0 if not k else 0.0)
                    for k in (self._kinds[int(i)] for i in candidates)
                ]
            )
            scores = fill + band
        node = int(candidates[first_best(scores, candidates, state)])
        if pod.num_gpu:
            self._kinds[node]["share-gpu" if pod.gpu_milli < GPU_MILLI else f"{pod.num_gpu}-gpu"] += 1
        return node, _best_gpu(state, node, pod)


class AuthorsFgd:
    """FGD as its authors run it: the node (and, for a share, the GPU) whose integer score ⌊100 · sigmoid(ΔF /
    1000)⌋ is highest, ΔF the decrease of `TypicalFragmentation`; equal scores to the first node by name.

    Ablations (docs/evaluation.md): `integer_scores=False` ranks by ΔF itself; `rng` breaks ties at random; the
    target workload and the CPU-only rule are the caller's `typical` / `cpu_only_all_fragment`.
    """

    name = "fgd"

    def __init__(
        self,
        cluster: Cluster,
        typical: TypicalPods,
        *,
        integer_scores: bool = True,
        cpu_only_all_fragment: bool = True,
        rng: np.random.Generator | None = None,
    ) -> None:
        self._cluster = cluster
        self._typical = typical
        self._integer = integer_scores
        self._cpu_only_all = cpu_only_all_fragment
        self._rng = rng
        self._frag: TypicalFragmentation | None = None
        self._version = np.full(len(cluster.nodes), -1, dtype=np.int64)
        _, model_id = np.unique(np.array([n.gpu_model for n in cluster.nodes]), return_inverse=True)
        self._model_id = model_id.reshape(-1)
        self._ids: dict[tuple[float, ...], int] = {}
        self._state_id = np.zeros(len(cluster.nodes), dtype=np.int64)
        """Per node, an id shared by the nodes with the same GPU model, free CPU and free shares (as a multiset):
        F and its change depend on nothing else, so each distinct state is scored once."""
        self._changed: list[int] = []
        """Every node whose state changed, in order, since the first pod (a node once per `_sync` that saw it
        changed)."""
        self._memo: dict[tuple[int, int, float], _ShapeScores] = {}
        """Scores per pod shape (GPUs, milli-GPU per GPU, milli-CPU), each node's kept until it changes: a placement
        changes one node, so a pod scores only the nodes changed since its shape was last seen, and its cost stops
        growing with the number of distinct node states in the cluster."""

    def _sync(self, state: PackState) -> TypicalFragmentation:
        if self._frag is None:
            self._frag = TypicalFragmentation(
                self._typical, self._cluster, state.free, state.cpu_free, cpu_only_all_fragment=self._cpu_only_all
            )
        for i in np.flatnonzero(state.version != self._version):
            self._frag.refresh(int(i), state.free[i], float(state.cpu_free[i]))
            self._version[i] = state.version[i]
            key = (float(self._model_id[i]), float(state.cpu_free[i]), *sorted(state.free[i].tolist()))
            self._state_id[i] = self._ids.setdefault(key, len(self._ids))
            self._changed.append(int(i))
        return self._frag

    def _scores(self, before: FloatArray, after: FloatArray) -> FloatArray:
        drop = np.round(before - after, SCORE_DIGITS)
        if not self._integer:
            return drop
        return np.floor(MAX_NODE_SCORE / (1.0 + np.exp(-drop / GPU_MILLI)))

    def _shape_scores(self, frag: TypicalFragmentation, state: PackState, pod: Pod) -> _ShapeScores:
        """The scores of `pod`'s shape, brought up to date: every node the first time, then the nodes changed since."""
        shape = (pod.num_gpu, pod.gpu_milli, float(pod.cpu_milli))
        memo = self._memo.get(shape)
        n = len(state.version)
        if memo is None:
            share = pod.num_gpu > 0 and pod.gpu_milli < GPU_MILLI
            gpus = state.free.shape[1]
            memo = self._memo[shape] = _ShapeScores(
                np.zeros(n), np.zeros(n, dtype=np.int64), np.zeros((n if share else 0, gpus))
            )
            stale: IntArray = np.arange(n)
        elif memo.seen < len(self._changed):
            stale = np.unique(np.array(self._changed[memo.seen :], dtype=np.int64))
        else:
            return memo
        memo.seen = len(self._changed)
        if pod.num_gpu == 0 or pod.gpu_milli >= GPU_MILLI:
            first, inverse = _distinct(self._state_id[stale])
            nodes = stale[first]
            after = frag.after_whole(nodes, pod.num_gpu, state.cpu_free[nodes] - pod.cpu_milli)
            memo.best[stale] = self._scores(frag.frag[nodes], after)[inverse]
            return memo
        rows, cols = np.nonzero(state.free[stale] >= pod.gpu_milli)
        nodes = stale[rows]
        gpu_free = state.free[nodes, cols]
        first, inverse = _distinct(self._state_id[nodes] * (GPU_MILLI + 1) + np.round(gpu_free).astype(np.int64))
        distinct = nodes[first]
        cpu_after = state.cpu_free[distinct] - pod.cpu_milli
        after = frag.after_share(distinct, gpu_free[first], float(pod.gpu_milli), cpu_after)
        memo.per_gpu[stale] = -np.inf
        memo.per_gpu[nodes, cols] = self._scores(frag.frag[distinct], after)[inverse]
        memo.best[stale] = memo.per_gpu[stale].max(axis=1)
        memo.best_gpu[stale] = memo.per_gpu[stale].argmax(axis=1)
        return memo

    def choose(self, pod: Pod, state: PackState, candidates: IntArray) -> tuple[int, tuple[int, ...]]:
        memo = self._shape_scores(self._sync(state), state, pod)
        if pod.num_gpu == 0 or pod.gpu_milli >= GPU_MILLI:
            node = int(candidates[first_best(memo.best[candidates], candidates, state, self._rng)])
            return node, state.whole_gpus(node, pod.num_gpu)
        if self._rng is None:  # the first best node by name, its first best GPU: what the (node, GPU) pairs give
            node = int(candidates[first_best(memo.best[candidates], candidates, state)])
            return node, (int(memo.best_gpu[node]),)
        rows, cols = np.nonzero(state.free[candidates] >= pod.gpu_milli)  # a tie drawn among (node, GPU) pairs
        nodes = candidates[rows]
        best = first_best(memo.per_gpu[nodes, cols], nodes, state, self._rng)
        return int(nodes[best]), (int(cols[best]),)


@dataclass(slots=True)
class _ShapeScores:
    """FGD's scores for one pod shape, valid for every node not in `AuthorsFgd._changed[seen:]`: per node the best
    (`best`; for a share, of the GPUs it fits) and, for a share, per GPU (`per_gpu`, -inf where it does not fit)
    with the first best GPU (`best_gpu`). Nodes where the pod does not fit hold values never read."""

    best: FloatArray
    best_gpu: IntArray
    per_gpu: FloatArray
    seen: int = 0


def _distinct(key: IntArray) -> tuple[IntArray, IntArray]:
    """Positions of the distinct keys and each entry's index into them."""
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def fragmentation_milli(typical: TypicalPods, cluster: Cluster, state: PackState) -> float:
    """The cluster's expected fragmentation now (Σ_n F_n, milli-GPU), as the authors measure it."""
    return float(TypicalFragmentation(typical, cluster, state.free, state.cpu_free).frag.sum())
