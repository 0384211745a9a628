"""kube-scheduler's integers: the extender's 0..10 per candidate node from the scorer's 0..100 verdicts.

The scheduler decodes no float and rounding `score / 10` flattens the ranking, so the best feasible node gets 10 and
the others lose one step per `ScoringConfig.extender_span_points` / 10 points behind it (`totals.extender_integers`).
`Scorer.extender_priorities` (the service's prioritize verb) and `Scorer.extender_node_scores` (the simulator) compute
the same integers straight from the raw verdicts, without building a `NodeScore` per node.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from advisor.placement.config import DEFAULT_EXTENDER_SPAN_POINTS
from advisor.placement.totals import extender_integers, unknown_integer
from advisor.placement.types import NodeScore


def extender_scores(scores: Sequence[NodeScore], *, span_points: float = DEFAULT_EXTENDER_SPAN_POINTS) -> list[int]:
    """kube-scheduler's integer 0..10 for a batch, keeping the ranking that rounding `score / 10` would flatten.

    The best feasible known node gets 10 and every other one loses 1 per `span_points` / 10 points (the config's
    `extender_span_points`, 4 by default) it is behind, down to 1; infeasible nodes get 0 and unknown ones their own
    (neutral) score / 10. Components that are equal on every node compress raw scores into a narrow band, and a
    float does not decode in the scheduler.
    """
    scored = [s.known and s.feasible for s in scores]
    ints = extender_integers(np.array([s.score for s, ok in zip(scores, scored, strict=True) if ok]), span_points)
    it = iter(ints.tolist())
    return [
        next(it) if ok else (0 if s.known else unknown_integer(s.score)) for s, ok in zip(scores, scored, strict=True)
    ]


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
