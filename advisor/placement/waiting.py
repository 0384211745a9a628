"""Waiting for a faster GPU: when residents leave, when a node has room, and which slower nodes a pod passes over.

`wait_verdicts` (a stage of the extender filter, `advisor.placement.filter`): a pod that would finish sooner by waiting
for room on a faster GPU model than by starting now on a slower one is kept off the slower nodes. From the JCT
predictor: `run[m]`, the pod's predicted run time on model m; `room[m]`, the least time until some node of model m has
room for it (each resident's predicted end, `LeaveTimes`; a GPU whose residents' ends are unknown never frees as far as
the advisor knows). A node of model m fails when `run[m] > ScoringConfig.wait_slack × min over m' of (room[m'] +
run[m'])`. No JCT estimate, a gang member, or a single GPU model in the cluster: nobody waits.

The same leave times give the holding rule its reservations (`advisor.placement.holding`). Each node's GPU end times
are memoised per node state and JCT predictor (`NodeMemo`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from advisor.placement.config import ScoringConfig
from advisor.placement.memo import NodeMemo
from advisor.placement.scoring import is_stale
from advisor.placement.types import GpuState, NodeState, PodRequest, Resident, duration_text
from advisor.predictors import Predictors

ResidentEnd = Callable[[NodeState, Resident], float | None]
"""Predicted time (seconds, on the clock of `LeaveTimes.now_seconds`) at which `Resident` leaves its node; None when
there is no basis for it (no JCT estimate, no start time)."""


@dataclass(frozen=True, slots=True)
class LeaveTimes:
    """When residents leave, as the wait rule sees it: `end` of each resident, and `now_seconds`. A resident whose
    predicted end has passed (a job running late) gives no basis for when it ends: its GPU counts as never freeing.

    `cache_key` is what `end` depends on besides the node (the service's JCT predictor): with one, each node's GPU end
    times are memoised per node state under it (`LEAVE_ENDS`; a node's residents and their start times change only
    with a new snapshot, hence a new `NodeState`), so a filter call costs a lookup per node rather than a prediction
    per busy GPU.
    None: nothing is memoised (the simulator, whose node states are reused across time).
    """

    end: ResidentEnd
    now_seconds: float
    cache_key: object | None = None


class GpuEnds(NamedTuple):
    """A node's busy healthy GPUs (allocated to some pod) and when each empties: `spans` (first, last) resident end
    per GPU (inf, inf when a resident's end is unknown or no pod is seen on it); `lasts` the last ends ascending;
    `first` the earliest first end (while it is in the future no GPU has an overdue resident)."""

    spans: tuple[tuple[float, float], ...]
    lasts: tuple[float, ...]
    first: float


LEAVE_ENDS: NodeMemo[dict[int, tuple[object, GpuEnds]]] = NodeMemo()
"""Each node state's `GpuEnds` under a `LeaveTimes.cache_key` (by its id, the key kept to check identity)."""


def jct_leave_times(predictors: Predictors, now_seconds: float) -> LeaveTimes:
    """The service's `LeaveTimes`: a resident leaves at its pod's start plus its predicted JCT (its workload on the
    node's GPU model, on as many GPUs as it holds there); no end without a start time or an estimate. Memoised per node
    under the JCT predictor, which a model reload replaces."""

    held_on: dict[int, dict[str, int]] = {}  # per node (by identity, alive for the call): GPUs each pod holds

    def end(node: NodeState, resident: Resident) -> float | None:
        if resident.started_seconds is None or resident.workload is None:
            return None
        held = held_on.get(id(node))
        if held is None:
            held = held_on[id(node)] = {}
            for g in node.gpus:
                for pod in {r.pod for r in g.residents}:
                    held[pod] = held.get(pod, 0) + 1
        predicted = predictors.jct.jct_seconds(resident.workload, node.gpu_model, max(held.get(resident.pod, 0), 1))
        return None if predicted is None else resident.started_seconds + predicted

    return LeaveTimes(end, now_seconds, cache_key=predictors.jct)


def gpu_ends(node: NodeState, leaving: LeaveTimes) -> GpuEnds:
    key = leaving.cache_key
    memo = LEAVE_ENDS.get(node) if key is not None else None
    if memo is not None:
        found = memo.get(id(key))
        if found is not None and found[0] is key:
            return found[1]
    spans = tuple(_gpu_span(node, g, leaving.end) for g in node.gpus if g.healthy and g.allocated_milli)
    ends = GpuEnds(spans, tuple(sorted(last for _, last in spans)), min((f for f, _ in spans), default=math.inf))
    if key is not None:
        if memo is None:
            memo = LEAVE_ENDS.put(node, {})
        if len(memo) > 3:  # predictors replaced by a model reload: the old entries are dead
            memo.clear()
        memo[id(key)] = (key, ends)
    return ends


def _gpu_span(node: NodeState, gpu: GpuState, end: ResidentEnd) -> tuple[float, float]:
    """(first, last) end of the pods on a busy GPU, (inf, inf) if no pod is seen on it or an end is unknown."""
    first, last = math.inf, -math.inf
    for r in gpu.residents:
        if r.gpu_milli or r.workload or r.started_seconds is not None:  # a pod, not a bare host process
            at = end(node, r)
            if at is None:
                return math.inf, math.inf
            first, last = min(first, at), max(last, at)
    return (first, last) if last > -math.inf else (math.inf, math.inf)


def room_seconds(node: NodeState, pod: PodRequest, leaving: LeaveTimes) -> float:
    """Predicted seconds until `node` has room for `pod` (0 now; inf when it never will as far as is known): a whole-GPU
    request waits for its k-th healthy GPU to empty, a share for the first GPU with room or, failing that, the first
    GPU to empty (shares freed one by one are not counted: the estimate errs toward waiting less)."""
    if has_room_now(node, pod):
        return 0.0
    return room_at(node, pod, leaving).at_seconds - leaving.now_seconds


class RoomAt(NamedTuple):
    """When a node without room now has room for a pod (`at_seconds`, on the clock of `LeaveTimes.now_seconds`; inf:
    never as far as is known), and until when that answer holds (`until_seconds`: the next predicted end to pass, after
    which that GPU counts as never freeing). Between the two the node's time until room only shrinks with the clock."""

    at_seconds: float
    until_seconds: float


def room_at(node: NodeState, pod: PodRequest, leaving: LeaveTimes) -> RoomAt:
    """`room_seconds` of a node without room now, as a clock time: the k-th last end among its busy GPUs whose residents
    are not overdue. `room_seconds` is this minus the clock, so a caller that keeps the answer until `until_seconds`
    (the simulator, across events) gets the same figures, bit for bit, as asking again."""
    need = max(pod.whole_gpus, 1) - (node.free_gpus if pod.whole_gpus else 0)
    ends = gpu_ends(node, leaving)
    if len(ends.lasts) < need:
        return RoomAt(math.inf, math.inf)
    now = leaving.now_seconds
    if ends.first > now:  # nobody overdue: the k-th GPU to empty is the k-th last end
        return RoomAt(ends.lasts[need - 1], ends.first)
    lasts = sorted(last for first, last in ends.spans if first > now)
    at = lasts[need - 1] if len(lasts) >= need else math.inf
    return RoomAt(at, min((first for first, _ in ends.spans if first > now), default=math.inf))


def has_room_now(node: NodeState, pod: PodRequest) -> bool:
    """k healthy GPUs with nothing allocated, or for a share a healthy GPU with its `share_milli` free (any healthy
    GPU for a memory-only share)."""
    if pod.whole_gpus:
        return node.free_gpus >= pod.whole_gpus
    if pod.share_milli:
        return max(node.free_milli, default=0) >= pod.share_milli
    return node.healthy_count > 0


def _run_seconds(pod: PodRequest, models: Iterable[str], predictors: Predictors) -> dict[str, float] | None:
    """{GPU model: predicted seconds the pod runs there}; None when a model has no positive prediction (no wait can
    then be weighed)."""
    count = max(pod.whole_gpus, 1)
    run: dict[str, float] = {}
    for model in models:
        seconds = predictors.jct.jct_seconds(pod.workload, model, count)
        if seconds is None or not seconds > 0:
            return None
        run[model] = seconds
    return run


def wait_verdicts(
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    *,
    config: ScoringConfig,
    predictors: Predictors,
    leaving: LeaveTimes,
    now_seconds: float | None = None,
    usable: Callable[[str], bool] | None = None,
) -> dict[str, str]:
    """{node: reason} for the candidates `names` that `pod` should pass over to wait for a faster GPU model (module
    docstring); room is looked for on every fresh node of `nodes`, not only the candidates, but a node that has room
    now and is not a candidate is not counted on, nor one that `usable` (the pod's node selector and affinity, where
    known) rules out."""
    if config.wait_slack is None or pod.gang is not None or (not pod.whole_gpus and not pod.is_share):
        return {}
    offered = set(names)
    # A node with room now that is not offered is closed to this pod for a reason the advisor does not see (a node
    # selector or affinity, a taint, CPU or memory): counting on it could keep the pod pending for ever.
    fresh = [
        n
        for name, n in nodes.items()  # by key: one state may stand for several alike nodes (the simulator's)
        if n.gpu_model
        and not is_stale(n, config, now_seconds)
        and (name in offered or (not has_room_now(n, pod) and (usable is None or usable(name))))
    ]
    run = _run_seconds(pod, {n.gpu_model for n in fresh}, predictors)
    if run is None:
        return {}
    candidates = {nodes[n].gpu_model for n in names if n in nodes and nodes[n].gpu_model in run}
    if len(run) < 2 or not candidates:
        return {}
    quickest = min(run.values())
    slack = config.wait_slack
    if all(run[m] <= slack * quickest for m in candidates):
        return {}  # no candidate is slow enough that any wait could pay
    worst = max(run[m] for m in candidates)
    room: dict[str, float] = {}
    for node in fresh:
        model = node.gpu_model
        if run[model] * slack >= worst or room.get(model, math.inf) == 0:
            continue
        room[model] = min(room.get(model, math.inf), room_seconds(node, pod, leaving))
    finish = {m: room[m] + run[m] for m in room if math.isfinite(room[m])}
    if not finish:
        return {}
    best = min(finish, key=lambda m: finish[m])
    verdicts: dict[str, str] = {}
    for name in names:
        state = nodes.get(name)
        if state is None or state.gpu_model not in run or is_stale(state, config, now_seconds):
            continue
        here = run[state.gpu_model]
        if here > slack * finish[best]:
            here_text = f"~{duration_text(here)} on this {state.gpu_model}"
            if room[best] < 1.0:
                verdicts[name] = (
                    f"passed over: {best} has room now and finishes it in ~{duration_text(finish[best])} vs {here_text}"
                )
            else:
                verdicts[name] = (
                    f"passed over to wait for room on {best} in ~{duration_text(room[best])}: done in "
                    f"~{duration_text(finish[best])} from now vs {here_text}"
                )
    return verdicts
