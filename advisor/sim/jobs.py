"""JCT mode: jobs arrive at their trace times, wait in a FIFO queue (with backfilling), run `work / rate` where the
rate depends on the placement (GPU model, consolidation, NVLink groups, the partner on a shared GPU), and leave.

A discrete-event loop over arrivals and completions: between two events every running job progresses at its current
rate; a completion frees its GPUs and re-rates its partner; after every event the queue is scanned in arrival order and
each job that fits is placed by the policy. A job larger than the biggest node runs as a gang of per-node members,
placed all-or-nothing. When the ground truth measures co-location, a 1-GPU job asks for half a GPU (two jobs may
share a GPU, as in Gavel's space sharing), and a pair the truth marks infeasible never shares (as a GPU-memory filter
would refuse it).

Policies: `spread` / `binpack` (kube-scheduler's LeastAllocated / MostAllocated over GPU shares; least- or most-used
GPU), `advisor` and `oracle` (kube-scheduler + the advisor extender running `advisor.placement.scorer.Scorer`;
the advisor scores with predicted rates, the oracle with the true ones).
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import NamedTuple, Protocol

import numpy as np
from numpy.typing import NDArray

from advisor.gpus import normalize_gpu_model
from advisor.placement.config import ScoringConfig
from advisor.placement.extender import extender_scores
from advisor.placement.filter import QueueRules, run_filter
from advisor.placement.fragmentation import IntArray, TaskMix
from advisor.placement.holding import HEAD_SCAN, Reservation, blocked_reservation
from advisor.placement.scorer import Scorer
from advisor.placement.scoring import is_stale
from advisor.placement.shortest import CLAIM_SCAN, Claim, Claimant, claims
from advisor.placement.types import NodeState, PodRequest, Resident
from advisor.placement.waiting import LeaveTimes, RoomAt, has_room_now, room_at
from advisor.predictors import Predictors
from advisor.sim.adapter import StateInterner
from advisor.sim.model import GPU_MILLI, Cluster, Job, best_index
from advisor.sim.rates import (
    Assignment,
    JobJct,
    RateTable,
    crosses_nvlink_groups,
    predictors_for,
    true_rate,
    with_job,
)

SHARE_MILLI = GPU_MILLI // 2
_NO_CLAIMS = QueueRules()  # what a job that claims nothing (no claimant this pass) is asked to yield
JCT_EXTENDER_WEIGHT = 2.0
"""kube-scheduler's weight of the advisor extender in JCT runs (an integer, as the scheduler's configuration needs),
chosen on the validation run only: Gavel trace msr_vc_6c71a0 at half its arrival rate, seeds 0-2
(`bench/sim_gavel.py --validate`; docs/evaluation.md, experiment 2, gives the figures)."""
# What telemetry would show of a training job on its GPU; read only by the heuristic interference fallback.
_RESIDENT_SM_RATIO = 0.9
_RESIDENT_BANDWIDTH_RATIO = 0.5
_DONE_EPS_SECONDS = 1e-6


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


def _used_ratio_after(state: JobState, nodes: IntArray, milli: int) -> np.ndarray:
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
            used = _used_ratio_after(state, nodes, SHARE_MILLI)
            node = int(nodes[best_index(used if self._most else -used, self._rng)])
            on_node = cols[rows == node]
            alloc = state.allocated[node, on_node]
            pick = int(on_node[int(np.argmax(alloc) if self._most else np.argmin(alloc))])
            return node, (pick,)
        nodes = np.flatnonzero(state.free_whole() >= gpus)
        if len(nodes) == 0:
            return None
        used = _used_ratio_after(state, nodes, gpus * GPU_MILLI)
        node = int(nodes[best_index(used if self._most else -used, self._rng)])
        free = np.flatnonzero(state.allocated[node] == 0)[:gpus]
        return node, tuple(int(x) for x in free)


@dataclass(frozen=True, slots=True)
class _PassInputs:
    """The simulated filter's inputs for one job (`advisor.placement.filter.FilterInputs`), found from the policy's
    own queue: leave times as it believes them (None: the job does not wait), the head held this pass and the claims
    of the waiting jobs ranked above it."""

    leaving: LeaveTimes | None
    queue: QueueRules

    def leave_times(self) -> LeaveTimes | None:
        return self.leaving

    def queue_rules(self, leaving: LeaveTimes | None) -> QueueRules:
        return self.queue


class ExtenderJobPolicy:
    """kube-scheduler's LeastAllocated + `extender_weight` × 10 × the advisor extender's 0..10 score.

    `table` is what the scorer believes about speeds and sharing: predictions (`advisor`) or the truth (`oracle`).
    `lengths` what it believes of each job's length (its work, by job id; e.g. its type's median over past jobs,
    `advisor.sim.run.history_lengths`); None, or a job it lacks: the job's own (clairvoyant). Equal totals are
    broken at random (seeded), as kube-scheduler does.
    """

    def __init__(
        self,
        name: str,
        cluster: Cluster,
        table: RateTable | None,
        config: ScoringConfig,
        *,
        base: Predictors | None = None,
        extender_weight: float = JCT_EXTENDER_WEIGHT,
        seed: int | None = 0,
        lengths: Mapping[str, float] | None = None,
    ) -> None:
        self.name = name
        self._lengths = lengths
        self._believed_jobs: dict[str, Job] = {}
        self._rng = None if seed is None else np.random.default_rng(seed)
        self._table = table
        self._config = config
        self._bundle = predictors_for(table, base or Predictors.heuristic())
        self._weight = extender_weight
        self._interner = StateInterner(cluster.nodes)
        self._per_node = cluster.max_gpus_per_node
        self._held: Reservation | None = None
        self._head_tries = 0  # blocked jobs of this pass tried as the head (`hold`)
        self._models = sorted({n.gpu_model for n in cluster.nodes})
        self._job_runs: dict[str, dict[str, float]] = {}
        self._requests: dict[tuple[str, int, bool, str | None], PodRequest] = {}  # `_pod_request`
        self._residents: dict[tuple[str, float], Resident] = {}  # `_resident`
        self._claimants: dict[str, Claimant] = {}
        self._ranked: list[Claimant] = []  # `_claimants` by rank, this pass
        self._log: tuple[int, dict[str, NodeState], list[Claim], list[tuple[int, float]]] | None = None
        # Per node: its state version and, for that version, the interned state id per (job type where it shares,
        # gang it runs members of) — a long queue asks for every node's state once per waiting job and pass.
        self._node_memo: dict[int, tuple[int, dict[tuple[str | None, str | None], int]]] = {}
        self._memo_state: JobState | None = None
        self._predicted: dict[tuple[str, str], float | None] = {}  # believed run time per (job id, GPU model)
        self._leave_key: tuple[JobState | None, object] = (None, object())
        self._leaving: LeaveTimes | None = None  # `_leave_times`, for its key and clock reading
        self._views_at: tuple[JobState | None, int] = (None, -1)
        self._views: dict[tuple[str | None, str | None], tuple[IntArray, dict[str, NodeState], IntArray]] = {}
        """Per view (`_all_nodes`): each node's version when last brought up to date, every node's state, and every
        node's interned state id."""
        self._orders: dict[tuple[object, ...], list[IntArray]] = {}  # `_room_order`, this cluster version
        self._room_times: dict[tuple[object, ...], _RoomTimes] = {}  # per view and shape, for `_room_key`
        self._room_key: object = None  # the leave times' `cache_key` that `_room_times` and `_room_at` hold for
        self._room_at: dict[tuple[int, int, int], tuple[RoomAt, float] | None] = {}
        """Per (interned node state, by id: the interner keeps each alive, whole GPUs, share): its `room_at` and the
        clock time it was found at; None when it does not count (has room now)."""
        self._index = {n.name: i for i, n in enumerate(cluster.nodes)}
        gpu_models = sorted({n.gpu_model for n in cluster.nodes})
        self._gpu_model_of = np.array([gpu_models.index(n.gpu_model) for n in cluster.nodes], dtype=np.int64)
        """Per node: its GPU model (as its `NodeState` names it) by position in the sorted models."""
        self._waited: dict[tuple[object, ...], IntArray] = {}  # the wait rule's passed candidates, `_passed_over`

    def _node_gpus(self, state: JobState, node: int, job: Job, share: bool) -> list[tuple[int, tuple[Resident, ...]]]:
        out: list[tuple[int, tuple[Resident, ...]]] = []
        for g in range(state.nodes[node].gpus):
            jobs = state.residents.get((node, g), [])
            milli = int(state.allocated[node, g])
            if share and jobs and milli < GPU_MILLI and not state.compatible(job, node, g):
                milli = GPU_MILLI  # the memory filter rules this GPU out for this job
            out.append((milli, tuple(self._resident(r, state.started[r.job_id][1]) for r in jobs)))
        return out

    def _resident(self, job: Job, started: float) -> Resident:
        """What telemetry shows of a running job on each of its GPUs (built once per job and start)."""
        key = (job.job_id, started)
        found = self._residents.get(key)
        if found is None:
            found = self._residents[key] = Resident(
                pod=job.job_id,
                workload=job.job_type,
                gpu_milli=SHARE_MILLI if job.num_gpus == 1 else GPU_MILLI,
                sm_utilization_ratio=_RESIDENT_SM_RATIO,
                memory_bandwidth_utilization_ratio=_RESIDENT_BANDWIDTH_RATIO,
                started_seconds=started,
            )
        return found

    def _intern(self, state: JobState, node: int, job: Job, share: bool, gang: str | None) -> None:
        """Point the interner's `node` at its state as `job` sees it; what `_node_gpus` reads of the job is its type
        (the memory filter, when sharing), so a node unchanged since it was last built for that type is reused."""
        if self._memo_state is not state:  # versions count from 0 again in a new run
            self._memo_state, self._node_memo = state, {}
        gang = gang if gang is not None and gang in state.gangs[node] else None
        key = (job.job_type if share else None, gang)
        version = int(state.version[node])
        seen = self._node_memo.get(node)
        if seen is None or seen[0] != version:
            seen = self._node_memo[node] = (version, {})
        state_id = seen[1].get(key)
        if state_id is None:
            gangs = frozenset([gang]) if gang is not None else frozenset()
            self._interner.update(node, self._node_gpus(state, node, job, share), gangs)
            seen[1][key] = int(self._interner.node_state[node])
        else:
            self._interner.node_state[node] = state_id

    def _leave_times(self, state: JobState) -> LeaveTimes:
        """What the scorer believes of when a resident leaves: its start plus its work over the table's speed.

        Each job's predicted run time is kept per GPU model, and each node state's GPU end times are memoised by the
        placement code under `LeaveTimes.cache_key` (`advisor.placement.waiting.gpu_ends`) for the whole run (the key
        is renewed for every new run): an interned node state always holds the same jobs with the same starts (a job
        taken back from a gang that did not fit and started again later is a new state, `_node_gpus`)."""
        if self._leave_key[0] is not state:
            self._leave_key = (state, object())
        leaving = self._leaving
        if leaving is not None and leaving.cache_key is self._leave_key[1] and leaving.now_seconds == state.now:
            return leaving  # `end` reads the running jobs as they are when called: the same object serves a pass
        predicted = self._predicted

        def end(node: NodeState, resident: Resident) -> float | None:
            if self._table is None or resident.pod not in state.started:
                return None
            job, started = state.started[resident.pod]
            key = (job.job_id, node.gpu_model)
            if key in predicted:
                seconds = predicted[key]
            else:
                believed = JobJct(self._table, self._believed(job))
                seconds = predicted[key] = believed.jct_seconds(job.job_type, node.gpu_model, job.num_gpus)
            return None if seconds is None else started + seconds

        self._leaving = LeaveTimes(end, state.now, cache_key=self._leave_key[1])
        return self._leaving

    def _all_nodes(self, state: JobState, job: Job, share: bool, gang: str | None) -> dict[str, NodeState]:
        """Every node's state as `job` sees it (GPUs it may not share count as full): a view per (job type where it
        shares, gang), brought up to date from the nodes changed since it was last asked for. The returned mapping
        changes with the cluster: read it before the next placement."""
        version = state.changes
        if self._views_at[0] is not state:
            self._views = {}
        if self._views_at != (state, version):
            self._views_at, self._orders, self._waited = (state, version), {}, {}
        key = (job.job_type if share else None, gang)
        entry = self._views.get(key)
        if entry is None:
            n = len(state.nodes)
            entry = self._views[key] = (np.full(n, -1, dtype=np.int64), {}, np.zeros(n, dtype=np.int64))
        seen, view, ids = entry
        changed = np.flatnonzero(state.version != seen)
        if len(changed):
            for n in changed.tolist():
                self._intern(state, n, job, share, gang)
                ids[n] = self._interner.node_state[n]
                view[state.nodes[n].name] = self._interner.states[int(ids[n])]
            seen[changed] = state.version[changed]
        return view

    def _room_order(
        self, state: JobState, view: tuple[str | None, str | None], request: PodRequest, leaving: LeaveTimes
    ) -> list[IntArray]:
        """Per GPU model, the nodes without room now for `request`'s shape (as `view` sees them), soonest room first
        (`advisor.placement.waiting.room_seconds`; ties by node order), kept per shape and leave times until the
        cluster changes: every job of that shape tried in a pass asks the same.

        Each node's clock time of room (`room_at`) is kept across events in `_RoomTimes` and found again only for
        the nodes changed since, or whose answer expired (a predicted end passed), so a query costs a few array
        operations over the nodes, not a Python loop. The time until room is that clock time minus now, the figure
        `room_seconds` gives; rounding is monotone, so the order of those times is the order of the clock times."""
        key = (view, request.whole_gpus, request.share_milli, leaving.now_seconds, leaving.cache_key)
        found = self._orders.get(key)
        if found is not None:
            return found
        if self._room_key is not leaving.cache_key:  # a new run
            self._room_key, self._room_times, self._room_at = leaving.cache_key, {}, {}
        times = self._room_times.get(key[:3])
        if times is None:
            times = self._room_times[key[:3]] = _RoomTimes(len(state.nodes))
        now = leaving.now_seconds
        nodes = self._views[view][1]
        stale = np.flatnonzero((state.version != times.seen) | (now >= times.until) | (now < times.since))
        memo = self._room_at
        for n in stale.tolist():
            node = nodes[state.nodes[n].name]
            at = (id(node), request.whole_gpus, request.share_milli)
            answer = memo.get(at)
            if at not in memo or (answer is not None and not answer[1] <= now < answer[0].until_seconds):
                counted = bool(node.gpu_model) and not is_stale(node, self._config, None)
                counted = counted and not has_room_now(node, request)
                answer = memo[at] = (room_at(node, request, leaving), now) if counted else None
            if answer is None:
                times.counted[n], times.since[n], times.until[n] = False, -math.inf, math.inf
            else:
                room, since = answer
                times.counted[n], times.at[n], times.since[n], times.until[n] = True, room[0], since, room[1]
        times.seen[stale] = state.version[stale]
        found = []
        for model in np.unique(self._gpu_model_of[times.counted]).tolist():
            among = np.flatnonzero(times.counted & (self._gpu_model_of == model))
            found.append(among[np.argsort(times.at[among], kind="stable")])
        self._orders[key] = found
        return found

    def _indices(self, names: set[str]) -> IntArray:
        """The positions of the nodes named in `names`."""
        return np.array([self._index[name] for name in names], dtype=np.int64)

    def _room_nodes(
        self,
        state: JobState,
        view: tuple[str | None, str | None],
        request: PodRequest,
        leaving: LeaveTimes,
        maybe_closed: set[str],
    ) -> dict[str, NodeState]:
        """The nodes without room now that the wait rule's soonest room per GPU model can come from: per model, in
        order of room (`_room_order`), those the rule may not count on (`maybe_closed`: held or claimed by others;
        it decides which) up to and with the first it surely counts on. A later node has room no sooner than that one,
        so the wait rule's verdicts over these nodes are its verdicts over every node."""
        nodes = self._views[view][1]
        found: dict[str, NodeState] = {}
        for order in self._room_order(state, view, request, leaving):
            for n in order.tolist():
                name = state.nodes[n].name
                found[name] = nodes[name]
                if name not in maybe_closed:
                    break
        return found

    def begin_pass(self, queue: Sequence[Job], now: float, state: JobState) -> None:
        """Nothing is held yet; with `ScoringConfig.shortest_first`, the waiting jobs (gangs aside) become claimants
        with their response ratios (`advisor.placement.shortest.Claimant`: waited since arrival, quickest believed run
        time)."""
        self._held = None
        self._head_tries = 0
        self._log = None
        if not self._config.shortest_first or self._table is None:
            return
        self._claimants = {}
        for job in queue:
            if job.num_gpus > self._per_node:
                continue
            runs = self._runs(job)
            if runs:
                self._claimants[job.job_id] = Claimant(
                    job.job_id, self._request(job), waited_seconds=now - job.arrival_s, runs=runs
                )
        # In the order `claims` takes them (a stable sort: queue order breaks ties); a placement only removes some.
        self._ranked = sorted(self._claimants.values(), key=lambda c: (-c.priority, -c.ratio))

    def _believed(self, job: Job) -> Job:
        """`job` with the work the policy believes it has: `lengths`' (by job id), else its own (built once per job:
        this is on the scoring and leave-time paths)."""
        if self._lengths is None:
            return job
        believed = self._believed_jobs.get(job.job_id)
        if believed is None:
            work = self._lengths.get(job.job_id)
            believed = self._believed_jobs[job.job_id] = job if work is None else replace(job, work=work)
        return believed

    def _runs(self, job: Job) -> dict[str, float]:
        """The job's believed run time per GPU model of the cluster (models without a figure left out)."""
        runs = self._job_runs.get(job.job_id)
        if runs is None:
            assert self._table is not None
            predict = JobJct(self._table, self._believed(job))
            figures = {m: predict.jct_seconds(job.job_type, m, job.num_gpus) for m in self._models}
            runs = self._job_runs[job.job_id] = {m: r for m, r in figures.items() if r is not None and r > 0}
        return runs

    def _request(self, job: Job) -> PodRequest:
        """The pod request of `job` (of each gang member when it spans nodes)."""
        assert self._table is not None
        share = bool(self._table.norm) and job.num_gpus == 1
        sizes = [job.num_gpus] if job.num_gpus <= self._per_node else _gang_sizes(job.num_gpus, self._per_node)
        return self._pod_request(job, sizes[0], share, job.job_id if len(sizes) > 1 else None)

    def _claims(self, job: Job, state: JobState) -> QueueRules:
        """The room waiting jobs with a higher response ratio are expected to take (`advisor.placement.shortest.claims`,
        laid once per cluster version on every node), when `ScoringConfig.shortest_first`; the filter yields it."""
        own = self._claimants.get(job.job_id) if self._config.shortest_first else None
        if own is None:
            return _NO_CLAIMS
        version = state.changes
        if self._log is None or self._log[0] != version:
            # Room as it is, whatever the job (GPUs it may not share are not marked full): the same for every job.
            nodes = self._all_nodes(state, job, False, None)
            # The first CLAIM_SCAN still waiting, by rank: all that `claims` lays (sorting them again keeps them).
            waiting = list(islice((c for c in self._ranked if c.pod not in state.started), CLAIM_SCAN))
            log = claims(waiting, nodes, config=self._config)
            self._log = (version, nodes, log, [(-c.claimant.priority, -c.claimant.ratio) for c in log])
        _, nodes, log, _ = self._log
        return QueueRules(claim_log=log, rank=own.rank, claim_nodes=nodes)

    def _ranked_above(self, rank: tuple[int, float]) -> int:
        """How many claims of this version's log (`_claims`, in rank order) are ranked above `rank`: the filter yields
        the room of those (`advisor.placement.shortest.yield_verdicts`) and reads no other."""
        assert self._log is not None
        return bisect_left(self._log[3], (-rank[0], -rank[1]))

    def hold(self, job: Job, state: JobState) -> bool:
        """Hold nodes for the first job of the pass that has no room now and whose start can be predicted
        (`advisor.placement.holding`: one that only waits for a faster GPU is not blocked) where it is predicted to
        start first (`advisor.placement.holding.reserve`, with what the policy believes of speeds and ends), when
        `ScoringConfig.hold_for_blocked`. As the service, it looks at most `HEAD_SCAN` blocked jobs far for one."""
        if not self._config.hold_for_blocked or self._table is None:
            return True
        self._head_tries += 1
        if self._head_tries > HEAD_SCAN:  # as the service looks no further for a head
            return True
        request = self._request(job)
        self._held = blocked_reservation(
            request,
            self._all_nodes(state, job, request.is_share, None),
            members=1 if request.gang is None else len(_gang_sizes(job.num_gpus, self._per_node)),
            config=self._config,
            predictors=with_job(self._bundle, self._table, self._believed(job)),
            leaving=self._leave_times(state),
        )
        return self._held is not None

    def _rules(self, job: Job, request: PodRequest, state: JobState, *, share: bool) -> _Rules:
        """The filter's rules that apply to `job` now (`_passed_over`), and, when it may wait, what its verdict
        depends on: the candidates (the same for every job of this view and shape until the cluster changes), the
        leave times, the nodes held this pass, how many claims are ranked above it (it yields their room), and of the
        job only its predicted run times, from its type, GPUs and believed work."""
        held = self._held if self._held is not None and self._held.pod != job.job_id else None
        claimed = self._claims(job, state)
        waits = self._config.wait_slack is not None and self._table is not None and request.gang is None
        leaving = self._leave_times(state) if waits else None
        alike: tuple[object, ...] | None = None
        if leaving is not None:
            believed = self._believed(job)
            view = (job.job_type if share else None, request.gang)
            alike = (view, request.whole_gpus, request.share_milli, leaving.now_seconds, leaving.cache_key)
            alike += (believed.job_type, believed.num_gpus, believed.work, state.changes, held)
            if claimed.claim_log and claimed.rank is not None:
                alike += (self._ranked_above(claimed.rank),)
        return _Rules(held, claimed, leaving, alike)

    def _passed_over(
        self, job: Job, request: PodRequest, candidates: IntArray, state: JobState, rules: _Rules, *, share: bool
    ) -> IntArray:
        """The candidates the extender filter passes (`advisor.placement.filter.run_filter`, node states as the job
        sees them): not held for the head (`hold`), not room that waiting jobs ranked above it are expected to take
        (`_claims`), not a slower GPU model it would finish sooner by waiting for. Candidates have room by
        construction, so when no rule can apply the filter is not run. The filter is given only the nodes its
        verdicts can depend on (the comments below say why each set suffices), and what it passes is kept
        (`_waited`) for the jobs alike to this one (`_rules`) until the cluster changes: the engine does not try
        those again (`passes_over`)."""
        held, claimed, leaving, alike = rules
        if held is None and not claimed.claim_log and leaving is None:
            return candidates
        nodes = self._all_nodes(state, job, share, request.gang)
        models = self._gpu_model_of[candidates]
        view = (job.job_type if share else None, request.gang)
        closed: set[str] = set()  # nodes the reservation or the claims ranked above the job may keep it off
        if held is not None:
            closed |= held.nodes
        if claimed.claim_log and claimed.rank is not None:
            closed |= {c.node for c in claimed.claim_log[: self._ranked_above(claimed.rank)]}
        # Without the wait rule every candidate gets its own verdict. With it, a candidate neither held nor claimed
        # passes or fails by its GPU model alone (candidates have room: capacity passes them; held and yielded
        # nodes are among `closed`), so the filter is offered the closed candidates and one other per model, and
        # besides them only the nodes its verdicts can read: every closed node, and per model the nodes in order of
        # room up to the first it surely counts on (`_room_nodes`).
        own = np.ones(len(candidates), dtype=bool) if leaving is None else np.isin(candidates, self._indices(closed))
        _, firsts = np.unique(models[~own], return_index=True)
        stand_in = np.zeros(len(candidates), dtype=bool)
        stand_in[np.flatnonzero(~own)[firsts]] = True
        offered = candidates[own | stand_in]
        if leaving is not None:
            every = nodes
            nodes = self._room_nodes(state, view, request, leaving, closed)
            nodes.update((name, every[name]) for name in closed if name in every)
            nodes.update((state.nodes[int(n)].name, every[state.nodes[int(n)].name]) for n in offered)
        names = [state.nodes[int(n)].name for n in offered]
        passed, _ = run_filter(
            request,
            names,
            nodes,
            _PassInputs(leaving, QueueRules(held, claimed.claim_log, claimed.rank, claimed.claim_nodes)),
            config=self._config,
            predictors=with_job(self._bundle, self._table, self._believed(job)),
        )
        keep: IntArray = candidates
        if len(passed) < len(names):
            kept = set(passed)
            passes = np.zeros(len(candidates), dtype=bool)
            passes[own | stand_in] = [name in kept for name in names]
            passes |= ~own & np.isin(models, models[stand_in & passes])  # the verdict of the model's stand-in
            keep = candidates[passes]
        if alike is not None:
            self._waited[alike] = keep
        return keep

    def _pod_request(self, job: Job, gpus: int, share: bool, gang: str | None) -> PodRequest:
        """The pod request of one member of `job` as `choose` is asked for it (built once: a waiting job is asked for
        again after every completion)."""
        key = (job.job_id, gpus, share, gang)
        request = self._requests.get(key)
        if request is None:
            request = self._requests[key] = PodRequest(
                name=job.job_id,
                gpus=0 if share else gpus,
                gpu_milli=SHARE_MILLI if share else 0,
                workload=job.job_type,
                gang=gang,
            )
        return request

    def passes_over(self, job: Job, gpus: int, share: bool, gang: str | None, state: JobState) -> bool:
        """Whether a job alike to `job` (`_rules`) was filtered since the cluster last changed and every candidate
        was passed over: `choose` would answer None from that verdict, before any draw."""
        if not self._waited:
            return False
        request = self._pod_request(job, gpus, share, gang)
        alike = self._rules(job, request, state, share=share).alike
        known = self._waited.get(alike) if alike is not None else None
        return known is not None and len(known) == 0

    def choose(
        self, job: Job, gpus: int, share: bool, gang: str | None, state: JobState
    ) -> tuple[int, tuple[int, ...]] | None:
        request = self._pod_request(job, gpus, share, gang)
        rules = self._rules(job, request, state, share=share)
        known = self._waited.get(rules.alike) if rules.alike is not None else None
        if known is not None:  # a job alike to this one was filtered since the cluster last changed
            candidates = known
        else:
            candidates = np.unique(state.share_slots(job)[0]) if share else np.flatnonzero(state.free_whole() >= gpus)
            if len(candidates) == 0:
                return None
            candidates = self._passed_over(job, request, candidates, state, rules, share=share)
        if len(candidates) == 0:
            return None
        same_run = self._views_at[0] is state  # a view of an earlier run counts versions of another cluster
        view = self._views.get((job.job_type if share else None, None)) if gang is None and same_run else None
        if view is not None and (view[0][candidates] == state.version[candidates]).all():
            self._interner.node_state[candidates] = view[2][candidates]  # the job's view is up to date there
        else:
            for n in candidates:
                self._intern(state, int(n), job, share, gang)
        states, inverse = self._interner.distinct(candidates)
        # The JCT predictor is this job's own (`with_job`): a scorer per decision, its caches would never hit again.
        scores = Scorer(self._config, with_job(self._bundle, self._table, self._believed(job))).score_nodes(
            request, states
        )
        extender = np.array(extender_scores(scores, span_points=self._config.extender_span_points), dtype=np.float64)
        extender[[not s.feasible for s in scores]] = -np.inf
        milli = SHARE_MILLI if share else gpus * GPU_MILLI
        kube = np.floor(100.0 * (1.0 - _used_ratio_after(state, candidates, milli)))
        best = best_index(kube + self._weight * 10.0 * extender[inverse], self._rng)
        chosen = scores[int(inverse[best])]
        if not chosen.feasible:
            return None
        return int(candidates[best]), chosen.gpus


class _RoomTimes:
    """Per node, for one view, pod shape and leave times (`ExtenderJobPolicy._soonest_room`): the node's version when
    last looked at, whether it counts (a GPU model, no room now), and when counted its clock time of room (`room_at`)
    and the clock times between which that holds."""

    def __init__(self, n: int) -> None:
        self.seen = np.full(n, -1, dtype=np.int64)
        self.counted = np.zeros(n, dtype=bool)
        self.at = np.full(n, math.inf)
        self.since = np.full(n, -math.inf)
        self.until = np.full(n, math.inf)


class _Rules(NamedTuple):
    """The extender filter's rules for one job now (`ExtenderJobPolicy._rules`): the head's reservation, the claims
    of jobs ranked above it, the leave times when it may wait for a faster GPU, and then the key of its verdict
    (`alike`): what the filter reads of the job and the cluster, so that jobs with the same key get the same verdict
    until the cluster changes."""

    held: Reservation | None
    claimed: QueueRules
    leaving: LeaveTimes | None
    alike: tuple[object, ...] | None


@dataclass
class _Running:
    """A running job; its remaining work and rate live in the engine's arrays at `slot`."""

    job: Job
    parts: list[tuple[int, tuple[int, ...]]]
    milli: int
    gang: str | None
    start_s: float
    slot: int = -1
    partner: _Running | None = None


@dataclass
class JctResult:
    policy: str
    avg_jct_s: float
    p95_jct_s: float
    makespan_s: float
    avg_queue_s: float
    gpu_utilization: float
    jobs: int
    unschedulable_jobs: int
    cross_nvlink_group_jobs: int
    multi_node_jobs: int
    seconds: float
    jct_s: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "avg_jct_s": self.avg_jct_s,
            "p95_jct_s": self.p95_jct_s,
            "makespan_s": self.makespan_s,
            "avg_queue_s": self.avg_queue_s,
            "gpu_utilization": self.gpu_utilization,
            "jobs": self.jobs,
            "unschedulable_jobs": self.unschedulable_jobs,
            "cross_nvlink_group_jobs": self.cross_nvlink_group_jobs,
            "multi_node_jobs": self.multi_node_jobs,
            "seconds": self.seconds,
        }


class _Engine:
    """The cluster, the running jobs and their progress. Each running job's remaining work, rate and GPU milli held
    are kept in arrays by slot, slots in start order (the order the running jobs were iterated in before), so that an
    event's progress, next completion and finished jobs cost a few array operations rather than a loop over every
    running job."""

    def __init__(self, cluster: Cluster, policy: JobPolicy, truth: RateTable | None) -> None:
        self.cluster = cluster
        self.policy = policy
        self.truth = truth
        self.state = JobState(cluster, truth)
        self.sharing = truth is not None and bool(truth.norm)
        self.per_node = cluster.max_gpus_per_node
        self.running: dict[str, _Running] = {}
        self.gpu_milli_seconds = 0.0
        self.cross_group_jobs = 0
        self.multi_node_jobs = 0
        self._slots: list[_Running | None] = []
        self._remaining = np.zeros(0)
        self._rates = np.ones(0)
        self._held_milli = np.zeros(0)
        self._alive = np.zeros(0, dtype=bool)  # per slot: whether a running job holds it
        self._active: IntArray = np.zeros(0, dtype=np.int64)
        """The slots of the running jobs, ascending (recomputed when `_active_stale`)."""
        self._active_stale = False
        self._rooms: dict[tuple[int, bool, str | None], tuple[int, bool]] = {}
        """`has_room` per room key, with `JobState.changes` when found (it holds until the cluster changes)."""

    def _rate(self, run: _Running) -> float:
        gpus = tuple((n, g) for n, gs in run.parts for g in gs)
        partner = run.partner.job.job_type if run.partner is not None else None
        rate = true_rate(run.job, Assignment(gpus, partner), self.cluster.nodes, self.truth)
        if rate <= 0:
            raise ValueError(f"no true throughput for job {run.job.job_id} ({run.job.job_type}) under its placement")
        return rate

    def _rerate(self, run: _Running) -> None:
        self._rates[run.slot] = self._rate(run)

    def _add(self, run: _Running) -> None:
        """Give `run` the next slot (the slots compacted, in order, when the arrays are full)."""
        if len(self._slots) == len(self._remaining):
            keep = self.active()
            runs = [self._slots[int(i)] for i in keep]
            size = max(64, 2 * len(keep))
            remaining, rates, held = np.zeros(size), np.ones(size), np.zeros(size)
            remaining[: len(keep)] = self._remaining[keep]
            rates[: len(keep)] = self._rates[keep]
            held[: len(keep)] = self._held_milli[keep]
            self._remaining, self._rates, self._held_milli = remaining, rates, held
            self._alive = np.zeros(size, dtype=bool)
            self._alive[: len(keep)] = True
            self._slots = list(runs)
            for i, kept in enumerate(runs):
                assert kept is not None
                kept.slot = i
        run.slot = len(self._slots)
        self._slots.append(run)
        self._remaining[run.slot] = run.job.work
        self._held_milli[run.slot] = run.milli * sum(len(g) for _, g in run.parts)
        self._alive[run.slot] = True
        self._active_stale = True

    def active(self) -> IntArray:
        """The running jobs' slots, in start order."""
        if self._active_stale:
            self._active = np.flatnonzero(self._alive)
            self._active_stale = False
        return self._active

    def next_done(self, now: float) -> float:
        """When the first running job finishes at the current rates (inf when none runs)."""
        slots = self.active()
        if not len(slots):
            return math.inf
        return float(np.min(now + np.maximum(self._remaining[slots], 0.0) / self._rates[slots]))

    def done(self) -> list[_Running]:
        """The running jobs with no work left (within `_DONE_EPS_SECONDS` of it), in start order."""
        slots = self.active()
        finished = slots[self._remaining[slots] / self._rates[slots] <= _DONE_EPS_SECONDS]
        return [r for r in (self._slots[int(i)] for i in finished) if r is not None]

    def passed_over(self, job: Job, now: float) -> bool:
        """Whether `try_place` is known to fail now before the policy draws anything (`JobPolicy.passes_over` of the
        job's first pod): trying it would change nothing but the clock, which this sets as trying would."""
        self.state.now = now
        share = self.sharing and job.num_gpus == 1
        if job.num_gpus > self.per_node:
            return False
        return self.policy.passes_over(job, job.num_gpus, share, None, self.state)

    def try_place(self, job: Job, now: float) -> bool:
        share = self.sharing and job.num_gpus == 1
        sizes = [job.num_gpus] if job.num_gpus <= self.per_node else _gang_sizes(job.num_gpus, self.per_node)
        gang = job.job_id if len(sizes) > 1 else None
        milli = SHARE_MILLI if share else GPU_MILLI
        parts: list[tuple[int, tuple[int, ...]]] = []
        self.state.now = now
        for size in sizes:
            choice = self.policy.choose(job, size, share, gang, self.state)
            if choice is None:
                for node, gpus in parts:
                    self.state.release(job, node, gpus, milli, gang)
                self.state.started.pop(job.job_id, None)
                return False
            self.state.assign(job, choice[0], choice[1], milli, gang)
            parts.append(choice)
        run = _Running(job, parts, milli, gang, now)
        self._add(run)
        placed = tuple((n, g) for n, gs in parts for g in gs)
        self.cross_group_jobs += crosses_nvlink_groups(Assignment(placed), self.cluster.nodes)
        self.multi_node_jobs += len({n for n, _ in parts}) > 1
        if share:
            node, (gpu,) = parts[0]
            others = [r for r in self.state.residents[(node, gpu)] if r is not job]
            if others:
                run.partner = self.running[others[0].job_id]
                run.partner.partner = run
                self._rerate(run.partner)
        self._rerate(run)
        self.running[job.job_id] = run
        return True

    def room_key(self, job: Job) -> tuple[int, bool, str | None]:
        """What decides whether the cluster has room for the job's first pod (`has_room`)."""
        share = self.sharing and job.num_gpus == 1
        return min(job.num_gpus, self.per_node), share, job.job_type if share else None

    def has_room(self, job: Job) -> bool:
        """Whether some node has room for the job's first pod (gang member) as every policy looks for it: a GPU with
        half free that the job may share, or that many wholly free GPUs. Without, `try_place` fails before any
        policy decision (and draws nothing), and keeps failing until a job ends."""
        key = self.room_key(job)
        found = self._rooms.get(key)
        if found is None or found[0] != self.state.changes:
            size, share, _ = key
            room = len(self.state.share_slots(job)[0]) > 0 if share else bool((self.state.free_whole() >= size).any())
            found = self._rooms[key] = (self.state.changes, room)
        return found[1]

    def finish(self, run: _Running) -> None:
        for node, gpus in run.parts:
            self.state.release(run.job, node, gpus, run.milli, run.gang)
        self.state.started.pop(run.job.job_id, None)
        del self.running[run.job.job_id]
        self._slots[run.slot] = None
        self._alive[run.slot] = False
        self._active_stale = True
        if run.partner is not None:
            run.partner.partner = None
            self._rerate(run.partner)

    def advance(self, dt: float) -> None:
        """Every running job progresses `dt` seconds at its rate; the GPU time held is summed job by job in start
        order (`np.add.accumulate` adds one term after the other, as the loop over the jobs did)."""
        if dt <= 0:
            return
        slots = self.active()
        if not len(slots):
            return
        self._remaining[slots] -= self._rates[slots] * dt
        terms = np.concatenate(([self.gpu_milli_seconds], self._held_milli[slots] * dt))
        self.gpu_milli_seconds = float(np.add.accumulate(terms)[-1])


def job_task_mix(jobs: Sequence[Job], per_node: int, sharing: bool) -> TaskMix:
    """The requests a JCT run makes, as `ScoringConfig.task_mix` (what the packing component keeps room for): a 1-GPU
    job asks half a GPU when jobs share, a job larger than a node one request per gang member."""
    counts: dict[tuple[int, int], int] = {}
    for job in jobs:
        if sharing and job.num_gpus == 1:
            shapes = [(1, SHARE_MILLI)]
        elif job.num_gpus <= per_node:
            shapes = [(job.num_gpus, GPU_MILLI)]
        else:
            shapes = [(size, GPU_MILLI) for size in _gang_sizes(job.num_gpus, per_node)]
        for shape in shapes:
            counts[shape] = counts.get(shape, 0) + 1
    total = sum(counts.values())
    if total == 0:
        raise ValueError("the trace has no job")
    return tuple((k, m, n / total) for (k, m), n in sorted(counts.items()))


def _gang_sizes(gpus: int, per_node: int) -> list[int]:
    full, rest = divmod(gpus, per_node)
    return [per_node] * full + ([rest] if rest else [])


def run_jct(cluster: Cluster, jobs: Sequence[Job], policy: JobPolicy, truth: RateTable | None) -> JctResult:
    """Simulate `jobs` (sorted by arrival) on `cluster` under `policy`; rates come from `truth`."""
    started = time.perf_counter()
    engine = _Engine(cluster, policy, truth)
    total_gpus = cluster.total_gpus
    fits = [j for j in jobs if j.num_gpus <= total_gpus]
    arrivals = sorted(fits, key=lambda j: j.arrival_s)
    start_s: dict[str, float] = {}
    end_s: dict[str, float] = {}
    queue: list[Job] = []
    queued = Counter[tuple[int, bool, str | None]]()  # room keys of the queue
    dead: set[tuple[int, bool, str | None]] = set()  # room keys without room since the last release
    releases = 0
    passed_at = -1  # `releases` at the last scheduling pass
    now = arrivals[0].arrival_s if arrivals else 0.0
    i = 0
    while i < len(arrivals) or engine.running:
        next_arrival = arrivals[i].arrival_s if i < len(arrivals) else math.inf
        t = min(engine.next_done(now), next_arrival)
        if math.isinf(t):
            break
        engine.advance(t - now)
        now = t
        for run in engine.done():
            engine.finish(run)
            end_s[run.job.job_id] = now
            releases += 1
        # Every job still queued after a pass failed in it; until a job ends it would fail again, so only the jobs
        # arrived since are tried (all of them after a release).
        fresh_from = 0 if releases != passed_at else len(queue)
        if releases != passed_at:
            dead.clear()
        passed_at = releases
        while i < len(arrivals) and arrivals[i].arrival_s <= now:
            queue.append(arrivals[i])
            queued[engine.room_key(arrivals[i])] += 1
            i += 1
        fresh = queued.copy() if fresh_from == 0 else Counter(engine.room_key(j) for j in queue[fresh_from:])
        live = sum(n for key, n in fresh.items() if key not in dead)  # fresh jobs left whose key may have room
        waiting: list[Job] = []
        policy.begin_pass(queue, now, engine.state)
        head = False
        k = 0
        while k < len(queue):
            if head and k < fresh_from:  # failed since the last release, and no more holds to ask: skipped
                waiting += queue[k:fresh_from]
                k = fresh_from
                continue
            if head and live == 0:  # the rest would only find no room: they wait
                if k < len(queue):
                    engine.state.now = now  # as trying them would have set it
                waiting += queue[k:]
                break
            job = queue[k]
            k += 1
            if k <= fresh_from:
                head = head or policy.hold(job, engine.state)
                waiting.append(job)
                continue
            key = engine.room_key(job)
            fresh[key] -= 1
            if key in dead:
                engine.state.now = now  # as `try_place` sets it before finding no room
                placed = False
            elif engine.passed_over(job, now):  # it has room (a job alike to it had candidates) but waits
                live -= 1
                placed = False
            else:
                live -= 1
                placed = engine.try_place(job, now)
                if not placed and not engine.has_room(job):
                    dead.add(key)
                    live -= fresh[key]
            if placed:
                start_s[job.job_id] = now
                queued[key] -= 1
            else:
                head = head or policy.hold(job, engine.state)
                waiting.append(job)
        queue = waiting
    finished = [j for j in arrivals if j.job_id in end_s]
    jct = np.array([end_s[j.job_id] - j.arrival_s for j in finished])
    wait = np.array([start_s[j.job_id] - j.arrival_s for j in finished])
    first = min((j.arrival_s for j in finished), default=0.0)
    makespan = max(end_s.values(), default=first) - first
    return JctResult(
        policy=policy.name,
        avg_jct_s=float(jct.mean()) if len(jct) else 0.0,
        p95_jct_s=float(np.percentile(jct, 95)) if len(jct) else 0.0,
        makespan_s=makespan,
        avg_queue_s=float(wait.mean()) if len(wait) else 0.0,
        gpu_utilization=engine.gpu_milli_seconds / GPU_MILLI / (total_gpus * makespan) if makespan > 0 else 0.0,
        jobs=len(finished),
        unschedulable_jobs=len(jobs) - len(finished),
        cross_nvlink_group_jobs=engine.cross_group_jobs,
        multi_node_jobs=engine.multi_node_jobs,
        seconds=time.perf_counter() - started,
        jct_s=sorted(float(x) for x in jct),
    )
