"""Fragmentation of a node and the search for the best set of GPUs on it, cached per node shape.

Many nodes share a topology and a free mask, so these are pure functions of (topology, free milli-GPU, eligible mask,
request size, config) behind `lru_cache`: the per-node scorer (`advisor.placement.scoring`) calls them for each
candidate and mostly hits the cache. The fragmentation math itself is `advisor.placement.fragmentation`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

import numpy as np
from numpy.typing import NDArray

from advisor.placement.config import GRADIENT_STEP_SLACK, ScoringConfig
from advisor.placement.fragmentation import TaskMix, node_fragmentation_fit_milli, node_fragmentation_milli
from advisor.placement.types import WHOLE_GPU_MILLI, WORST_LINK_RANK, Topology
from collector.snapshot import LINK_RANK

_EXHAUSTIVE_SET_LIMIT = 4096
_GREEDY_STARTS = 8


def fragmentation_milli(topology: Topology, free_milli: tuple[int, ...], task_mix: TaskMix) -> float:
    """The node's expected fragmentation F_n(M) in milli-GPU
    (`advisor.placement.fragmentation.node_fragmentation_milli`)."""
    return node_fragmentation_milli(free_milli, topology.islands, topology.largest_island, task_mix)


def fragmentation_with(
    topology: Topology, free_milli: tuple[int, ...], config: ScoringConfig, fit: tuple[int, int] | None
) -> float:
    """F_n(M) of the node, with CPU/memory at fit index `fit` when known (else GPU-only, as `fragmentation_milli`)."""
    if fit is None or config.resources is None:
        return node_fragmentation_milli(free_milli, topology.islands, topology.largest_island, config.task_mix)
    return node_fragmentation_fit_milli(free_milli, topology.islands, topology.largest_island, config.resources, fit)


@lru_cache(maxsize=65536)
def _mask_milli(gpu_count: int, mask: int) -> tuple[int, ...]:
    return tuple(WHOLE_GPU_MILLI if mask >> i & 1 else 0 for i in range(gpu_count))


def take_milli(free_milli: tuple[int, ...], positions: Iterable[int], milli: int) -> tuple[int, ...]:
    out = list(free_milli)
    for p in positions:
        out[p] -= milli
    return tuple(out)


@dataclass(frozen=True, slots=True)
class GpuSet:
    mask: int
    positions: tuple[int, ...]
    worst_rank: int
    mean_rank: float
    fragmentation_after: float


def _set_cost(ranks: tuple[tuple[int, ...], ...], positions: Sequence[int]) -> tuple[int, float]:
    worst, total, pairs = 0, 0, 0
    for a_i, a in enumerate(positions):
        row = ranks[a]
        for b in positions[a_i + 1 :]:
            r = row[b]
            total += r
            pairs += 1
            worst = max(worst, r)
    return worst, (total / pairs if pairs else 0.0)


@lru_cache(maxsize=65536)
def best_gpu_set(topology: Topology, eligible_mask: int, k: int, task_mix: TaskMix) -> GpuSet | None:
    """The best k GPUs among `eligible_mask`: best worst link, then best mean link, then least fragmentation.

    Which whole free GPUs a pod takes changes only the whole-GPU part of F (partly used GPUs stay as they are), so
    the tie-break compares F of the eligible GPUs left.

    Exhaustive while the number of k-subsets is at most 4096; beyond, greedy (grow by cheapest link) from up to 8 seeds
    spread over the NVLink islands.
    """
    positions = [i for i in range(topology.gpu_count) if eligible_mask >> i & 1]
    if k <= 0 or len(positions) < k:
        return None
    ranks = topology.ranks
    if math.comb(len(positions), k) <= _EXHAUSTIVE_SET_LIMIT:
        candidates: Iterable[tuple[int, ...]] = combinations(positions, k)
    else:
        # Grow from the first eligible GPU of each NVLink island (then others) — at most _GREEDY_STARTS seeds.
        seeds = [p for island in topology.islands for p in positions if island >> p & 1][:: max(1, k)]
        seeds = list(dict.fromkeys([*seeds, *positions]))[:_GREEDY_STARTS]
        candidates = (_greedy_set(ranks, positions, start, k) for start in seeds)
    best: tuple[int, float, float] | None = None
    chosen: GpuSet | None = None
    for combo in candidates:
        worst, mean = _set_cost(ranks, combo)
        if best is not None and (worst, mean) > best[:2]:
            continue
        mask = 0
        for p in combo:
            mask |= 1 << p
        frag = fragmentation_milli(topology, _mask_milli(topology.gpu_count, eligible_mask & ~mask), task_mix)
        key = (worst, mean, frag)
        if best is None or key < best:
            best = key
            chosen = GpuSet(mask, tuple(combo), worst, mean, frag)
    return chosen


def best_gpu_sets(
    topology: Topology,
    eligible_masks: Sequence[int],
    k: int,
    task_mix: TaskMix,
    *,
    fragmentation: Callable[[NDArray[np.int64]], NDArray[np.float64]] | None = None,
) -> list[GpuSet | None]:
    """`best_gpu_set` for many eligible masks of one topology at once (the prioritize verb's node shapes it has not
    met): the same sets. Where every eligible mask is searched exhaustively (at most `_EXHAUSTIVE_SET_LIMIT`
    k-subsets of all the node's GPUs), the k-subsets' link costs are taken once per (topology, k) and each mask's
    best subset is found on arrays, by the same keys in the same order: the least (worst, mean) link rank, then the
    least F_n(M) of the eligible GPUs left (`fragmentation_milli`, once per distinct mask left), the first subset in
    `combinations` order on ties. Otherwise `best_gpu_set` per mask. `fragmentation`: F_n(M) of each of many masks
    left (wholly free GPUs at their bits, none elsewhere) on arrays, where the caller has it (the same numbers as
    `fragmentation_milli`, `columnar.masks_fragmentation`)."""
    g = topology.gpu_count
    if k <= 0 or k > g or math.comb(g, k) > _EXHAUSTIVE_SET_LIMIT or g > _ARRAY_SET_GPUS:
        return [best_gpu_set(topology, m, k, task_mix) for m in eligible_masks]
    subsets, worst, mean, rank = _subsets(topology, k)
    masks = np.array(eligible_masks, dtype=np.int64)
    valid = (subsets[None, :] & ~masks[:, None]) == 0  # mask × subset: the subset is among the eligible GPUs
    ranked = np.where(valid, rank[None, :], rank.size)
    best_rank = ranked.min(axis=1)
    tied = valid & (ranked == best_rank[:, None])  # the subsets of the least (worst, mean) of each mask (none where
    # no subset is among the eligible GPUs: no F_n(M) is computed for them)
    rows, cols = np.nonzero(tied)
    if not rows.size:  # no mask has k eligible GPUs
        return [None] * masks.size
    left = masks[rows] & ~subsets[cols]
    distinct, inverse = np.unique(left, return_inverse=True)
    if fragmentation is None:
        f = np.array([fragmentation_milli(topology, _mask_milli(g, m), task_mix) for m in distinct.tolist()])
    else:
        f = fragmentation(distinct)
    frag = np.full(tied.shape, np.inf)
    frag[rows, cols] = f[inverse]
    chosen = frag.argmin(axis=1)  # the first subset in `combinations` order on ties
    none = rank.size  # a mask's best rank where no subset is among its eligible GPUs (fewer than k)
    subset_masks: list[int] = subsets.tolist()
    out: list[GpuSet | None] = []
    for i, (j, best) in enumerate(zip(chosen.tolist(), best_rank.tolist(), strict=True)):
        if best == none:
            out.append(None)
            continue
        mask = subset_masks[j]
        positions = tuple(p for p in range(g) if mask >> p & 1)
        out.append(GpuSet(mask, positions, worst[j], mean[j], float(frag[i, j])))
    return out


_ARRAY_SET_GPUS = 62
"""`best_gpu_sets` keeps subsets as int64 bit masks: nodes of more GPUs go through `best_gpu_set`."""


@lru_cache(maxsize=256)
def _subsets(topology: Topology, k: int) -> tuple[NDArray[np.int64], list[int], list[float], NDArray[np.int64]]:
    """Every k-subset of the topology's GPUs in `combinations` order: its bit mask, worst and mean link rank
    (`_set_cost`), and the rank of (worst, mean) among them (equal pairs, equal ranks)."""
    combos = list(combinations(range(topology.gpu_count), k))
    costs = [_set_cost(topology.ranks, combo) for combo in combos]
    order = {cost: i for i, cost in enumerate(sorted(set(costs)))}
    masks = np.array([sum(1 << p for p in combo) for combo in combos], dtype=np.int64)
    rank = np.array([order[cost] for cost in costs], dtype=np.int64)
    return masks, [w for w, _ in costs], [m for _, m in costs], rank


def _greedy_set(ranks: tuple[tuple[int, ...], ...], positions: list[int], start: int, k: int) -> tuple[int, ...]:
    chosen = [start]
    rest = [p for p in positions if p != start]
    while len(chosen) < k:
        nxt = min(rest, key=lambda p: (max(ranks[p][c] for c in chosen), sum(ranks[p][c] for c in chosen)))
        chosen.append(nxt)
        rest.remove(nxt)
    return tuple(sorted(chosen))


@dataclass(frozen=True, slots=True)
class WholePlan:
    positions: tuple[int, ...]
    packing: float
    topology_affinity: float
    detail: str
    mask: int
    """`positions` as a bit mask."""


@lru_cache(maxsize=65536)
def whole_plan(
    topology: Topology, free_milli: tuple[int, ...], eligible_mask: int, k: int, config: ScoringConfig
) -> WholePlan | None:
    """Chosen k-set, packing and link affinity of a whole-GPU request; depends only on the node's shape."""
    chosen = best_gpu_set(topology, eligible_mask, k, config.task_mix)
    if chosen is None:
        return None
    after_milli = take_milli(free_milli, chosen.positions, WHOLE_GPU_MILLI)
    packing = packing_of(
        fragmentation_milli(topology, after_milli, config.task_mix)
        - fragmentation_milli(topology, free_milli, config.task_mix),
        after_milli,
        config,
    )
    left = f"leaves {sum(1 for r in after_milli if r >= WHOLE_GPU_MILLI)} free"
    mask = sum(1 << p for p in chosen.positions)
    if k <= 1:
        return WholePlan(chosen.positions, packing, set_affinity(chosen, k), f", {left}", mask)
    link = _LEVEL_BY_RANK[chosen.worst_rank] if topology.known else "topology unknown"
    return WholePlan(chosen.positions, packing, set_affinity(chosen, k), f" on {link}, {left}", mask)


def set_affinity(chosen: GpuSet, k: int) -> float:
    """A whole-GPU plan's link affinity: 1 for one GPU, else 1 − the chosen set's mean link rank over the worst."""
    return 1.0 if k <= 1 else 1.0 - chosen.mean_rank / WORST_LINK_RANK


def packing_of(
    delta_fragmentation_milli: float,
    free_after_milli: tuple[int, ...],
    config: ScoringConfig,
    balance_penalty: float = 0.0,
) -> float:
    """1 − b fragmentation change (in GPUs), b best fit (less free capacity left; b =
    `ScoringConfig.packing_best_fit_share`, 20 % by default): equal fragmentation changes go to the fuller node.

    With `ScoringConfig.packing_gradient_steps` the gradient's sigmoid is floored to that many steps, as the FGD
    authors' integer score floors it to 100: nodes whose changes fall in one step tie on it, and
    `ScoringConfig.packing_gradient_residual` of what the floor took off is added back beside best fit, so that within
    a step a smaller change still counts a little. `balance_penalty` (`ScoringConfig.cpu_balance_penalty`, 0 unless
    the config asks) is taken off the best-fit part: of equally full nodes, the one whose CPU left matches its GPUs
    left wins."""
    left_ratio = sum(free_after_milli) / max(1, WHOLE_GPU_MILLI * len(free_after_milli))
    fragmentation = _sigmoid_of_negative(delta_fragmentation_milli / WHOLE_GPU_MILLI)
    stepped = fragmentation
    steps = config.packing_gradient_steps
    if steps:
        stepped = math.floor(fragmentation * steps + GRADIENT_STEP_SLACK) / steps
    best_fit_share = config.packing_best_fit_share
    best_fit = best_fit_share * (1.0 - left_ratio - balance_penalty)
    return (1.0 - best_fit_share) * stepped + best_fit + config.packing_gradient_residual * (fragmentation - stepped)


def _sigmoid_of_negative(x: float) -> float:
    if x > 50:
        return 0.0
    return 1.0 / (1.0 + math.exp(x))


_LEVEL_BY_RANK = {rank: level.value for level, rank in LINK_RANK.items()}
