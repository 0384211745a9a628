"""The cluster as a JCT run holds it (`JobState`: allocated milli-GPU, residents and gang members per GPU and node),
the interface of a JCT placement policy (`JobPolicy`) and kube-scheduler's own policies over it (`KubeJobPolicy`).

Split from `advisor.sim.jobs` (the event loop) so that the policies and the loop read on their own; the extender
policies are in `advisor.sim.job_extender`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from advisor.gpus import normalize_gpu_model
from advisor.placement.fragmentation import IntArray
from advisor.sim.model import GPU_MILLI, Cluster, Job, best_index
from advisor.sim.rates import RateTable

SHARE_MILLI = GPU_MILLI // 2


def gang_sizes(gpus: int, per_node: int) -> list[int]:
    """The members of a job of `gpus` GPUs on nodes of `per_node`: as many full nodes as it fills, then the rest."""
    full, rest = divmod(gpus, per_node)
    return [per_node] * full + ([rest] if rest else [])


class JobState:
    """Allocated milli-GPU and resident jobs per (node, GPU); gang members per node."""

    def __init__(self, cluster: Cluster, truth: RateTable | None) -> None:
        self.nodes = cluster.nodes
        n, g = len(cluster.nodes), max(cluster.max_gpus_per_node, 1)
        self.exists = np.zeros((n, g), dtype=bool)
        for i, node in enumerate(cluster.nodes):
            self.exists[i, : node.gpus] = True
        self.allocated = np.where(self.exists, 0, GPU_MILLI).astype(np.int64)
        self.capacity = self.exists.sum(axis=1) * GPU_MILLI
        self.residents: dict[tuple[int, int], list[Job]] = {}
        self.gangs: list[dict[str, int]] = [{} for _ in range(n)]
        self.version = np.zeros(n, dtype=np.int64)
        self.changes = 0
        """Assigns and releases so far (the sum of `version`): the cluster is as it was while this stays the same."""
        self.now = 0.0
        self.started: dict[str, tuple[Job, float]] = {}
        self._models = [normalize_gpu_model(x.gpu_model) for x in cluster.nodes]
        self._truth = truth
        model_names = sorted(set(self._models))
        self._model_id = np.array([model_names.index(m) for m in self._models], dtype=np.int64)
        self._model_names = model_names
        self._type_ids: dict[str, int] = {}
        self._half_type = np.zeros((n, g), dtype=np.int64)
        """Per GPU holding one half-GPU job: that job's type id (`_type_ids`)."""
        self._pairs: dict[str, tuple[int, NDArray[np.bool_]]] = {}
        """Per job type: the number of types known when built, and (GPU model id, resident type id) → whether it may
        share with that resident (`compatible`)."""

    def free_whole(self) -> IntArray:
        counts: IntArray = (self.allocated == 0).sum(axis=1)
        return counts

    def compatible(self, job: Job, node: int, gpu: int) -> bool:
        """Whether `job` may share this GPU with its resident (the truth has the pair measured as feasible)."""
        if self._truth is None:
            return False
        if self.allocated[node, gpu] == SHARE_MILLI:  # one half-GPU job, its type in `_half_type`: the table says
            return bool(self._pairs_of(job.job_type)[self._model_id[node], self._half_type[node, gpu]])
        model = self._models[node]
        return all(
            self._truth.sharing(model, job.job_type, r.job_type) is not None
            and self._truth.sharing(model, r.job_type, job.job_type) is not None
            for r in self.residents.get((node, gpu), [])
        )

    def share_slots(self, job: Job) -> tuple[IntArray, IntArray]:
        """The (node, GPU) pairs where `job` may take half a GPU: room for it and, on a GPU holding another half-GPU
        job, a pair the truth measures as feasible (`compatible`); in row-major order."""
        if self._truth is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        room = self.allocated + SHARE_MILLI <= GPU_MILLI
        pairs = self._pairs_of(job.job_type)
        room &= (self.allocated == 0) | pairs[self._model_id[:, None], self._half_type]
        rows, cols = np.nonzero(room)
        return rows, cols

    def _pairs_of(self, job_type: str) -> NDArray[np.bool_]:
        """`compatible` of `job_type` with a resident of each known type on each GPU model, as a table."""
        known, found = self._pairs.get(job_type, (-1, None))
        if found is None or known < len(self._type_ids):
            assert self._truth is not None
            truth = self._truth
            found = np.zeros((len(self._model_names), max(len(self._type_ids), 1)), dtype=bool)  # one column at least
            for m, model in enumerate(self._model_names):
                for t, other in enumerate(self._type_ids):
                    found[m, t] = (
                        truth.sharing(model, job_type, other) is not None
                        and truth.sharing(model, other, job_type) is not None
                    )
            self._pairs[job_type] = (len(self._type_ids), found)
        return found

    def assign(self, job: Job, node: int, gpus: Sequence[int], milli: int, gang: str | None) -> None:
        for g in gpus:
            if self.allocated[node, g] + milli > GPU_MILLI:
                raise ValueError(f"job {job.job_id}: GPU {g} of node {node} is full")
            self.allocated[node, g] += milli
            self.residents.setdefault((node, g), []).append(job)
            if milli == SHARE_MILLI and self.allocated[node, g] == SHARE_MILLI:
                self._half_type[node, g] = self._type_ids.setdefault(job.job_type, len(self._type_ids))
        if gang is not None:
            self.gangs[node][gang] = self.gangs[node].get(gang, 0) + 1
        self.started.setdefault(job.job_id, (job, self.now))
        self.version[node] += 1
        self.changes += 1

    def release(self, job: Job, node: int, gpus: Sequence[int], milli: int, gang: str | None) -> None:
        for g in gpus:
            self.allocated[node, g] -= milli
            self.residents[(node, g)].remove(job)
            if self.allocated[node, g] == SHARE_MILLI:
                (other,) = self.residents[(node, g)]
                self._half_type[node, g] = self._type_ids.setdefault(other.job_type, len(self._type_ids))
        if gang is not None:
            self.gangs[node][gang] -= 1
            if not self.gangs[node][gang]:
                del self.gangs[node][gang]
        self.version[node] += 1
        self.changes += 1


class JobPolicy(Protocol):
    name: str

    def choose(
        self, job: Job, gpus: int, share: bool, gang: str | None, state: JobState
    ) -> tuple[int, tuple[int, ...]] | None:
        """A node and GPU indices for `gpus` whole GPUs (or one half GPU when `share`), or None if nothing fits."""
        ...

    def begin_pass(self, queue: Sequence[Job], now: float, state: JobState) -> None:
        """Called before each scheduling pass with the jobs waiting, in queue order (arrival)."""
        ...

    def hold(self, job: Job, state: JobState) -> bool:
        """Called with each job of the queue that could not be placed in this scheduling pass, in order, until it
        answers True (nodes are held for `job`, or the policy holds nothing this pass)."""
        ...

    def passes_over(self, job: Job, gpus: int, share: bool, gang: str | None, state: JobState) -> bool:
        """True when `choose` with these arguments is already known to answer None without drawing anything (a
        verdict kept since the cluster last changed), so the engine need not ask it; False when not known."""
        ...


def used_ratio_after(state: JobState, nodes: IntArray, milli: int) -> np.ndarray:
    used: np.ndarray = (state.allocated[nodes].sum(axis=1) - (~state.exists[nodes]).sum(axis=1) * GPU_MILLI + milli) / (
        state.capacity[nodes]
    )
    return used


class KubeJobPolicy:
    """LeastAllocated (`spread`) or MostAllocated (`binpack`) over GPU shares; least- or most-used GPU in the node.

    Nodes with equal scores are chosen among at random (seeded), as kube-scheduler does.
    """

    def __init__(self, *, most: bool, seed: int | None = 0) -> None:
        self._most = most
        self._rng = None if seed is None else np.random.default_rng(seed)
        self.name = "binpack" if most else "spread"

    def begin_pass(self, queue: Sequence[Job], now: float, state: JobState) -> None:
        """kube-scheduler's queue is first come, first served (within a priority)."""

    def hold(self, job: Job, state: JobState) -> bool:
        """kube-scheduler holds nothing for a blocked pod."""
        return True

    def passes_over(self, job: Job, gpus: int, share: bool, gang: str | None, state: JobState) -> bool:
        """A job fails here only for want of room, which the engine tracks itself."""
        return False

    def choose(
        self, job: Job, gpus: int, share: bool, gang: str | None, state: JobState
    ) -> tuple[int, tuple[int, ...]] | None:
        if share:
            rows, cols = state.share_slots(job)
            if not len(rows):
                return None
            nodes = np.unique(rows)
            used = used_ratio_after(state, nodes, SHARE_MILLI)
            node = int(nodes[best_index(used if self._most else -used, self._rng)])
            on_node = cols[rows == node]
            alloc = state.allocated[node, on_node]
            pick = int(on_node[int(np.argmax(alloc) if self._most else np.argmin(alloc))])
            return node, (pick,)
        nodes = np.flatnonzero(state.free_whole() >= gpus)
        if len(nodes) == 0:
            return None
        used = used_ratio_after(state, nodes, gpus * GPU_MILLI)
        node = int(nodes[best_index(used if self._most else -used, self._rng)])
        free = np.flatnonzero(state.allocated[node] == 0)[:gpus]
        return node, tuple(int(x) for x in free)
