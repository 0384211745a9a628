"""The scorer: one object that holds the configuration, the predictors, the clock and every cache of the scoring path.

The service's routes and the simulator each hold a `Scorer` (the service builds a new one when it serves newly
promoted models); nothing of the scoring path lives in a module global. What it keeps:

* the verdict memo: each live node state's verdicts by request shape (what the GPU choice depends on, not the pod's
  CPU/memory), at most `MEMO_LIMIT` per node, dropped with the state (`NodeMemo`);
* the score vectors (`advisor.placement.vectors.ScoreVectors`): kube-scheduler's prioritize verb as a gather over a
  node index, per request shape.

Every path ends in the one weighted total (`advisor.placement.totals.weighted_totals`): `score_nodes` (a `NodeScore`
per node, explained), `extender_priorities` (the service's integers) and `extender_node_scores` (the simulator's).
The per-node evaluation (which GPUs, packing, affinity, interference) is `advisor.placement.scoring`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import count
from typing import NamedTuple

import numpy as np

from advisor.placement.columnar import NO_SHARE, share_choices
from advisor.placement.config import ScoringConfig
from advisor.placement.extender import first_of_equals
from advisor.placement.memo import NodeMemo
from advisor.placement.mig import mig_verdict
from advisor.placement.scoring import (
    HEURISTIC_PREDICTORS,
    Fit,
    RawVerdict,
    evaluate_share,
    evaluate_whole,
    evaluate_without_gpu,
    jct_basis_how,
    model_short,
    neutral_without_gpu,
    node_fit,
    resources_refusal,
    scores_without_gpu,
    share_verdict,
    stale_reason,
    unknown_score,
)
from advisor.placement.totals import extender_integers, unknown_integer, weighted_totals
from advisor.placement.types import WHOLE_GPU_MILLI, NodeScore, NodeState, PodRequest
from advisor.placement.vectors import ScoreVectors, covers
from advisor.predictors import Predictors, UsageProfile, default_usage

MEMO_LIMIT = 16
"""Request shapes whose verdicts each node state keeps."""
_SHAPE_LIMIT = 4096
COLUMNAR_MIN_NODES = 8
"""Below this many nodes of one GPU count, the scalar share loop is as fast as setting up the arrays."""

_MemoKey = int | tuple[int, tuple[int, int]]
_Deferred = tuple[int, NodeState, dict[_MemoKey, RawVerdict], _MemoKey, UsageProfile, Fit | None, ScoringConfig]
"""A node whose share verdict is still to be computed: (its place in the batch, the node, its memo, the memo key, the
pod's expected use on its GPU model, its CPU/memory fit indices, the configuration its GPU model is scored with)."""
_PENDING = RawVerdict("", "", False, detail="pending")
_ANY_WORKLOAD = object()
"""Stands for the workload in the shape of a request whose verdicts do not depend on it (`Scorer.evaluate`)."""
_INFEASIBLE = -1.0
_NEUTRAL_BASE = -2.0
"""`Scorer._extender_totals` codes: -1 for an infeasible node, -2 - n for a neutral/unknown verdict of integer n."""


NO_STATE_REASON = "unknown: the advisor has no state for this node"
"""The reason of a candidate the advisor has no state for (scored neutrally as unknown)."""


class BriefScore(NamedTuple):
    """A `NodeScore` reduced to what a scheduler acts on (`Scorer.brief_candidates`): the same node, score, feasible
    and known, the reason (empty for a node the pod fits: the brief answer writes none there) and the GPU model."""

    node: str
    score: float
    feasible: bool
    known: bool
    reason: str
    gpu_model: str


def _brief(score: NodeScore) -> BriefScore:
    return BriefScore(score.node, score.score, score.feasible, score.known, score.reason, score.gpu_model)


def no_clock() -> float | None:
    """The simulator's clock: no wall time, every observed node is fresh."""
    return None


def no_pending_mig() -> frozenset[str]:
    """No pending queue known: a MIG pod's own profiles are the only ones judged wanted."""
    return frozenset()


@dataclass(frozen=True, slots=True)
class ExtenderVerdict:
    """The extender's answer for a batch: integer 0..10 per candidate (in order) and how many of each outcome."""

    scores: list[int]
    scored: int
    infeasible: int
    unknown: int


class Scorer:
    """Scores candidate nodes for one pod at a time under one configuration and one set of predictors.

    `clock` gives Unix time for the staleness check (None: every observed node is fresh, the simulator's).
    `pending_mig` gives the MIG profiles pending pods ask for (the service's cluster state); a free instance no
    pending profile fits is stranded, which lowers a MIG pod's packing score (`advisor.placement.mig`).
    `columnar_min_nodes` is where share verdicts go through the columnar path (`advisor.placement.columnar`; the same
    numbers either way: tests set it to compare); `columnar_verdicts` counts the verdicts made there. `memo_limit`:
    request shapes whose verdicts each node state keeps (the service's `MEMO_LIMIT` bounds its memory; the simulator,
    whose few node states each meet every shape of a trace, keeps more). Caches are attributes: a new `Scorer` starts
    cold.
    """

    def __init__(
        self,
        config: ScoringConfig,
        predictors: Predictors | None = None,
        *,
        clock: Callable[[], float | None] = no_clock,
        columnar_min_nodes: int = COLUMNAR_MIN_NODES,
        pending_mig: Callable[[], Collection[str]] = no_pending_mig,
        memo_limit: int = MEMO_LIMIT,
    ) -> None:
        if memo_limit < 1:
            raise ValueError(f"memo_limit must be >= 1, got {memo_limit}")
        self.config = config
        self.predictors = predictors or HEURISTIC_PREDICTORS
        self.clock = clock
        self.pending_mig = pending_mig
        self.columnar_min_nodes = columnar_min_nodes
        self.columnar_verdicts = 0
        self.memo_limit = memo_limit
        self.verdicts: NodeMemo[dict[_MemoKey, RawVerdict]] = NodeMemo()
        self._vectors: ScoreVectors | None = None
        self._shape_ids: dict[tuple[object, ...], int] = {}
        self._next_shape_id = count()

    @property
    def vectors(self) -> ScoreVectors:
        """The score vectors of the prioritize verb, built at its first call (a scorer for one question needs none)."""
        if self._vectors is None:
            self._vectors = ScoreVectors()
        return self._vectors

    def clear(self) -> None:
        """Forget every memoised verdict and score vector (a benchmark's cold start)."""
        self.verdicts.clear()
        if self._vectors is not None:
            self._vectors.clear()

    # ----------------------------------------------------------------------------------------------------------------
    # Answers

    def score_nodes(self, pod: PodRequest, nodes: Sequence[NodeState]) -> list[NodeScore]:
        """Every node's `NodeScore` for `pod`, in the order given: 0..100 with its components, GPUs and reason.
        Infeasible nodes score 0 with the reason; stale ones `config.unknown_node_score`."""
        if self._neutral_for(pod):
            return [neutral_without_gpu(n.name) for n in nodes]
        return self._finish(pod, self.evaluate(pod, nodes, self.clock()))

    def score_candidates(
        self, pod: PodRequest, names: Sequence[str], nodes: Mapping[str, NodeState]
    ) -> list[NodeScore]:
        """Like `score_nodes` for node names; a name without state gets the neutral unknown score, in place."""
        known = [nodes[n] for n in names if n in nodes]
        scored = iter(self.score_nodes(pod, known))
        return [next(scored) if n in nodes else unknown_score(n, NO_STATE_REASON, self.config) for n in names]

    def _neutral_for(self, pod: PodRequest) -> bool:
        """Whether every node scores `pod` neutrally: it asks for no GPU, share or MIG instance, and this scoring
        weighs nothing else for pods without a GPU (`scores_without_gpu`)."""
        return pod.whole_gpus == 0 and not pod.is_share and not pod.mig and not scores_without_gpu(pod, self.config)

    def brief_candidates(
        self, pod: PodRequest, names: Sequence[str], nodes: Mapping[str, NodeState]
    ) -> list[BriefScore]:
        """`score_candidates` as `BriefScore`s: the same scores (the same verdicts and weighted totals), without
        writing out each node's components, GPUs and explanation (a scheduler plugin's call, every cycle). One pass
        per step over the ~500 candidates: this runs on every scheduling cycle of every GPU pod."""
        found = list(map(nodes.get, names))
        known = [s for s in found if s is not None]
        if self._neutral_for(pod):
            scored = [_brief(neutral_without_gpu(n.name)) for n in known]
        else:
            scored = self.brief_verdicts(pod, self.evaluate(pod, known, self.clock()))
        if len(known) == len(names):
            return scored
        it = iter(scored)
        return [
            next(it) if s is not None else _brief(unknown_score(n, NO_STATE_REASON, self.config))
            for n, s in zip(names, found, strict=True)
        ]

    def brief_verdicts(
        self, pod: PodRequest, raws: Sequence[RawVerdict | NodeScore], anchors: Sequence[RawVerdict] = ()
    ) -> list[BriefScore]:
        """`evaluate`'s verdicts as `BriefScore`s with their weighted totals (`brief_candidates`' second step).

        The jct component is relative to the batch's feasible verdicts (`totals.weighted_totals`): `anchors` are
        feasible verdicts of the same batch that are not among `raws` (their totals are not returned), so that part of
        a batch scores as it does within the whole — with, per GPU model of the batch, one anchor of its smallest
        slowdown, the batch's JCT basis and best time are the whole batch's (a delta answer's changed nodes)."""
        feasible = [raw for raw in raws if isinstance(raw, RawVerdict) and raw.feasible]
        totals = iter(self._feasible_totals(pod, [*feasible, *anchors] if anchors else feasible)[0])
        make = BriefScore._make
        return [
            _brief(raw)
            if isinstance(raw, NodeScore)
            else make((raw.name, next(totals), True, True, "", raw.gpu_model))
            if raw.feasible
            else make((raw.name, 0.0, False, True, raw.detail, raw.gpu_model))
            for raw in raws
        ]

    def allocate(self, pod: PodRequest, node: NodeState) -> NodeScore:
        """The best GPUs on one node for `pod` (a device plugin's GetPreferredAllocation); `gpus` empty if none fit."""
        return self.score_nodes(pod, [node])[0]

    def extender_priorities(
        self, pod: PodRequest, names: Sequence[str], nodes: Mapping[str, NodeState]
    ) -> ExtenderVerdict:
        """`extender_scores(score_candidates(...))` without building a `NodeScore` per node (the scheduler's hot path).

        Only the totals are computed, since kube-scheduler reads nothing else. The pods `vectors.covers` accepts (GPU
        pods without a gang, a task mix without CPU/memory) are answered from the score vectors: a gather where the
        shape and the nodes' states were seen before."""
        config = self.config
        if self._neutral_for(pod):
            return ExtenderVerdict([5] * len(names), 0, 0, len(names))
        if covers(pod, config) and not pod.mig:  # MIG instances are not in the score vectors
            got = self.vectors.priorities(pod, names, nodes, scorer=self, now_seconds=self.clock())
            scored_count, infeasible_count = int(got.scored.sum()), int(got.infeasible.sum())
            ints = got.scores
            if config.extender_first_of_equals:
                ints = first_of_equals(ints, names, got.scored.tolist())
            return ExtenderVerdict(ints, scored_count, infeasible_count, len(names) - scored_count - infeasible_count)
        known = [nodes[n] for n in names if n in nodes]
        totals = self._extender_totals(pod, self.evaluate(pod, known, self.clock()))
        unknown_int = unknown_integer(config.unknown_node_score)
        it = zip(totals, _integers(totals, config.extender_span_points), strict=True)
        scores: list[int] = []
        scored = infeasible = unknown = 0
        for name in names:
            if name not in nodes:
                scores.append(unknown_int)
                unknown += 1
            else:
                value, integer = next(it)
                scores.append(integer)
                if value >= 0.0:
                    scored += 1
                elif value == _INFEASIBLE:
                    infeasible += 1
                else:
                    unknown += 1
        if config.extender_first_of_equals:
            scored_names = {n for n, v in zip((n for n in names if n in nodes), totals, strict=True) if v >= 0.0}
            scores = first_of_equals(scores, names, [n in scored_names for n in names])
        return ExtenderVerdict(scores, scored, infeasible, unknown)

    def extender_node_scores(self, pod: PodRequest, nodes: Sequence[NodeState]) -> list[int]:
        """`extender_scores(score_nodes(...))` without building a `NodeScore` per node (the simulator's hot path)."""
        if self._neutral_for(pod):
            return [5] * len(nodes)
        return _integers(
            self._extender_totals(pod, self.evaluate(pod, nodes, self.clock())), self.config.extender_span_points
        )

    # ----------------------------------------------------------------------------------------------------------------
    # The weighted total, per batch

    def _feasible_totals(
        self, pod: PodRequest, feasible: Sequence[RawVerdict]
    ) -> tuple[list[float], list[float], tuple[dict[str, float | None], bool, dict[str, str]]]:
        """The feasible verdicts' totals and jct components (`totals.weighted_totals`), and the batch's JCT basis."""
        base_jct, unit_time, use_jct, how = jct_basis_how(pod, feasible, self.predictors)
        # One pass over the verdicts, one row each (the same float64 values as four passes; the totals are
        # elementwise and a minimum, so reading the columns as strided views changes no bit).
        columns = (
            np.array(
                [(r.packing, r.affinity, r.interference, r.slowdown * unit_time[r.gpu_model]) for r in feasible],
                dtype=np.float64,
            )
            .reshape(len(feasible), 4)
            .T
        )
        packing, affinity, interference, times = columns
        totals, jct_ratio = weighted_totals(self.config, packing, affinity, interference, times)
        return totals.tolist(), jct_ratio.tolist(), (base_jct, use_jct, how)

    def _finish(self, pod: PodRequest, raws: list[RawVerdict | NodeScore]) -> list[NodeScore]:
        """Each verdict as a `NodeScore`: the batch-relative JCT component and the weighted total added."""
        feasible = [raw for raw in raws if isinstance(raw, RawVerdict) and raw.feasible]
        totals, ratios, (base_jct, use_jct, speed_how) = self._feasible_totals(pod, feasible)
        no_jct = f"{self.predictors.jct.name} has no estimate"
        make = NodeScore._make
        out: list[NodeScore] = []
        append = out.append
        it = zip(totals, ratios, strict=True)
        for raw in raws:
            if isinstance(raw, NodeScore):
                append(raw)
                continue
            if not raw.feasible:
                append(
                    make((raw.name, 0.0, False, True, 0.0, 0.0, 0.0, 0.0, (), 1.0, None, raw.detail, raw.gpu_model, ""))
                )
                continue
            total, jct_ratio = next(it)
            jct_seconds = base_jct[raw.gpu_model]
            append(
                make(
                    (
                        raw.name,
                        total,
                        True,
                        True,
                        raw.packing,
                        raw.affinity,
                        raw.interference,
                        jct_ratio,
                        raw.gpus,
                        raw.slowdown,
                        jct_seconds * raw.slowdown if jct_seconds is not None else None,
                        raw.explanation(),
                        raw.gpu_model,
                        "jct model" if use_jct else f"relative GPU speed: {speed_how[raw.gpu_model]}; {no_jct}",
                    )
                )
            )
        return out

    def _extender_totals(self, pod: PodRequest, raws: Sequence[RawVerdict | NodeScore]) -> list[float]:
        """Each verdict's total 0..100 as `_finish` computes it, or a negative code (`_INFEASIBLE`, `_NEUTRAL_BASE`)."""
        feasible = [raw for raw in raws if isinstance(raw, RawVerdict) and raw.feasible]
        it = iter(self._feasible_totals(pod, feasible)[0])
        totals: list[float] = []
        for raw in raws:
            if isinstance(raw, NodeScore):
                totals.append(_NEUTRAL_BASE - unknown_integer(raw.score))
            elif not raw.feasible:
                totals.append(_INFEASIBLE)
            else:
                totals.append(next(it))
        return totals

    # ----------------------------------------------------------------------------------------------------------------
    # Verdicts per node, memoised

    def _shape_id(self, shape: tuple[object, ...]) -> int:
        """A never-reused small int per request shape: the per-node memo then hashes an int, not a tuple, per node."""
        shape_id = self._shape_ids.get(shape)
        if shape_id is None:
            if len(self._shape_ids) >= _SHAPE_LIMIT:
                self._shape_ids.clear()  # ids are never reused: entries under forgotten ids age out of the memos
            shape_id = self._shape_ids[shape] = next(self._next_shape_id)
        return shape_id

    def evaluate(  # noqa: PLR0912, PLR0915 - the memoised per-node loop of the hot path, one call per node saved
        self, pod: PodRequest, nodes: Sequence[NodeState], now_seconds: float | None
    ) -> list[RawVerdict | NodeScore]:
        """Each node's verdict before the batch-relative JCT (memoised per node and request shape); stale → unknown."""
        config, predictors = self.config, self.predictors
        k = pod.whole_gpus
        gang_elsewhere = bool(pod.gang) and any(pod.gang in n.gangs for n in nodes)
        usage_cache: dict[str, UsageProfile] = {}
        fallback_usage = default_usage(pod.share_milli or WHOLE_GPU_MILLI)

        raws: list[RawVerdict | NodeScore] = []
        deferred: list[_Deferred] = []
        # What a node's GPU choice depends on; the pod's CPU/memory enter only through the node's fit index after it
        # (below) and the shortfall check, so a new CPU/memory request is not a new shape. The workload matters only
        # through the interference with residents: whole GPUs on a node whose free GPUs have none do not depend on it.
        shape = (k, pod.share_milli, pod.gpu_memory_bytes, pod.gang, gang_elsewhere, pod.gpu_models)
        key = self._shape_id((*shape, pod.workload))
        key_any_workload = self._shape_id((*shape, _ANY_WORKLOAD)) if k > 0 or not pod.is_share else key
        gpu_pod = k > 0 or pod.is_share
        own_resources = pod.cpu_milli is not None or pod.memory_mib is not None
        oldest = None if now_seconds is None else now_seconds - config.staleness_seconds
        memos, memo_limit = self.verdicts, self.memo_limit
        mig_asks = dict(pod.mig)
        wanted = frozenset(self.pending_mig()) | mig_asks.keys() if mig_asks else frozenset()
        for node in nodes:
            observed = node.observed_at_seconds
            if observed is None or (oldest is not None and observed < oldest):
                raws.append(unknown_score(node.name, stale_reason(node, now_seconds), config))
                continue
            if own_resources and (refused := resources_refusal(node, pod)) is not None:
                raws.append(refused)
                continue
            if pod.mig:  # MIG instances, not GPUs: placed on a free instance of each profile asked (`placement.mig`)
                feasible, gpus, packing, detail = mig_verdict(node.mig_instances, mig_asks, wanted)
                raws.append(
                    RawVerdict(
                        node.name, node.gpu_model, feasible, gpus, packing, 1.0 if feasible else 0.0, detail=detail
                    )
                )
                continue
            node_config = config.for_model(node.gpu_model)  # packing's task mix as seen from this GPU model
            resources = node_config.resources
            fit = node_fit(node, pod, resources) if resources is not None else None
            base = key if node.free_residents else key_any_workload
            node_key: _MemoKey = base if fit is None else (base, fit[1])
            memo = memos.get(node)
            if memo is None:
                memo = memos.put(node, {})
            cached = memo.get(node_key)
            if cached is not None:
                raws.append(cached)
                continue
            if len(memo) >= memo_limit:
                # The oldest shape goes: one eviction per new shape. Clearing the whole memo instead frees every
                # node's verdicts in the same call (each node fills up with the same shapes), a burst that set the p99.
                del memo[next(iter(memo))]
            short = model_short(node, pod)
            if short is not None:
                raw = memo[node_key] = RawVerdict(node.name, node.gpu_model, False, detail=short)
                raws.append(raw)
                continue
            if not gpu_pod:
                if fit is None:
                    raws.append(neutral_without_gpu(node.name))
                else:
                    raw = memo[node_key] = evaluate_without_gpu(node, config=node_config, fit=fit)
                    raws.append(raw)
                continue
            usage = usage_cache.get(node.gpu_model)
            if usage is None:
                usage = predictors.usage.usage(pod.workload, node.gpu_model) or fallback_usage
                usage_cache[node.gpu_model] = usage
            if node.healthy_count == 0:
                raw = RawVerdict(node.name, node.gpu_model, False, detail="no healthy GPU")
            elif k:
                raw = evaluate_whole(
                    node,
                    pod,
                    k=k,
                    config=node_config,
                    predictors=predictors,
                    usage=usage,
                    gang_elsewhere=gang_elsewhere,
                    fit=fit,
                )
            else:
                # Shares are evaluated together once every node is seen (`_evaluate_shares`).
                deferred.append((len(raws), node, memo, node_key, usage, fit, node_config))
                raws.append(_PENDING)
                continue
            memo[node_key] = raw
            raws.append(raw)
        if deferred:
            self._evaluate_shares(pod, deferred, raws, gang_elsewhere=gang_elsewhere)
        return raws

    def _evaluate_shares(
        self, pod: PodRequest, deferred: list[_Deferred], raws: list[RawVerdict | NodeScore], *, gang_elsewhere: bool
    ) -> None:
        """Fill in the share verdicts of `deferred` (and their memos): nodes of the same GPU count and configuration
        (`ScoringConfig.for_model`) together through `columnar.share_choices` where there are enough of them, else
        one by one (`scoring.evaluate_share`); the same verdicts either way."""
        predictors = self.predictors
        groups: dict[tuple[int, int], list[_Deferred]] = {}
        for d in deferred:
            groups.setdefault((d[1].topology.gpu_count, id(d[6])), []).append(d)
        for group in groups.values():
            config = group[0][6]
            if len(group) >= self.columnar_min_nodes:
                self.columnar_verdicts += len(group)
                columns = share_choices(
                    pod,
                    [d[1] for d in group],
                    [d[5] for d in group],
                    [d[4] for d in group],
                    config=config,
                    predictors=predictors,
                )
                # `share_verdict` inlined: one verdict per candidate node on a cold call, built from the columns.
                gang = pod.gang
                affinity = 1.0
                for (slot, node, memo, key, _, _, _), pos, packing, interference, pod_slow, res_slow in zip(
                    group, *columns, strict=True
                ):
                    if pos < 0:
                        raw = share_verdict(node, pod, NO_SHARE, gang_elsewhere=gang_elsewhere)
                    else:
                        if gang:
                            affinity = 0.5 + 0.5 * (1.0 if gang in node.gangs else (0.0 if gang_elsewhere else 0.5))
                        gpu = node.gpus[pos]
                        raw = RawVerdict(
                            node.name,
                            node.gpu_model,
                            True,
                            (gpu.index,),
                            packing,
                            affinity,
                            interference,
                            pod_slow,
                            "",
                            len(gpu.residents),
                            res_slow,
                        )
                    memo[key] = raws[slot] = raw
            else:
                for slot, node, memo, key, usage, fit, _ in group:
                    memo[key] = raws[slot] = evaluate_share(
                        node,
                        pod,
                        config=config,
                        predictors=predictors,
                        usage=usage,
                        gang_elsewhere=gang_elsewhere,
                        fit=fit,
                    )


def _integers(totals: list[float], span_points: float) -> list[int]:
    """The extender's integer for each `Scorer._extender_totals` value: 1..10 by distance to the batch's best feasible
    total (`totals.extender_integers`), 0 if infeasible, the coded integer for a neutral/unknown verdict."""
    values = np.array(totals, dtype=np.float64)
    feasible = values >= 0.0
    ints = np.where(values == _INFEASIBLE, 0.0, np.rint(_NEUTRAL_BASE - values)).astype(np.int64)
    ints[feasible] = extender_integers(values[feasible], span_points)
    out: list[int] = ints.tolist()
    return out


def fixed_clock(now_seconds: float | None) -> Callable[[], float | None]:
    """A clock that always reads `now_seconds`."""
    return lambda: now_seconds


# One question at one moment, to a fresh `Scorer` (nothing is kept between calls): tests and one-off callers. The
# service and the simulator hold a `Scorer` instead.


def score_nodes(
    pod: PodRequest,
    nodes: Sequence[NodeState],
    *,
    config: ScoringConfig,
    predictors: Predictors | None = None,
    now_seconds: float | None = None,
) -> list[NodeScore]:
    return Scorer(config, predictors, clock=fixed_clock(now_seconds)).score_nodes(pod, nodes)


def score_candidates(
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    *,
    config: ScoringConfig,
    predictors: Predictors | None = None,
    now_seconds: float | None = None,
) -> list[NodeScore]:
    return Scorer(config, predictors, clock=fixed_clock(now_seconds)).score_candidates(pod, names, nodes)


def allocate(
    pod: PodRequest,
    node: NodeState,
    *,
    config: ScoringConfig,
    predictors: Predictors | None = None,
    now_seconds: float | None = None,
) -> NodeScore:
    return Scorer(config, predictors, clock=fixed_clock(now_seconds)).allocate(pod, node)


def extender_priorities(
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    *,
    config: ScoringConfig,
    predictors: Predictors | None = None,
    now_seconds: float | None = None,
) -> ExtenderVerdict:
    return Scorer(config, predictors, clock=fixed_clock(now_seconds)).extender_priorities(pod, names, nodes)


def extender_node_scores(
    pod: PodRequest,
    nodes: Sequence[NodeState],
    *,
    config: ScoringConfig,
    predictors: Predictors | None = None,
    now_seconds: float | None = None,
) -> list[int]:
    return Scorer(config, predictors, clock=fixed_clock(now_seconds)).extender_node_scores(pod, nodes)
