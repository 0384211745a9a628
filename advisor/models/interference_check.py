"""The leave-one-family-out check that chooses the interference model's knobs (α, λ, partner offsets, ω) inside
`InterferenceModel.fit` (`advisor.models.interference`, whose module doc says why): the grid, each held-out fold's
predictions, and the error sums the choice is made from."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np
import numpy.typing as npt

from advisor.features import FloatArray
from advisor.models.interference_frames import NORM_MIN

# The grid of the leave-one-family-out check in `InterferenceModel.fit` (see the module doc).
ALPHA_GRID = (0.0, 0.5, 1.0)
# 0.3: a new workload's three probe pairs per GPU model keep 3 / 3.3 of its offsets when its measurements are
# consistent enough for the check to trust them.
SHRINKAGE_GRID = (0.3, 1.0, 3.0, 10.0)
PARTNER_GRID = (True, False)
# (α, λ, partner offsets, ω) and the grid point of the check's fits, (α, λ, partner offsets).
Knobs = tuple[float, float, bool, float]
GridKey = tuple[float, float, bool]
DEFAULT_KNOBS: Knobs = (1.0, 3.0, True, 0.5)
NEIGHBOUR_GRID = (0.0, 0.5, 1.0)
# How far a side without measured pairs moves from the heuristic toward the model: all the way, unless choosing the
# knobs with one training family left aside loses to the heuristic on that family (see `_choose_knobs`).
UNMEASURED_WEIGHTS = (1.0, 0.0)
MIN_CHECK_FAMILIES = 3
MIN_CHECK_TRAIN_ROWS = 20
CHECK_PROBES = 3


@dataclass(frozen=True)
class CheckFold:
    """One held-out fold of the check: every part's prediction per grid point (α, λ), the truth, and which scored
    sides belong to a workload without measured pairs in the fold's training part."""

    family: str
    truth: FloatArray
    heuristic: FloatArray
    unmeasured: npt.NDArray[np.bool_]
    base: dict[GridKey, FloatArray]
    neighbour: dict[GridKey, FloatArray]


@dataclass(frozen=True)
class CheckTotals:
    """The check's error sums per (probes, fold) and grid point, for choosing knobs with any family left aside."""

    families: list[list[str]]  # per probe setting, each fold's family
    counts: list[npt.NDArray[np.float64]]  # per probe setting, each fold's scored sides
    heuristic: list[npt.NDArray[np.float64]]  # per probe setting, each fold's heuristic error sum
    sums: dict[Knobs, list[npt.NDArray[np.float64]]]  # per grid point and probe setting, each fold's error sum

    @classmethod
    def of(cls, folds: dict[int, list[CheckFold]], unmeasured_weight: float, norm_max: float) -> CheckTotals:
        settings = [folds[p] for p in sorted(folds)]
        sums: dict[Knobs, list[npt.NDArray[np.float64]]] = {}
        for knobs in product(ALPHA_GRID, SHRINKAGE_GRID, PARTNER_GRID, NEIGHBOUR_GRID):
            sums[knobs] = [
                np.array([np.sum(_clipped(f, knobs, unmeasured_weight, norm_max)) for f in held]) for held in settings
            ]
        return cls(
            [[f.family for f in held] for held in settings],
            [np.array([len(f.truth) for f in held], dtype=np.float64) for held in settings],
            [np.array([np.sum(np.abs(f.heuristic - f.truth)) for f in held]) for held in settings],
            sums,
        )

    def best(self, left_aside: str | None = None) -> tuple[float, Knobs, list[float]] | None:
        """The grid point with the lowest mean over probe settings of the pooled MAE, among those that do not lose to
        the heuristic on any held-out family without probes (the first setting); `left_aside` is not looked at."""
        keep = [np.array([f != left_aside for f in fams]) for fams in self.families]
        best: tuple[float, Knobs, list[float]] | None = None
        for knobs, sums in self.sums.items():
            # A grid point that loses to the heuristic on a held-out family is out (α = 0, λ = ∞ is the heuristic).
            if np.any((sums[0] > self.heuristic[0] + 1e-12) & keep[0]):
                continue
            maes = [
                float(np.sum(s[k]) / max(np.sum(c[k]), 1.0)) for s, c, k in zip(sums, self.counts, keep, strict=True)
            ]
            score = float(np.mean(maes))
            if best is None or score < best[0]:
                best = (score, knobs, maes)
        return best

    def selection_holds(self) -> bool:
        """Whether choosing the knobs without a family never loses to the heuristic on that family (no probes)."""
        for i, family in enumerate(self.families[0]):
            chosen = self.best(left_aside=family)
            if chosen is None or self.sums[chosen[1]][0][i] > self.heuristic[0][i] + 1e-12:
                return False
        return True


def _clipped(fold: CheckFold, knobs: Knobs, unmeasured_weight: float, norm_max: float) -> FloatArray:
    alpha, shrinkage, partners, weight = knobs
    key = (alpha, shrinkage, partners)
    raw = fold.base[key] + weight * fold.neighbour[key]
    if unmeasured_weight != 1.0:
        raw = np.where(fold.unmeasured, fold.heuristic + unmeasured_weight * (raw - fold.heuristic), raw)
    result: FloatArray = np.abs(np.clip(raw, NORM_MIN, norm_max) - fold.truth)
    return result
