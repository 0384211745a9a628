"""The weighted total of a score and kube-scheduler's integer from it: the one definition every path calls.

A batch's feasible verdicts (packing, affinity, interference, and the time each node would take: slowdown × the unit
time of its GPU model) become totals 0..100 here, as arrays: `Scorer.score_nodes` (a `NodeScore` per node), the
extender's totals over verdicts and the score vectors' gather all call `weighted_totals`, so the numbers cannot drift
apart. The jct component is batch-relative (`best / this`), hence one call per batch, never per node.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from advisor.placement.config import ScoringConfig

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def weighted_totals(
    config: ScoringConfig, packing: FloatArray, affinity: FloatArray, interference: FloatArray, times: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Each feasible node's total 0..100 and its jct component (`best time / its time`; 1 where its time is 0).

    `times` is each node's predicted run time in the batch's unit (slowdown × the unit time of its GPU model,
    `scoring.jct_basis`). With every weight 0 each total is 50 (neutral)."""
    w_p, w_a, w_i, w_j = config.weight_packing, config.weight_affinity, config.weight_interference, config.weight_jct
    jct_ratio = np.ones_like(times)
    if times.size:
        np.divide(times.min(), times, out=jct_ratio, where=times > 0)
    w_total = w_p + w_a + w_i + w_j
    scale = 100.0 / w_total if w_total > 0 else 0.0
    if not scale:
        return np.full(times.size, 50.0), jct_ratio
    # in place, the same operations in the same order as scale * (w_p * p + w_a * a + w_i * i + w_j * j)
    total = w_p * packing
    total += w_a * affinity
    total += w_i * interference
    total += w_j * jct_ratio
    total *= scale
    np.copyto(total, 100.0, where=total > 100.0)
    np.copyto(total, 0.0, where=total < 0.0)
    return total, jct_ratio


def extender_integers(totals: FloatArray, span_points: float) -> IntArray:
    """kube-scheduler's 1..10 for feasible totals: 10 for the batch's best, one step less per `span_points` / 10
    points behind it (rounded half to even, as Python's `round`), never below 1."""
    if not totals.size:
        return np.zeros(0, dtype=np.int64)
    ints: IntArray = np.rint(10.0 - 10.0 * (totals.max() - totals) / span_points).astype(np.int64)
    return np.maximum(ints, 1)


def unknown_integer(score: float) -> int:
    """The integer of a neutral or unknown verdict's score 0..100."""
    return min(10, max(0, round(score / 10.0)))
