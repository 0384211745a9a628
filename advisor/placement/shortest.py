"""Shortest first: pending pods that waiting has slowed most take the room first (highest response ratio next).

With `ScoringConfig.shortest_first` the same queue is served by response ratio rather than by age (`queue_claims`):
each pending pod's ratio is (time waited + predicted run time) / predicted run time, and the filtered pod is kept off
room that the pods with a higher ratio are expected to take (`claims`, `yield_verdicts`).

The filter runs this rule as one of its stages (`advisor.placement.filter`); the simulator lays its own waiting jobs
as claimants (`advisor.sim.jobs`).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from advisor.placement.config import ScoringConfig
from advisor.placement.holding import Labels, usable_nodes
from advisor.placement.queue import PendingPod
from advisor.placement.scoring import is_stale, resources_short
from advisor.placement.types import WHOLE_GPU_MILLI, NodeState, PodRequest
from advisor.predictors import Predictors

CLAIM_GRACE_SECONDS = 300.0
"""A pending pod expected to take room ahead of others (shortest first) that is still pending this long after it was
first so expected takes no room ahead of anyone any more: something the advisor does not see (a taint, inter-pod
affinity, a volume's zone) keeps it off the nodes it was expected on, and the pods that yielded to it would otherwise
wait on idle GPUs. kube-scheduler retries an unschedulable pod at least every 5 minutes, and at once when a pod
leaves."""


def response_ratio(waited_seconds: float, run_seconds: float) -> float:
    """(wait + run) / run: the slowdown a pending pod ends with if it starts now. Highest first (HRRN, Brinch Hansen
    1971) puts short pods first, as shortest-job-first does, and lets every pod's ratio grow while it waits, so a
    long pod is not passed over for ever."""
    return (max(waited_seconds, 0.0) + run_seconds) / run_seconds


@dataclass(frozen=True, slots=True)
class Claimant:
    """A pending pod that may take room ahead of others: its request (never a gang member's), how long it has waited,
    its predicted run time per GPU model (`runs`, models without an estimate left out; not empty), the nodes its node
    selector and affinity allow (None: any), and its priority. `ratio` is its `response_ratio` on its quickest model;
    pods go by `rank`: higher priority first, then higher ratio."""

    pod: str
    request: PodRequest
    waited_seconds: float
    runs: Mapping[str, float]
    usable: Callable[[str], bool] | None = None
    priority: int = 0
    run_seconds: float = field(init=False)
    ratio: float = field(init=False)

    def __post_init__(self) -> None:
        quickest = min(self.runs.values())
        object.__setattr__(self, "run_seconds", quickest)
        object.__setattr__(self, "ratio", response_ratio(self.waited_seconds, quickest))

    @property
    def rank(self) -> tuple[int, float]:
        return (self.priority, self.ratio)


@dataclass(frozen=True, slots=True)
class Claim:
    """Room on `node` that `claimant` is expected to take (`claims`)."""

    claimant: Claimant
    node: str


class _Room:
    """Free milli-GPU per GPU of one node (0 for an unhealthy GPU) while claims are laid on it."""

    __slots__ = ("milli",)

    def __init__(self, node: NodeState) -> None:
        self.milli = list(node.free_milli)

    def left_after(self, pod: PodRequest) -> int | None:
        """The milli-GPU left on the node once `pod` takes its room (best fit: less is tighter), None if it does not
        fit. A memory-only share takes no SM room."""
        if pod.whole_gpus:
            free = [i for i, m in enumerate(self.milli) if m == WHOLE_GPU_MILLI]
            return sum(self.milli) - pod.whole_gpus * WHOLE_GPU_MILLI if len(free) >= pod.whole_gpus else None
        fits = [m for m in self.milli if m >= max(pod.share_milli, 1)]
        return sum(self.milli) - pod.share_milli if fits else None

    def take(self, pod: PodRequest) -> None:
        if pod.whole_gpus:
            free = [i for i, m in enumerate(self.milli) if m == WHOLE_GPU_MILLI][: pod.whole_gpus]
            for i in free:
                self.milli[i] = 0
            return
        # A share goes to the fullest GPU it fits on (as the scorer prefers), leaving whole GPUs whole.
        gpu = min((m, i) for i, m in enumerate(self.milli) if m >= max(pod.share_milli, 1))[1]
        self.milli[gpu] -= pod.share_milli


CLAIM_SCAN = 256
"""At most this many pending pods, in response-ratio order, are laid on the nodes by `claims` (each costs a pass over
the GPU models and the nodes with room); those after them take no room ahead of anyone."""


def claims(
    claimants: Sequence[Claimant],
    nodes: Mapping[str, NodeState],
    *,
    config: ScoringConfig,
    now_seconds: float | None = None,
) -> list[Claim]:
    """Where the pending pods, taken by rank (higher priority, then higher response ratio, first; `claimants` order
    breaks ties), are expected to go: each takes room on the GPU model where it is predicted to run fastest among those
    with room for it and within `wait_slack` of its quickest (a slower model it would pass over, waiting), on the node
    there it fits most tightly (least free milli-GPU; then by name). The log of those that found room; a pod with none
    takes nothing. Fresh nodes only; CPU and memory are checked against each node's free amounts as known, not
    decremented by claims."""
    ordered = sorted(claimants, key=lambda c: (-c.priority, -c.ratio))[:CLAIM_SCAN]
    if not ordered:
        return []
    by_model: dict[str, list[tuple[int, str]]] = {}  # per GPU model, (free milli-GPU, node) ascending
    for name, node in nodes.items():  # by key: one state may stand for several alike nodes (the simulator's)
        free = sum(node.free_milli)
        if free and node.gpu_model and not is_stale(node, config, now_seconds):
            by_model.setdefault(node.gpu_model, []).append((free, name))
    for index in by_model.values():
        index.sort()
    rooms: dict[str, _Room] = {}  # the nodes claims were tried on, as the claims leave them

    def room(name: str) -> _Room:
        found = rooms.get(name)
        if found is None:
            found = rooms[name] = _Room(nodes[name])
        return found

    log: list[Claim] = []
    full: set[tuple[object, ...]] = set()  # shapes that found no room: room only shrinks, so later ones neither
    for claimant in ordered:
        pod = claimant.request
        runs = claimant.runs
        limit = claimant.run_seconds * (config.wait_slack if config.wait_slack is not None else math.inf)
        models = sorted((m for m in by_model if m in runs and runs[m] <= limit), key=lambda m: (runs[m], m))
        shape = (pod.whole_gpus, pod.share_milli, pod.cpu_milli, pod.memory_mib, *models)
        if claimant.usable is None and shape in full:
            continue
        need = pod.whole_gpus * WHOLE_GPU_MILLI or max(pod.share_milli, 1)
        for model in models:
            index = by_model[model]
            at = bisect_left(index, (need, ""))
            found = next(
                (
                    i
                    for i in range(at, len(index))
                    if room(index[i][1]).left_after(pod) is not None
                    and (claimant.usable is None or claimant.usable(index[i][1]))
                    and resources_short(nodes[index[i][1]], pod) is None
                ),
                None,
            )
            if found is not None:
                _, taken = index.pop(found)
                left = room(taken)
                left.take(pod)
                if sum(left.milli):
                    insort(index, (sum(left.milli), taken))
                log.append(Claim(claimant, taken))
                break
        else:
            if claimant.usable is None:
                full.add(shape)
    return log


def yield_verdicts(
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    log: Sequence[Claim],
    *,
    rank: tuple[int, float],
) -> dict[str, str]:
    """{node: reason} for the candidates on which `pod` (its priority and response ratio: `rank`) has room now but not
    once the pending pods ranked above it take theirs (the first claims of `log`, `claims`). A gang member never
    yields."""
    if pod.gang is not None:
        return {}
    rooms: dict[str, _Room] = {}
    last: dict[str, Claim] = {}
    for claim in log:
        if not claim.claimant.rank > rank:
            break  # the log is in rank order
        if claim.claimant.pod == pod.name:
            continue
        state = nodes.get(claim.node)
        if state is None:
            continue
        room = rooms.get(claim.node)
        if room is None:
            room = rooms[claim.node] = _Room(state)
        room.take(claim.claimant.request)
        last[claim.node] = claim
    verdicts: dict[str, str] = {}
    for name in names:
        room = rooms.get(name)
        state = nodes.get(name)
        if room is None or state is None or room.left_after(pod) is not None or _Room(state).left_after(pod) is None:
            continue
        c = last[name].claimant
        why = (
            f"priority {c.priority} vs this pod's {rank[0]}"
            if c.priority > rank[0]
            else f"response ratio {c.ratio:.2f} vs this pod's {rank[1]:.2f}"
        )
        verdicts[name] = (
            f"room kept for {c.pod}, pending ~{c.waited_seconds:.0f} s for a ~{c.run_seconds:.0f} s run: {why} "
            "(shortest first)"
        )
    return verdicts


def queue_claims(
    pod: PodRequest,
    queue_key: tuple[int, float, str],
    scheduler: str,
    pending: Sequence[PendingPod],
    nodes: Mapping[str, NodeState],
    *,
    labels: Labels,
    config: ScoringConfig,
    predictors: Predictors,
    now_seconds: float,
    claimed_since: Callable[[str], float | None] | None = None,
) -> tuple[list[Claim], tuple[int, float] | None]:
    """The room the pending pods of `scheduler` ranked above `pod` — higher priority, or the same and a higher
    response ratio — are expected to take (`advisor.placement.shortest.claims`, for `yield_verdicts`), and `pod`'s own
    rank (None, and no claims: it is a gang member, or has no JCT estimate — it yields to nobody). `queue_key` is the
    pod's (`PendingPod.queue_key`: its priority and creation time). A pod's run time is its JCT estimate on each GPU
    model of the nodes, its wait the time since it was created (unknown: none). Gang members take no room ahead of
    others, nor a pod first expected to take room more than `CLAIM_GRACE_SECONDS` ago (`claimed_since`: when, for a
    pending pod; the caller records it, `ClusterState.note_claims`)."""
    if not config.shortest_first or pod.gang is not None:
        return [], None
    models = sorted({n.gpu_model for n in nodes.values() if n.gpu_model})  # stale nodes' too: claims skip them
    runs_of: dict[tuple[str | None, int], dict[str, float]] = {}

    def claimant(
        name: str, request: PodRequest, created: float | None, priority: int, usable: Callable[[str], bool] | None
    ) -> Claimant | None:
        key = (request.workload, max(request.whole_gpus, 1))
        runs = runs_of.get(key)
        if runs is None:
            figures = {m: predictors.jct.jct_seconds(request.workload, m, key[1]) for m in models}
            runs = runs_of[key] = {m: r for m, r in figures.items() if r is not None and r > 0}
        if not runs:
            return None
        waited = now_seconds - created if created is not None and math.isfinite(created) else 0.0
        return Claimant(name, request, waited_seconds=waited, runs=runs, usable=usable, priority=priority)

    own = claimant(pod.name, pod, queue_key[1], -queue_key[0], None)
    if own is None:
        return [], None
    ahead = [
        c
        for p in pending
        if p.scheduler == scheduler
        and p.pod != pod.name
        and p.request.gang is None
        and (claimed_since is None or now_seconds - (claimed_since(p.pod) or now_seconds) <= CLAIM_GRACE_SECONDS)
        and (c := claimant(p.pod, p.request, p.created_seconds, p.priority, usable_nodes(p.placement, labels)))
        is not None
        and c.rank > own.rank
    ]
    return claims(ahead, nodes, config=config, now_seconds=now_seconds), own.rank
