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
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from advisor.placement.fragmentation import IntArray, TaskMix
from advisor.sim.job_extender import JCT_EXTENDER_WEIGHT, ExtenderJobPolicy
from advisor.sim.job_state import SHARE_MILLI, JobPolicy, JobState, KubeJobPolicy, gang_sizes
from advisor.sim.model import GPU_MILLI, Cluster, Job
from advisor.sim.rates import Assignment, RateTable, crosses_nvlink_groups, true_rate

__all__ = [
    "JCT_EXTENDER_WEIGHT",
    "SHARE_MILLI",
    "ExtenderJobPolicy",
    "JctResult",
    "JobPolicy",
    "JobState",
    "KubeJobPolicy",
    "job_task_mix",
    "run_jct",
]

_DONE_EPS_SECONDS = 1e-6


@dataclass
class _Running:
    """A running job; its remaining work and rate live in the engine's arrays at `slot`."""

    job: Job
    parts: list[tuple[int, tuple[int, ...]]]
    milli: int
    gang: str | None
    start_seconds: float
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
        sizes = [job.num_gpus] if job.num_gpus <= self.per_node else gang_sizes(job.num_gpus, self.per_node)
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
            shapes = [(size, GPU_MILLI) for size in gang_sizes(job.num_gpus, per_node)]
        for shape in shapes:
            counts[shape] = counts.get(shape, 0) + 1
    total = sum(counts.values())
    if total == 0:
        raise ValueError("the trace has no job")
    return tuple((k, m, n / total) for (k, m), n in sorted(counts.items()))


RoomKey = tuple[int, bool, str | None]
"""What decides whether the cluster has room for a job's first pod (`_Engine.room_key`)."""


@dataclass
class _Queue:
    """The waiting jobs, in arrival order, and what the scheduling passes know of them between events."""

    jobs: list[Job] = field(default_factory=list)
    queued: Counter[RoomKey] = field(default_factory=Counter)
    """The room keys of `jobs`."""
    dead: set[RoomKey] = field(default_factory=set)
    """Room keys without room since the last release."""
    releases: int = 0
    """Jobs finished so far."""
    passed_at: int = -1
    """`releases` at the last scheduling pass."""

    def begin(self) -> int:
        """Start a pass; the position of the first job to try (before the jobs arrived since are appended). Every
        job still queued after a pass failed in it; until a job ends it would fail again, so only the jobs arrived
        since are tried (all of them after a release)."""
        released = self.releases != self.passed_at
        if released:
            self.dead.clear()
        self.passed_at = self.releases
        return 0 if released else len(self.jobs)

    def arrive(self, job: Job, key: RoomKey) -> None:
        self.jobs.append(job)
        self.queued[key] += 1


@dataclass
class _Pass:
    """One scheduling pass over the queue: the jobs to try (from `fresh_from`), per room key how many of them are
    still to be tried (`fresh`), how many of those may find room (`live`), and whether the policy has held nodes for a
    head or holds nothing this pass (`head`: no more `hold` to ask)."""

    fresh_from: int
    fresh: Counter[RoomKey]
    live: int
    head: bool = False


def _try_fresh(engine: _Engine, queue: _Queue, scan: _Pass, job: Job, now: float) -> bool:
    """Try to place a job not tried since the last release; whether it was placed."""
    key = engine.room_key(job)
    scan.fresh[key] -= 1
    if key in queue.dead:
        engine.state.now = now  # as `try_place` sets it before finding no room
        return False
    scan.live -= 1
    if engine.passed_over(job, now):  # it has room (a job alike to it had candidates) but waits
        return False
    placed = engine.try_place(job, now)
    if placed:
        queue.queued[key] -= 1
    elif not engine.has_room(job):
        queue.dead.add(key)
        scan.live -= scan.fresh[key]
    return placed


def _scheduling_pass(engine: _Engine, queue: _Queue, fresh_from: int, now: float) -> list[Job]:
    """Scan the queue in arrival order, placing each job that fits; the jobs placed."""
    jobs = queue.jobs
    fresh = queue.queued.copy() if fresh_from == 0 else Counter(engine.room_key(j) for j in jobs[fresh_from:])
    live = sum(n for key, n in fresh.items() if key not in queue.dead)  # fresh jobs left whose key may have room
    scan = _Pass(fresh_from, fresh, live)
    waiting: list[Job] = []
    placed: list[Job] = []
    engine.policy.begin_pass(jobs, now, engine.state)
    k = 0
    while k < len(jobs):
        if scan.head and k < fresh_from:  # failed since the last release, and no more holds to ask: skipped
            waiting += jobs[k:fresh_from]
            k = fresh_from
            continue
        if scan.head and scan.live == 0:  # the rest would only find no room: they wait
            engine.state.now = now  # as trying them would have set it
            waiting += jobs[k:]
            break
        job = jobs[k]
        k += 1
        if k > fresh_from and _try_fresh(engine, queue, scan, job, now):
            placed.append(job)
            continue
        scan.head = scan.head or engine.policy.hold(job, engine.state)
        waiting.append(job)
    queue.jobs = waiting
    return placed


def run_jct(cluster: Cluster, jobs: Sequence[Job], policy: JobPolicy, truth: RateTable | None) -> JctResult:
    """Simulate `jobs` (sorted by arrival) on `cluster` under `policy`; rates come from `truth`."""
    started = time.perf_counter()
    engine = _Engine(cluster, policy, truth)
    arrivals = sorted((j for j in jobs if j.num_gpus <= cluster.total_gpus), key=lambda j: j.arrival_s)
    start_seconds: dict[str, float] = {}
    end_seconds: dict[str, float] = {}
    queue = _Queue()
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
            end_seconds[run.job.job_id] = now
            queue.releases += 1
        fresh_from = queue.begin()
        while i < len(arrivals) and arrivals[i].arrival_s <= now:
            queue.arrive(arrivals[i], engine.room_key(arrivals[i]))
            i += 1
        for job in _scheduling_pass(engine, queue, fresh_from, now):
            start_seconds[job.job_id] = now
    return _result(
        engine,
        submitted=len(jobs),
        arrivals=arrivals,
        start_seconds=start_seconds,
        end_seconds=end_seconds,
        seconds=time.perf_counter() - started,
    )


def _result(
    engine: _Engine,
    *,
    submitted: int,
    arrivals: Sequence[Job],
    start_seconds: dict[str, float],
    end_seconds: dict[str, float],
    seconds: float,
) -> JctResult:
    finished = [j for j in arrivals if j.job_id in end_seconds]
    jct = np.array([end_seconds[j.job_id] - j.arrival_s for j in finished])
    wait = np.array([start_seconds[j.job_id] - j.arrival_s for j in finished])
    first = min((j.arrival_s for j in finished), default=0.0)
    makespan = max(end_seconds.values(), default=first) - first
    total_gpus = engine.cluster.total_gpus
    return JctResult(
        policy=engine.policy.name,
        avg_jct_s=float(jct.mean()) if len(jct) else 0.0,
        p95_jct_s=float(np.percentile(jct, 95)) if len(jct) else 0.0,
        makespan_s=makespan,
        avg_queue_s=float(wait.mean()) if len(wait) else 0.0,
        gpu_utilization=engine.gpu_milli_seconds / GPU_MILLI / (total_gpus * makespan) if makespan > 0 else 0.0,
        jobs=len(finished),
        unschedulable_jobs=submitted - len(finished),
        cross_nvlink_group_jobs=engine.cross_group_jobs,
        multi_node_jobs=engine.multi_node_jobs,
        seconds=seconds,
        jct_s=sorted(float(x) for x in jct),
    )
