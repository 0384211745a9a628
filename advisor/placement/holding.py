"""Holding nodes for a blocked pending pod: EASY backfilling through the kube-scheduler extender's filter.

kube-scheduler reserves nothing for a pod that does not fit: while a 16-GPU gang waits for whole nodes, each GPU that
frees goes to the next small pod, and the gang can wait for ever. With `ScoringConfig.hold_for_blocked` the filter
finds the *head* — the first pending GPU pod in kube-scheduler's queue order (priority, then age) ahead of the pod
being filtered that has no room on any node it may use and whose start can be predicted — and holds for it the
nodes where it is predicted to start first (`reserve`: room for each pending member of a gang, from
the residents' predicted ends). The filtered pod fails on a held node unless it is predicted to finish there before
the head starts (`reserved_verdicts`), and does not wait for room on one; elsewhere it is not
affected. As in EASY backfilling only the head holds nodes, so no pod waits on more than one reservation.

The queue comes from the pending-pod watch (`advisor.cluster.kube`); without it (`--no-kube`) nothing is held. The
filter runs this rule as one of its stages (`advisor.placement.filter`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice

from advisor.placement.config import ScoringConfig
from advisor.placement.queue import NodePlacement, PendingPod
from advisor.placement.scoring import is_stale
from advisor.placement.types import NodeState, PodRequest
from advisor.placement.waiting import LeaveTimes, gpu_ends, has_room_now, room_seconds
from advisor.predictors import Predictors

HEAD_SCAN = 64
"""At most this many pending pods ahead of the filtered one are looked at for the head (each costs a pass over the
nodes); past them nothing is held."""

Labels = Callable[[str], Mapping[str, str] | None]


def usable_nodes(placement: NodePlacement | None, labels: Labels) -> Callable[[str], bool] | None:
    """The nodes a pod's node selector and required affinity allow, by the node labels the advisor has seen; a node
    whose labels it has not seen counts as allowed (None: the pod constrains nothing)."""
    if placement is None:
        return None

    def usable(node: str) -> bool:
        known = labels(node)
        return known is None or placement.admits(node, known)

    return usable


def head_reservation(
    pod: PodRequest,
    queue_key: tuple[int, float, str],
    scheduler: str,
    pending: Sequence[PendingPod],
    nodes: Mapping[str, NodeState],
    *,
    labels: Labels,
    config: ScoringConfig,
    predictors: Predictors,
    leaving: LeaveTimes,
    now_seconds: float | None = None,
) -> Reservation | None:
    """The nodes held for the head of the queue ahead of `pod` (module docstring), None when nothing is held: no
    pending pod of the same scheduler ahead of it lacks room and has a predictable start.

    `pending` is in queue order (`ClusterState.pending`); `queue_key` is the filtered pod's own
    (`PendingPod.queue_key`). Members of the filtered pod's own gang are never its head."""
    if not config.hold_for_blocked:
        return None
    ahead = (
        p
        for p in pending
        if p.queue_key() < queue_key
        and p.pod != pod.name
        and p.scheduler == scheduler
        and (pod.gang is None or p.request.gang != pod.gang)
    )
    gangs = Counter(p.request.gang for p in pending if p.request.gang is not None)
    for head in islice(ahead, HEAD_SCAN):
        gang = head.request.gang
        held = blocked_reservation(
            head.request,
            nodes,
            members=gangs[gang] if gang is not None else 1,
            config=config,
            predictors=predictors,
            leaving=leaving,
            now_seconds=now_seconds,
            usable=usable_nodes(head.placement, labels),
        )
        if held is not None:
            return held
    return None


def blocked_reservation(
    pod: PodRequest,
    nodes: Mapping[str, NodeState],
    *,
    members: int = 1,
    config: ScoringConfig,
    predictors: Predictors,
    leaving: LeaveTimes,
    now_seconds: float | None = None,
    usable: Callable[[str], bool] | None = None,
) -> Reservation | None:
    """The nodes held for `pod` as the head: None when it has room now on the nodes `usable` allows (or is only
    waiting for a faster GPU: kube-scheduler will place it) or when its start cannot be predicted (`reserve`). The
    service tries the pods ahead of the filtered one (`head_reservation`), the simulator its blocked jobs in turn."""
    if fits_now(pod, nodes, members=members, config=config, now_seconds=now_seconds, usable=usable):
        return None
    return reserve(
        pod,
        nodes,
        members=members,
        config=config,
        predictors=predictors,
        leaving=leaving,
        now_seconds=now_seconds,
        usable=usable,
    )


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held for `pod`, a pending pod (or the members of a gang) that has no room now: `nodes` of `gpu_model`
    are where it is predicted to start first, `start_seconds` from now. Other pods may use them only if they are
    predicted to finish before that (`reserved_verdicts`)."""

    pod: str
    gpu_model: str
    nodes: frozenset[str]
    start_seconds: float


def _slots_in(node: NodeState, pod: PodRequest, leaving: LeaveTimes) -> list[float]:
    """Predicted seconds until `node` has room for one, two, … pods like `pod` (ascending, inf where never): the j-th
    whole-GPU request waits for the (j·k)-th healthy GPU to empty; a share counts one slot (`room_seconds`)."""
    if not pod.whole_gpus:
        return [room_seconds(node, pod, leaving)]
    k = pod.whole_gpus
    now = leaving.now_seconds
    ends = gpu_ends(node, leaving)
    if ends.first > now:
        busy = [last - now for last in ends.lasts]
    else:
        busy = sorted(last - now if first > now else math.inf for first, last in ends.spans)
    times = [0.0] * node.free_gpus + busy
    return times[k - 1 :: k]


def reserve(
    pod: PodRequest,
    nodes: Mapping[str, NodeState],
    *,
    members: int = 1,
    config: ScoringConfig,
    predictors: Predictors,
    leaving: LeaveTimes,
    now_seconds: float | None = None,
    usable: Callable[[str], bool] | None = None,
) -> Reservation | None:
    """Where and when `members` pods like `pod` (1, or the pending members of its gang) are predicted to start
    first: per GPU model, the `members`-th soonest slot over its fresh nodes (`_slots_in`, one node may give several);
    the model on which the pod would finish first (its JCT estimate; without one, the soonest start). None when no
    model is predicted to ever have room (ends unknown) — nothing is held then."""
    slots: dict[str, list[tuple[float, str]]] = {}
    for name, node in nodes.items():  # by key: one state may stand for several alike nodes (the simulator's)
        if not node.gpu_model or is_stale(node, config, now_seconds) or (usable is not None and not usable(name)):
            continue
        slots.setdefault(node.gpu_model, []).extend((t, name) for t in _slots_in(node, pod, leaving))
    best: tuple[float, float, str, frozenset[str]] | None = None
    for model, found in slots.items():
        if len(found) < members:
            continue
        first = sorted(found)[:members]
        start = first[-1][0]
        if not math.isfinite(start):
            continue
        run = predictors.jct.jct_seconds(pod.workload, model, max(pod.whole_gpus, 1) * members)
        finish = start + run if run is not None and run > 0 else start
        if best is None or (finish, start) < best[:2]:
            best = (finish, start, model, frozenset(name for _, name in first))
    if best is None:
        return None
    return Reservation(pod=pod.name, gpu_model=best[2], nodes=best[3], start_seconds=best[1])


def not_held(held: Mapping[str, str], usable: Callable[[str], bool] | None) -> Callable[[str], bool] | None:
    """`usable` less the nodes in `held` (`reserved_verdicts` over a reservation's nodes)."""
    if not held:
        return usable
    return lambda name: name not in held and (usable is None or usable(name))


def reserved_verdicts(
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    reservation: Reservation,
    *,
    predictors: Predictors,
) -> dict[str, str]:
    """{node: reason} for the candidates held by `reservation` on which `pod` would still run when the held pod is
    predicted to start (a pod without a JCT estimate counts as running past it)."""
    verdicts: dict[str, str] = {}
    for name in names:
        state = nodes.get(name)
        if name not in reservation.nodes or state is None:
            continue
        run = predictors.jct.jct_seconds(pod.workload, state.gpu_model, max(pod.whole_gpus, 1))
        if run is None or run > reservation.start_seconds:
            why = "this pod has no JCT estimate" if run is None else f"this pod would run ~{run:.0f} s"
            verdicts[name] = (
                f"held for {reservation.pod}, pending and predicted to start here in "
                f"~{reservation.start_seconds:.0f} s; {why}"
            )
    return verdicts


def fits_now(
    pod: PodRequest,
    nodes: Mapping[str, NodeState],
    *,
    members: int = 1,
    config: ScoringConfig,
    now_seconds: float | None = None,
    usable: Callable[[str], bool] | None = None,
) -> bool:
    """Whether `members` pods like `pod` (1, or a gang's) have room now on the fresh nodes that `usable` allows (GPUs
    only: CPU and memory are not counted)."""
    room = 0
    for name, n in nodes.items():
        if not has_room_now(n, pod) or is_stale(n, config, now_seconds) or (usable is not None and not usable(name)):
            continue
        room += n.free_gpus // pod.whole_gpus if pod.whole_gpus else 1
        if room >= members:
            return True
    return False
