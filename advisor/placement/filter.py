"""The kube-scheduler extender's filter, defined once: which candidate nodes a pod may go to, and why not the others.

A node fails on capacity first — too few healthy free GPUs (or GPU memory, or room for a share), or the pod's own
CPU/memory where the node's free amounts are known — then on the filter's rules, in this order (`pass_over`):

1. holding (`advisor.placement.holding`): a node held for the blocked head of the queue, unless the pod is predicted
   to finish before the head starts there;
2. shortest first (`advisor.placement.shortest`): room that pending pods ranked above this one are expected to take;
3. waiting (`advisor.placement.waiting`): a slower GPU model, when waiting for room on a faster one finishes sooner —
   room on a node held or yielded in 1–2 is not room this pod can wait for.

Both the service and the simulator call `run_filter`, each with its own inputs (`FilterInputs`): the service from
the pending pods it watches, per call (`extender_filter`); the simulator from its own queue, the reservation and
the claims found once per scheduling pass (`advisor.sim.jobs`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from advisor.placement.config import ScoringConfig
from advisor.placement.holding import Labels, Reservation, head_reservation, not_held, reserved_verdicts, usable_nodes
from advisor.placement.mig import mig_verdict
from advisor.placement.queue import NodePlacement, PendingPod
from advisor.placement.scoring import is_stale, memory_ok, resources_short, whole_eligible_mask
from advisor.placement.shortest import Claim, queue_claims, yield_verdicts
from advisor.placement.types import WHOLE_GPU_MILLI, NodeState, PodRequest, taken_as_unknown
from advisor.placement.waiting import LeaveTimes, jct_leave_times, wait_verdicts
from advisor.predictors import Predictors


@dataclass(frozen=True, slots=True)
class QueueRules:
    """What the pending queue asks of the filtered pod: the nodes held for the head (`reservation`) and the room that
    pods ranked above it are expected to take (`claim_log`, laid by rank; `rank`, the pod's own: None yields to
    nobody). `claim_nodes`: the node states the claims were laid on, when they differ from the filter's (the
    simulator lays them once per pass on every node); then every node of it may be yielded, not only the candidates,
    and the wait rule does not count on room there either."""

    reservation: Reservation | None = None
    claim_log: Sequence[Claim] = ()
    rank: tuple[int, float] | None = None
    claim_nodes: Mapping[str, NodeState] | None = None


@dataclass(frozen=True, slots=True)
class FilterRequest:
    """One filter question: which of the candidates `names` may `pod` go to, given the node states `nodes` and the
    knobs of `config` at `now_seconds` (None: staleness unknown). Holding and waiting need `predictors`, waiting also
    `leaving` (when residents leave); a node `usable` rules out is not waited for; `queue`: what the pending queue
    asks of the pod (nothing by default)."""

    pod: PodRequest
    names: Sequence[str]
    nodes: Mapping[str, NodeState]
    config: ScoringConfig
    now_seconds: float | None = None
    predictors: Predictors | None = None
    leaving: LeaveTimes | None = None
    usable: Callable[[str], bool] | None = None
    queue: QueueRules = QueueRules()


def pass_over(request: FilterRequest) -> dict[str, str]:
    """{node: reason} for the candidates that the filter's rules (module docstring) keep the pod off, the held and
    yielded nodes first; capacity is not checked here."""
    pod, names, nodes, queue, predictors = request.pod, request.names, request.nodes, request.queue, request.predictors
    held: dict[str, str] = {}
    if predictors is not None and queue.reservation is not None:
        reservation = queue.reservation
        held = reserved_verdicts(pod, sorted(reservation.nodes), nodes, reservation, predictors=predictors)
    if queue.claim_log and queue.rank is not None:
        on = queue.claim_nodes
        yielded = yield_verdicts(
            pod, names if on is None else list(on), nodes if on is None else on, queue.claim_log, rank=queue.rank
        )
        held = yielded | held
    wait: dict[str, str] = {}
    offered = [n for n in names if n not in held]
    if predictors is not None and request.leaving is not None and offered:  # no candidate left: nothing to wait over
        # Room on a node held for another pod is not room for this one: it neither waits for it nor is offered it.
        wait = wait_verdicts(
            pod,
            offered,
            nodes,
            config=request.config,
            predictors=predictors,
            leaving=request.leaving,
            now_seconds=request.now_seconds,
            usable=not_held(held, request.usable),
        )
    return held | wait


def _gpus_short(node: NodeState, pod: PodRequest) -> str | None:
    """Why the node's GPUs cannot take `pod` now: no free MIG instance of a profile it asks, no healthy GPU, too few
    free GPUs, no room for its share; None when they can, or it asks for none."""
    if pod.mig:
        feasible, _, _, detail = mig_verdict(node.mig_instances, dict(pod.mig))
        if not feasible:
            return detail.removeprefix(", ")
    k = pod.whole_gpus
    if k == 0 and not pod.is_share:
        return None
    if node.healthy_count == 0:
        return "no healthy GPU"
    if k:
        free = whole_eligible_mask(node, pod).bit_count()
        return f"needs {k} free GPUs, has {free}{taken_as_unknown(node)}" if free < k else None
    if not any(
        g.healthy
        and g.allocated_milli + pod.share_milli <= WHOLE_GPU_MILLI
        and memory_ok(g, pod.gpu_memory_bytes, whole=False)
        for g in node.gpus
    ):
        return f"no healthy GPU has room for the requested share{taken_as_unknown(node)}"
    return None


def filter_nodes(request: FilterRequest) -> tuple[list[str], dict[str, str]]:
    """Split the candidates into nodes that can run the pod and {node: reason} for those that cannot.

    A node fails when it lacks enough healthy free GPUs (or GPU memory, or room for the share, or a free MIG instance
    of each profile the pod asks), or — where known — free CPU or memory for the pod's own request, or (with
    `predictors` and `leaving`, `wait_verdicts`) when the pod would finish sooner by waiting for a faster GPU model
    (on a node `usable` does not rule out), or when it is held by the queue's reservation for a blocked pod and the
    pod would not finish before that starts (`reserved_verdicts`), or when its room is expected to go to pending pods
    ranked above the pod's (priority, then response ratio; `QueueRules`, `yield_verdicts`); the wait reason first.
    Unknown or stale nodes pass unless `config.strict_staleness`.
    """
    pod, nodes, config, now_seconds = request.pod, request.nodes, request.config, request.now_seconds
    k = pod.whole_gpus
    passed: list[str] = []
    failed: dict[str, str] = {}
    wait = pass_over(request)
    for name in request.names:
        node = nodes.get(name)
        if node is None or is_stale(node, config, now_seconds):
            if config.strict_staleness:
                failed[name] = "no fresh telemetry from this node (strict staleness)"
            else:
                passed.append(name)
            continue
        short = resources_short(node, pod) or _gpus_short(node, pod)
        if short is not None:
            failed[name] = short
            continue
        if (k or pod.is_share) and name in wait:
            failed[name] = wait[name]
            continue
        passed.append(name)
    return passed, failed


class FilterInputs(Protocol):
    """What the filter's rules read besides the nodes, found by its caller: when residents leave (None: nothing is
    waited for) and what the pending queue asks of the filtered pod (`QueueRules`, given the leave times)."""

    def leave_times(self) -> LeaveTimes | None: ...

    def queue_rules(self, leaving: LeaveTimes | None) -> QueueRules: ...


def run_filter(
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    inputs: FilterInputs,
    *,
    config: ScoringConfig,
    predictors: Predictors,
    usable: Callable[[str], bool] | None = None,
    now_seconds: float | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The extender filter, stage by stage: the leave times, then the queue's rules (the head's reservation, the
    claims of pods ranked above), then `filter_nodes` (capacity, then held → yielded → waiting). The service calls it
    through `extender_filter`; the simulator with the inputs of its own queue (`advisor.sim.jobs`)."""
    leaving = inputs.leave_times()
    queue = inputs.queue_rules(leaving)
    request = FilterRequest(
        pod,
        names,
        nodes,
        config,
        now_seconds=now_seconds,
        predictors=predictors,
        leaving=leaving,
        usable=usable,
        queue=queue,
    )
    return filter_nodes(request)


class PendingQueue(Protocol):
    """The pending pods the service watches and what it records of them (`advisor.cluster.state.ClusterState`)."""

    def pending(self) -> Sequence[PendingPod]: ...

    def claimed_since(self, pod: str) -> float | None: ...

    def note_claims(self, pods: Iterable[str], now_seconds: float) -> None: ...


@dataclass(frozen=True, slots=True)
class _ServiceInputs:
    """The service's `FilterInputs` for one filter call: leave times from the served JCT model, the queue from the
    pending pods it watches."""

    pod: PodRequest
    nodes: Mapping[str, NodeState]
    queue: PendingQueue
    labels: Labels
    queue_key: tuple[int, float, str]
    scheduler: str
    config: ScoringConfig
    predictors: Predictors
    now_seconds: float

    def leave_times(self) -> LeaveTimes:
        return jct_leave_times(self.predictors, self.now_seconds)

    def queue_rules(self, leaving: LeaveTimes | None) -> QueueRules:
        config, labels = self.config, self.labels
        # The queue is sorted once per call, and only when a rule reads it.
        pending = self.queue.pending() if config.hold_for_blocked or config.shortest_first else []
        held = (
            head_reservation(
                self.pod,
                self.queue_key,
                self.scheduler,
                pending,
                self.nodes,
                labels=labels,
                config=config,
                predictors=self.predictors,
                leaving=leaving,
                now_seconds=self.now_seconds,
            )
            if config.hold_for_blocked and leaving is not None
            else None
        )
        claim_log, rank = queue_claims(
            self.pod,
            self.queue_key,
            self.scheduler,
            pending,
            self.nodes,
            labels=labels,
            config=config,
            predictors=self.predictors,
            now_seconds=self.now_seconds,
            claimed_since=self.queue.claimed_since,
        )
        self.queue.note_claims((c.claimant.pod for c in claim_log), self.now_seconds)
        return QueueRules(held, claim_log, rank)


def extender_filter(
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    queue: PendingQueue,
    *,
    labels: Labels,
    queue_key: tuple[int, float, str],
    scheduler: str,
    placement: NodePlacement | None,
    config: ScoringConfig,
    predictors: Predictors,
    now_seconds: float,
) -> tuple[list[str], dict[str, str]]:
    """The service's filter call (`run_filter`): residents' leave times from the served JCT model
    (`jct_leave_times`), the nodes held for the head of `queue` ahead of `pod` (`head_reservation`, with
    `ScoringConfig.hold_for_blocked`), the room the pods ranked above it are expected to take (`queue_claims`, with
    `ScoringConfig.shortest_first`; recorded in `queue` for their grace period), then `filter_nodes`. `queue_key`,
    `scheduler` and `placement` are the pod's own (`advisor.placement.queue`); `labels`, each node's labels for this
    call (its node selectors and those of the pending pods)."""
    inputs = _ServiceInputs(pod, nodes, queue, labels, queue_key, scheduler, config, predictors, now_seconds)
    return run_filter(
        pod,
        names,
        nodes,
        inputs,
        config=config,
        predictors=predictors,
        usable=usable_nodes(placement, labels),
        now_seconds=now_seconds,
    )
