"""Holding nodes for a blocked pending pod: EASY backfilling through the kube-scheduler extender's filter.

kube-scheduler reserves nothing for a pod that does not fit: while a 16-GPU gang waits for whole nodes, each GPU that
frees goes to the next small pod, and the gang can wait for ever. With `ScoringConfig.hold_for_blocked` the filter
finds the *head* — the first pending GPU pod in kube-scheduler's queue order (priority, then age) ahead of the pod
being filtered that has no room on any node it may use and whose start can be predicted — and holds for it the
nodes where it is predicted to start first (`advisor.scoring.reserve`: room for each pending member of a gang, from
the residents' predicted ends). The filtered pod fails on a held node unless it is predicted to finish there before
the head starts (`advisor.scoring.reserved_verdicts`), and does not wait for room on one; elsewhere it is not
affected. As in EASY backfilling only the head holds nodes, so no pod waits on more than one reservation.

With `ScoringConfig.shortest_first` the same queue is served by response ratio rather than by age (`queue_claims`):
each pending pod's ratio is (time waited + predicted run time) / predicted run time, and the filtered pod is kept off
room that the pods with a higher ratio are expected to take (`advisor.scoring.claims`, `yield_verdicts`).

The queue comes from the pending-pod watch (`advisor.kube`); without it (`--no-kube`) nothing is held or yielded.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from itertools import islice

from advisor.pods import NodePlacement
from advisor.predictors import Predictors
from advisor.scoring import (
    Claim,
    Claimant,
    LeaveTimes,
    NodeState,
    PodRequest,
    Reservation,
    ScoringConfig,
    claims,
    fits_now,
    reserve,
)
from advisor.state import PendingPod

CLAIM_GRACE_SECONDS = 300.0
"""A pending pod expected to take room ahead of others (shortest first) that is still pending this long after it was
first so expected takes no room ahead of anyone any more: something the advisor does not see (a taint, inter-pod
affinity, a volume's zone) keeps it off the nodes it was expected on, and the pods that yielded to it would otherwise
wait on idle GPUs. kube-scheduler retries an unschedulable pod at least every 5 minutes, and at once when a pod
leaves."""

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
        usable = usable_nodes(head.placement, labels)
        gang = head.request.gang
        members = gangs[gang] if gang is not None else 1
        if fits_now(head.request, nodes, members=members, config=config, now_seconds=now_seconds, usable=usable):
            continue  # it fits now (or is only waiting for a faster GPU): kube-scheduler will place it
        held = reserve(
            head.request,
            nodes,
            members=members,
            config=config,
            predictors=predictors,
            leaving=leaving,
            now_seconds=now_seconds,
            usable=usable,
        )
        if held is not None:
            return held
    return None


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
    response ratio — are expected to take (`advisor.scoring.claims`, for `yield_verdicts`), and `pod`'s own rank
    (None, and no claims: it is a gang member, or has no JCT estimate — it yields to nobody). `queue_key` is the pod's
    (`PendingPod.queue_key`: its priority and creation time). A pod's run time is its JCT estimate on each GPU model
    of the nodes, its wait the time since it was created (unknown: none). Gang members take no room ahead of
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
