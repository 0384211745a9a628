"""kube-scheduler's integers: the extender's 0..10 per candidate node from the scorer's 0..100 verdicts.

The scheduler decodes no float and rounding `score / 10` flattens the ranking, so the best feasible node gets 10 and
the others lose one step per `ScoringConfig.extender_span_points` / 10 points behind it. `extender_priorities` (the
service's prioritize verb) and `extender_node_scores` (the simulator) compute the same integers straight from the
raw verdicts, without building a `NodeScore` per node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from advisor.placement.config import DEFAULT_EXTENDER_SPAN_POINTS, ScoringConfig
from advisor.placement.scoring import (
    HEURISTIC_PREDICTORS,
    RawVerdict,
    evaluate_batch,
    jct_basis,
    scores_without_gpu,
)
from advisor.placement.types import NodeScore, NodeState, PodRequest
from advisor.placement.vectors import VECTORS, covers
from advisor.predictors import Predictors


def extender_scores(scores: Sequence[NodeScore], *, span_points: float = DEFAULT_EXTENDER_SPAN_POINTS) -> list[int]:
    """kube-scheduler's integer 0..10 for a batch, keeping the ranking that rounding `score / 10` would flatten.

    The best feasible known node gets 10 and every other one loses 1 per `span_points` / 10 points (the config's
    `extender_span_points`, 4 by default) it is behind, down to 1; infeasible nodes get 0 and unknown ones their own
    (neutral) score / 10. Components that are equal on every node compress raw scores into a narrow band, and a
    float does not decode in the scheduler.
    """
    best = max((s.score for s in scores if s.known and s.feasible), default=None)
    out: list[int] = []
    for s in scores:
        if not s.known:
            out.append(min(10, max(0, round(s.score / 10.0))))
        elif not s.feasible or best is None:
            out.append(0)
        else:
            out.append(max(1, round(10.0 - 10.0 * (best - s.score) / span_points)))
    return out


@dataclass(frozen=True, slots=True)
class ExtenderVerdict:
    """The extender's answer for a batch: integer 0..10 per candidate (in order) and how many of each outcome."""

    scores: list[int]
    scored: int
    infeasible: int
    unknown: int


def extender_priorities(
    pod: PodRequest,
    names: Sequence[str],
    nodes: Mapping[str, NodeState],
    *,
    config: ScoringConfig,
    predictors: Predictors | None = None,
    now_seconds: float | None = None,
) -> ExtenderVerdict:
    """`extender_scores(score_candidates(...))` without building a `NodeScore` per node (the scheduler's hot path).

    Same numbers: only the totals are computed, since kube-scheduler reads nothing else. The pods `vectors.covers`
    (GPU pods without a gang, a task mix without CPU/memory) are answered from per-shape score vectors
    (`advisor.placement.vectors`): a gather where the shape and the nodes' states were seen before.
    """
    predictors = predictors or HEURISTIC_PREDICTORS
    unknown_int = min(10, max(0, round(config.unknown_node_score / 10.0)))
    if pod.whole_gpus == 0 and not pod.is_share and not scores_without_gpu(pod, config):
        return ExtenderVerdict([5] * len(names), 0, 0, len(names))
    if covers(pod, config):
        got = VECTORS.priorities(pod, names, nodes, config=config, predictors=predictors, now_seconds=now_seconds)
        scored_count, infeasible_count = int(got.scored.sum()), int(got.infeasible.sum())
        ints = got.scores
        if config.extender_first_of_equals:
            ints = first_of_equals(ints, names, got.scored.tolist())
        return ExtenderVerdict(ints, scored_count, infeasible_count, len(names) - scored_count - infeasible_count)
    known = [nodes[n] for n in names if n in nodes]
    raws = evaluate_batch(pod, known, config=config, predictors=predictors, now_seconds=now_seconds)
    totals = _extender_totals(pod, raws, config, predictors)
    best = max(totals, default=-1.0)
    it = iter(totals)
    scores: list[int] = []
    scored = infeasible = unknown = 0
    for name in names:
        value = next(it) if name in nodes else None
        if value is None:
            scores.append(unknown_int)
            unknown += 1
        else:
            scores.append(_extender_int(value, best, config.extender_span_points))
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


def first_of_equals(scores: Sequence[int], names: Sequence[str], scored: Sequence[bool]) -> list[int]:
    """`ScoringConfig.extender_first_of_equals`: of the scored nodes at the batch's highest integer, the first by
    name keeps it and the others drop one step, so kube-scheduler does not draw among nodes the advisor rates equal.
    Equal nodes then fill one after another (first fit, as the FGD authors' scheduler breaks ties) instead of
    being broken open at random in parallel."""
    top = max((x for x, ok in zip(scores, scored, strict=True) if ok), default=None)
    if top is None:
        return list(scores)
    first = min(n for n, x, ok in zip(names, scores, scored, strict=True) if ok and x == top)
    return [x - 1 if ok and x == top and n != first else x for n, x, ok in zip(names, scores, scored, strict=True)]


def extender_node_scores(
    pod: PodRequest,
    nodes: Sequence[NodeState],
    *,
    config: ScoringConfig,
    predictors: Predictors | None = None,
    now_seconds: float | None = None,
) -> list[int]:
    """`extender_scores(score_nodes(...))` without building a `NodeScore` per node (the simulator's hot path)."""
    predictors = predictors or HEURISTIC_PREDICTORS
    if pod.whole_gpus == 0 and not pod.is_share and not scores_without_gpu(pod, config):
        return [5] * len(nodes)
    raws = evaluate_batch(pod, nodes, config=config, predictors=predictors, now_seconds=now_seconds)
    totals = _extender_totals(pod, raws, config, predictors)
    best = max(totals, default=-1.0)
    span = config.extender_span_points
    return [_extender_int(v, best, span) for v in totals]


_INFEASIBLE = -1.0
_NEUTRAL_BASE = -2.0
"""`_extender_totals` codes: -1 for an infeasible node, -2 - n for a neutral/unknown verdict whose integer is n."""


def _extender_int(total: float, best: float, span_points: float) -> int:
    """The extender's integer for one `_extender_totals` value: 1..10 by distance to the batch's best feasible total
    (one step per `span_points` / 10), 0 if infeasible, the coded integer for a neutral/unknown verdict."""
    if total >= 0.0:
        return max(1, round(10.0 - 10.0 * (best - total) / span_points))
    return 0 if total == _INFEASIBLE else round(_NEUTRAL_BASE - total)


def _extender_totals(
    pod: PodRequest, raws: Sequence[RawVerdict | NodeScore], config: ScoringConfig, predictors: Predictors
) -> list[float]:
    """Each verdict's total 0..100 as `_finish` computes it, or a negative code (`_INFEASIBLE`, `_NEUTRAL_BASE`)."""
    feasible = [raw for raw in raws if isinstance(raw, RawVerdict) and raw.feasible]
    _, unit_time, _ = jct_basis(pod, feasible, predictors)
    best_time = min((raw.slowdown * unit_time[raw.gpu_model] for raw in feasible), default=1.0)
    w_p, w_a, w_i, w_j = config.weight_packing, config.weight_affinity, config.weight_interference, config.weight_jct
    w_total = w_p + w_a + w_i + w_j
    scale = 100.0 / w_total if w_total > 0 else 0.0
    totals: list[float] = []
    for raw in raws:
        if isinstance(raw, NodeScore):
            totals.append(_NEUTRAL_BASE - min(10, max(0, round(raw.score / 10.0))))
        elif not raw.feasible:
            totals.append(_INFEASIBLE)
        elif scale:
            t = raw.slowdown * unit_time[raw.gpu_model]
            jct_ratio = best_time / t if t > 0 else 1.0
            total = scale * (w_p * raw.packing + w_a * raw.affinity + w_i * raw.interference + w_j * jct_ratio)
            totals.append(100.0 if total > 100.0 else (0.0 if total < 0.0 else total))
        else:
            totals.append(50.0)
    return totals
