"""The `advisor` and `oracle` policies of a JCT run: kube-scheduler's LeastAllocated plus the advisor extender running
`advisor.placement.scorer.Scorer` (the advisor scores with predicted rates, the oracle with the true ones), with
the extender filter's rules (holding for the blocked head, shortest-first claims, waiting for a faster GPU) run on
the policy's own queue.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import islice
from typing import NamedTuple

import numpy as np

from advisor.placement.config import ScoringConfig
from advisor.placement.extender import extender_scores
from advisor.placement.filter import QueueRules, run_filter
from advisor.placement.fragmentation import IntArray
from advisor.placement.holding import HEAD_SCAN, Reservation, blocked_reservation
from advisor.placement.scorer import Scorer
from advisor.placement.scoring import is_stale
from advisor.placement.shortest import CLAIM_SCAN, Claim, Claimant, claims
from advisor.placement.types import NodeState, PodRequest, Resident
from advisor.placement.waiting import LeaveTimes, RoomAt, has_room_now, room_at
from advisor.predictors import Predictors
from advisor.sim.adapter import StateInterner
from advisor.sim.job_state import SHARE_MILLI, JobState, gang_sizes, used_ratio_after
from advisor.sim.model import GPU_MILLI, Cluster, Job, best_index
from advisor.sim.rates import JobJct, RateTable, predictors_for, with_job

_NO_CLAIMS = QueueRules()  # what a job that claims nothing (no claimant this pass) is asked to yield
JCT_EXTENDER_WEIGHT = 2.0
"""kube-scheduler's weight of the advisor extender in JCT runs (an integer, as the scheduler's configuration needs),
chosen on the validation run only: Gavel trace msr_vc_6c71a0 at half its arrival rate, seeds 0-2
(`bench/sim_gavel.py --validate`; docs/evaluation.md, experiment 2, gives the figures)."""
# What telemetry would show of a training job on its GPU; read only by the heuristic interference fallback.
_RESIDENT_SM_RATIO = 0.9
_RESIDENT_BANDWIDTH_RATIO = 0.5


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
        sizes = [job.num_gpus] if job.num_gpus <= self._per_node else gang_sizes(job.num_gpus, self._per_node)
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
            members=1 if request.gang is None else len(gang_sizes(job.num_gpus, self._per_node)),
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
        kube = np.floor(100.0 * (1.0 - used_ratio_after(state, candidates, milli)))
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
