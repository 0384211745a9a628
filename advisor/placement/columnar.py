"""A GPU share's verdict on many nodes at once: numpy over the nodes' columns instead of a Python loop per GPU.

A share can go on any partly free GPU of a node, so the scalar scorer (`scoring._evaluate_share`) computes the node's
fragmentation after placing it on each such GPU: one `node_fragmentation_milli` per (node, GPU) and request size.
For a request shape the service has not seen (a new share size, or every node just refreshed), that is thousands of
uncached evaluations per call. Here the same arithmetic runs on arrays: every node's GPUs as columns
(`NodeState.columns`: free and allocated milli-GPU, whether a share may go there, GPU memory, NVLink island, the
first residents' SM and bandwidth use), what F_n(M) reads of a node (free total, full GPUs, the largest free share,
full GPUs in the fullest island, shares below each size of the mix) per node, then per (node, GPU) after-state from
the one GPU that changes, and F_n(M) for all of them in a few array operations. What does not depend on the share's
size (`ShareBasis`: the statistics and F_n(M) before, each GPU's room, the largest free share among the other GPUs)
is one step (`share_basis`) that a caller may keep per node state (the prioritize verb's index does).

Same numbers, bit for bit, as the scalar path (tests/advisor/test_columnar.py compares them on random nodes): every
float is computed by the same IEEE operations in the same order (sums of integers are exact; the mix's terms are
added one after another, as `fragmentation.node_fragmentation_milli` does), the exponential of the packing sigmoid is
`math.exp` on each distinct value, and interference is the heuristic predictor's arithmetic in its order (any other
predictor: its own `slowdowns` per busy GPU). Only the GPU-only form and the CPU/memory form of F that
`gpuset.fragmentation_with` chooses between are covered; both are the scorer's. If the packing formula
(`gpuset.packing_of`) or F changes, this must change with it: the equivalence test fails until it does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from advisor.placement.config import GRADIENT_STEP_SLACK, ScoringConfig
from advisor.placement.types import COLUMN_RESIDENTS, COLUMN_ROWS, WHOLE_GPU_MILLI, NodeState, PodRequest, Topology
from advisor.predictors import (
    HeuristicInterference,
    Predictors,
    UsageProfile,
    resident_set_keys,
    turn_taking_slowdowns_by_set,
    turn_taking_slowdowns_of,
)
from advisor.sharing import CONCURRENT_MODES, TIME_SLICING

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

_FREE, _ALLOCATED, _SHARE_OK, _MEMORY_TOTAL, _MEMORY_USED, _ISLAND, _RESIDENTS = range(7)
_SM = 7
_BW = 7 + COLUMN_RESIDENTS


_columns_of = attrgetter("columns")
_largest_island_of = attrgetter("topology.largest_island")
_sm_of = attrgetter("sm_utilization_ratio")
_bandwidth_of = attrgetter("memory_bandwidth_utilization_ratio")

ShareChoice = tuple[int, float, float, float]
"""The best GPU for a share on one node: (position in `NodeState.gpus`, or -1 when none fits; its packing, the pod's
slowdown there, the residents' worst slowdown)."""

NO_SHARE: ShareChoice = (-1, 0.0, 1.0, 1.0)


class ShareColumns(NamedTuple):
    """The best GPU for a share on each of many nodes, one list per field (no tuple per node: the caller builds each
    node's verdict straight from them). `interference` is `0.5 / pod_slowdown + 0.5 / resident_slowdown`, the
    verdict's component, computed here as the scalar path does."""

    positions: list[int]  # in `NodeState.gpus`; -1 where none fits (the other fields then mean nothing)
    packing: list[float]
    interference: list[float]
    pod_slowdown: list[float]
    resident_slowdown: list[float]


class ShareArrays(NamedTuple):
    """`ShareColumns` as arrays (one element per node): what the prioritize verb's score vectors store."""

    positions: NDArray[np.intp]
    packing: FloatArray
    interference: FloatArray
    pod_slowdown: FloatArray
    resident_slowdown: FloatArray


class NodeFacts(NamedTuple):
    """What a caller already holds per node in arrays (the prioritize verb's node index), so that `share_arrays` and
    `gpu_slowdowns` need not read it from every node: its largest NVLink island, which of `usages` is the pod's on
    it, whether its GPUs run kernels at once (`advisor.sharing.CONCURRENT_MODES`) or take turns (time-slicing), and
    its columns: `NodeState.columns` as `columns[:, slot[i]]` (row × GPU position, zero past the node's GPUs; rows
    first, so that one row of many nodes is one gather), so that a caller holding many nodes' columns lends the
    whole array and only what is read is copied."""

    largest_island: FloatArray
    usage_index: NDArray[np.intp]
    concurrent: BoolArray
    sliced: BoolArray
    columns: NDArray[np.float64]
    slot: NDArray[np.intp]
    set_keys: NDArray[np.int64] | None = None
    """Per slot and GPU position, `predictors.resident_set_keys` of the GPU's residents in `columns` (None: not
    kept; the residents' utilisations are then rounded on every call)."""
    shapes: NDArray[np.int64] | None = None
    """Per node, an id equal for nodes whose GPUs' free shares and topology are equal (the prioritize verb's node
    shapes): a share's packing on such nodes is one computation per class of GPUs (None: not known; per node)."""


def resident_keys(columns: NDArray[np.float64]) -> NDArray[np.int64]:
    """`NodeFacts.set_keys` of nodes' columns (row × node × GPU position): each GPU's residents as the turn-taking
    grid keys them (`predictors.resident_set_keys`), -1 where it has none or more than the columns hold."""
    counts = columns[_RESIDENTS].reshape(-1)
    resident_sm = columns[_SM : _SM + COLUMN_RESIDENTS].reshape(COLUMN_RESIDENTS, -1)
    usable = np.flatnonzero((counts > 0) & (counts <= COLUMN_RESIDENTS) & ~np.isnan(resident_sm).any(axis=0))
    keys = np.full(counts.size, -1, dtype=np.int64)
    keys[usable] = resident_set_keys(resident_sm[:, usable], counts[usable].astype(np.intp))
    return keys.reshape(columns.shape[1:])


def resident_flags(columns: NDArray[np.float64], slot: NDArray[np.intp]) -> BoolArray:
    """Per node `slot[i]` of `columns` (row × node × GPU position) and GPU position, whether the GPU has residents."""
    flags: BoolArray = columns[_RESIDENTS, slot] > 0
    return flags


def node_modes(nodes: Sequence[NodeState]) -> tuple[BoolArray, BoolArray]:
    """Per node, whether its GPUs run kernels at once and whether they take turns (`NodeFacts`' two)."""
    modes = [node.sharing_mode for node in nodes]
    concurrent = np.array([mode in CONCURRENT_MODES for mode in modes], dtype=np.bool_)
    return concurrent, np.array([mode == TIME_SLICING for mode in modes], dtype=np.bool_)


@dataclass(frozen=True, slots=True)
class _Stats:
    """What F_n(M) reads of a node's free GPU shares (`fragmentation._fragments`), per node (shape n) or per
    (GPU the share would take, node) after-state (shape g × n). Sums of integers: exact in float64."""

    total: FloatArray
    full: FloatArray
    max_free: FloatArray
    island_full: FloatArray
    below: dict[int, FloatArray]  # per share size m of the mix: the free shares smaller than m, summed


def share_sizes(config: ScoringConfig) -> set[int]:
    shapes = [(e[0], e[1]) for e in config.task_mix]
    if config.resources is not None:
        shapes += list(config.resources.shapes)
    return {milli for k, milli in shapes if k == 1 and milli < WHOLE_GPU_MILLI}


class ShareBasis(NamedTuple):
    """What a share's verdict reads of nodes that no share size changes, per node (shape n) and per node and GPU
    position (n × g): computed once per node state and configuration by a caller that keeps it (the prioritize
    verb's index, `share_basis` of the nodes whose state is new), else on every call. Sums of integers: exact."""

    free: FloatArray  # n × g: free milli-GPU
    allocated: FloatArray  # n × g: allocated milli-GPU where a share may go, +inf where none may
    memory_free: FloatArray  # n × g: free GPU memory (bytes), +inf where the total is unknown (0)
    others_max: FloatArray  # n × g: the largest free share among the node's other GPUs
    island_drop: FloatArray  # n × g: 1 where taking this GPU's last full share leaves the fullest island one less
    below_without: dict[int, FloatArray]  # per share size m of the mix (n × g): the node's `below[m]` less this GPU's
    total: FloatArray
    full: FloatArray
    island_full: FloatArray
    fragmentation: FloatArray  # F_n(M) of the node as it is
    leader: NDArray[np.intp]
    """n × g: the first position of the node whose GPU has this one's free share and island drop. Everything a
    share's packing reads of a GPU (its free share, the largest free share among the others, the island drop, the
    free shares below each size without it) follows from those two and the node, so GPUs of one class give one
    packing: `share_arrays` computes it once per class."""
    slot: NDArray[np.intp] | None = None
    """None: the arrays are the nodes' own (node i at row i). Else a keeper's, lent whole: node i's row is
    `slot[i]` and the per-GPU arrays may be wider than the nodes' GPUs (only what a call reads is copied)."""


def share_basis(
    columns: NDArray[np.float64],
    slot: NDArray[np.intp],
    gpu_count: int,
    largest: FloatArray,
    *,
    config: ScoringConfig,
    fits: Sequence[tuple[tuple[int, int], tuple[int, int]] | None],
) -> ShareBasis:
    """The `ShareBasis` of the nodes whose columns are `columns[:, slot[i], :gpu_count]` (row × node × GPU position),
    each with its largest NVLink island `largest[i]` and CPU/memory fit indices `fits[i]` (None: GPU-only)."""

    def row(r: int) -> FloatArray:
        return columns[r, slot, :gpu_count]

    free = row(_FREE)
    total_memory = row(_MEMORY_TOTAL)
    n, g = free.shape
    before, per_island, in_island = _free_stats(free, row(_ISLAND), share_sizes(config))
    # The largest free share among the other GPUs: the second largest where this GPU holds the only maximum.
    ordered = np.sort(free, axis=1)
    first = ordered[:, -1:]
    second = ordered[:, -2:-1] if g > 1 else np.zeros_like(first)
    only_max = (free == first) & (second < first)  # the maximum is unique where the second largest is below it
    # Full GPUs in the fullest island: one less only where this GPU was full in the one island holding the maximum.
    top = before.island_full[:, None]
    top_islands = (per_island == top).sum(axis=1)[:, None]
    island_drop = ((in_island == top) & (top_islands == 1)).astype(np.float64)
    same = (free[:, :, None] == free[:, None, :]) & (island_drop[:, :, None] == island_drop[:, None, :])
    if config.resources is None:  # GPU-only: no node has CPU/memory fit indices (`scoring._fit` is not called)
        uses_fit, weights = np.zeros(n, dtype=np.bool_), None
    else:
        uses_fit = np.array([f is not None for f in fits], dtype=np.bool_)
        weights = _weights(config, [f[0] if f is not None else None for f in fits])
    return ShareBasis(
        free=free,
        allocated=np.where(row(_SHARE_OK) > 0, row(_ALLOCATED), np.inf),
        memory_free=np.where(total_memory <= 0, np.inf, np.maximum(0.0, total_memory - row(_MEMORY_USED))),
        others_max=np.where(only_max, second, first),
        island_drop=island_drop,
        below_without={m: below[:, None] - free * (free < m) for m, below in before.below.items()},
        total=before.total,
        full=before.full,
        island_full=before.island_full,
        fragmentation=_fragmentation(before, largest, config=config, weights=weights, uses_fit=uses_fit),
        leader=same.argmax(axis=2),
    )


def _free_stats(free: FloatArray, island: FloatArray, sizes: set[int]) -> tuple[_Stats, FloatArray, FloatArray]:
    """What F_n(M) reads of nodes whose GPUs have `free` milli-GPU (node × GPU position; zero past a node's GPUs
    changes nothing) in NVLink islands `island` (index per position), for the share sizes `sizes`; and the full GPUs
    in each island (node × island) and in each GPU's island (node × GPU position)."""
    n, g = free.shape
    full = free >= WHOLE_GPU_MILLI
    island_of = np.arange(n)[:, None] * g + island.astype(np.int64)
    counted = np.bincount(island_of.ravel(), weights=full.ravel().astype(np.float64), minlength=n * g)
    weighted = np.asarray(counted, dtype=np.float64)  # float64 already (weighted counts): typed as such
    per_island = weighted.reshape(n, g)  # island i of node r at [r, i]
    stats = _Stats(
        total=free.sum(axis=1),
        full=full.sum(axis=1).astype(np.float64),
        max_free=free.max(axis=1),
        island_full=per_island.max(axis=1),
        below={m: (free * (free < m)).sum(axis=1) for m in sizes},
    )
    return stats, per_island, weighted[island_of]


def whole_packing(
    columns: NDArray[np.float64],
    slot: NDArray[np.intp],
    gpu_count: NDArray[np.intp],
    largest: FloatArray,
    taken: NDArray[np.int64],
    *,
    config: ScoringConfig,
) -> FloatArray:
    """`gpuset.whole_plan`'s packing of the nodes whose columns are `columns[:, slot[i]]` (row × node × GPU
    position, zero past the node's `gpu_count[i]` GPUs; largest NVLink island `largest[i]`) when a pod takes the
    whole GPUs of the bit mask `taken[i]`: F_n(M) (GPU-only, `config.task_mix`, as `gpuset.fragmentation_milli`)
    before and after, then `gpuset.packing_of` without a balance penalty, for many nodes at once (the prioritize
    verb's plans of node shapes it has not met)."""
    free = columns[_FREE, slot]
    island = columns[_ISLAND, slot]
    width = free.shape[1]
    took = ((taken[:, None] >> np.arange(width, dtype=np.int64)) & 1).astype(np.float64)
    sizes = share_sizes(config)
    before = _free_stats(free, island, sizes)[0]
    after = _free_stats(free - WHOLE_GPU_MILLI * took, island, sizes)[0]
    gpu_only = np.zeros(slot.size, dtype=np.bool_)  # `whole_plan` reads the task mix alone, never CPU/memory
    delta = _fragmentation(after, largest, config=config, weights=None, uses_fit=gpu_only) - _fragmentation(
        before, largest, config=config, weights=None, uses_fit=gpu_only
    )
    return _packing(delta, after.total / np.maximum(1, WHOLE_GPU_MILLI * gpu_count), 0.0, config)


def masks_fragmentation(topology: Topology, masks: NDArray[np.int64], *, config: ScoringConfig) -> FloatArray:
    """F_n(M) (GPU-only, `config.task_mix`, as `gpuset.fragmentation_milli`) of a node of `topology` whose GPUs at
    the bits of each of `masks` are wholly free and the others taken: what a whole-GPU set leaves of the eligible
    GPUs (`gpuset.best_gpu_sets`' tie-break), for many masks at once."""
    g = topology.gpu_count
    free = (((masks[:, None] >> np.arange(g, dtype=np.int64)) & 1) * WHOLE_GPU_MILLI).astype(np.float64)
    island = np.zeros(g)
    for i, members in enumerate(topology.islands):
        island[[p for p in range(g) if members >> p & 1]] = i
    stats = _free_stats(free, np.broadcast_to(island, free.shape), share_sizes(config))[0]
    largest = np.full(masks.size, float(topology.largest_island))
    return _fragmentation(stats, largest, config=config, weights=None, uses_fit=np.zeros(masks.size, dtype=np.bool_))


def _packing(
    delta: FloatArray, left_ratio: FloatArray, penalty: FloatArray | float, config: ScoringConfig
) -> FloatArray:
    """`gpuset.packing_of` elementwise: the fragmentation change `delta` (milli-GPU), the free share left
    `left_ratio`, the balance penalty `penalty`; the same operations in the same order."""
    sigmoid = _sigmoid_of_negative(delta / WHOLE_GPU_MILLI)
    stepped = sigmoid
    if config.packing_gradient_steps:
        steps = config.packing_gradient_steps
        stepped = np.floor(sigmoid * steps + GRADIENT_STEP_SLACK) / steps
    best_fit_share = config.packing_best_fit_share
    best_fit = best_fit_share * (1.0 - left_ratio - penalty)
    packing: FloatArray = (
        (1.0 - best_fit_share) * stepped + best_fit + config.packing_gradient_residual * (sigmoid - stepped)
    )
    return packing


def _after(basis: ShareBasis, *, milli: int, nodes: NDArray[np.intp], at: NDArray[np.intp]) -> _Stats:
    """The statistics after `milli` is taken from each GPU `at` (flat positions in the basis's per-GPU arrays) of
    node `nodes` (rows of its per-node arrays) in turn, one element per such GPU: only that GPU's free share
    changes. Computed only where the share fits, once per class of GPUs (`ShareBasis.leader`): the other GPUs'
    values are never read."""
    f = np.take(basis.free, at)
    taken = f - milli
    lost_full = ((f >= WHOLE_GPU_MILLI) & (taken < WHOLE_GPU_MILLI)).astype(np.float64)
    return _Stats(
        total=basis.total[nodes] - milli,
        full=basis.full[nodes] - lost_full,
        max_free=np.maximum(np.take(basis.others_max, at), taken),
        island_full=basis.island_full[nodes] - lost_full * np.take(basis.island_drop, at),
        below={m: np.take(without, at) + taken * (taken < m) for m, without in basis.below_without.items()},
    )


def _fragmentation(
    stats: _Stats,
    largest: FloatArray,
    *,
    config: ScoringConfig,
    weights: FloatArray | None,
    uses_fit: BoolArray,
) -> FloatArray:
    """F_n(M) in milli-GPU as `gpuset.fragmentation_with` computes it, term by term in the same order: GPU-only
    (`node_fragmentation_milli`) where `uses_fit` (per node) is false, else with each node's CPU/memory weights
    (`node_fragmentation_fit_milli`; `weights` per node and task shape of `MixResources.shapes`). `largest`: the
    largest NVLink island per node. Per-node arrays broadcast against a g × n after-state."""
    total = stats.total
    partial = total - stats.full * WHOLE_GPU_MILLI

    def fragments(k: int, milli: int) -> FloatArray:
        if k == 0:
            return np.zeros_like(total)
        if k == 1 and milli < WHOLE_GPU_MILLI:
            share: FloatArray = np.where(stats.max_free < milli, total, stats.below[milli])
            return share
        fits = np.where(k <= largest, stats.island_full >= k, stats.full >= k) if k > 1 else stats.full >= k
        whole: FloatArray = np.where(fits, partial, total)
        return whole

    out = np.zeros_like(total)
    if not uses_fit.all():
        for entry in config.task_mix:
            out = out + entry[2] * fragments(entry[0], entry[1])
    resources = config.resources
    if resources is not None and weights is not None and uses_fit.any():
        with_fit = np.zeros_like(total)
        for j, (k, milli) in enumerate(resources.shapes):
            w = weights[..., j]
            with_fit = with_fit + (w * fragments(k, milli) + (resources.all_weights[j] - w) * total)
        out = np.where(uses_fit, with_fit, out)
    result: FloatArray = np.where(total == 0, 0.0, out)
    return result


def _weights(config: ScoringConfig, fits: Sequence[tuple[int, int] | None]) -> FloatArray | None:
    """Per node, `MixResources.weights` at its fit index (all weights where it has none); None without CPU/memory."""
    resources = config.resources
    if resources is None or all(f is None for f in fits):
        return None
    return np.array([resources.weights(*f) if f is not None else resources.all_weights for f in fits])


def _sigmoid_of_negative(x: FloatArray) -> FloatArray:
    """`gpuset._sigmoid_of_negative` elementwise, with `math.exp` on each distinct value (numpy's exp may differ
    from the C library's in the last bit, and the scores must not)."""
    values, inverse = np.unique(x, return_inverse=True)
    mapped = np.array([0.0 if v > 50 else 1.0 / (1.0 + math.exp(v)) for v in values.tolist()])
    result: FloatArray = mapped[inverse.reshape(x.shape)]
    return result


def _slowdowns(
    pod: PodRequest,
    nodes: Sequence[NodeState],
    entries: FloatArray,
    at: tuple[NDArray[np.intp], NDArray[np.intp]],
    *,
    usages: Sequence[UsageProfile],
    usage_index: NDArray[np.intp],
    predictors: Predictors,
    modes: tuple[BoolArray, BoolArray] | None,
    set_keys: NDArray[np.int64] | None = None,
) -> tuple[FloatArray, FloatArray]:
    """(the pod's slowdown, the residents' worst) on each GPU `at` (`entries`: its columns, row × GPU; node i's
    usage `usages[usage_index[i]]`, its modes `modes` (`node_modes`; None: read from the nodes)); 1 where it has no
    residents. The heuristic predictor's arithmetic on arrays,
    in its order (padding residents add 0.0, which changes no sum), for GPUs whose kernels run at once; time-sliced
    GPUs through `predictors.turn_taking_slowdowns_of` (its memoised fixed point once per distinct key, not once per
    GPU); any other predictor, MIG and GPUs with more residents than the columns hold, through `slowdowns` itself."""
    positions, rows = at
    residents = entries[_RESIDENTS]
    pod_slow = np.ones(residents.shape)
    busy = residents > 0
    interference = predictors.interference
    if type(interference) is HeuristicInterference:
        # The arithmetic below is the heuristic's picture of kernels running at once; GPUs of nodes that take turns
        # (time-slicing) or are partitioned (MIG) are asked through `slowdowns`.
        node_concurrent, node_sliced = node_modes(nodes) if modes is None else modes
        concurrent, sliced = node_concurrent[rows], node_sliced[rows]
        # the pod's own use, then each resident's, added in the heuristic's order
        n = len(usages)
        of_entry = usage_index[rows]
        sm_pod = np.fromiter(map(_sm_of, usages), dtype=np.float64, count=n)[of_entry]
        at_once = np.flatnonzero(busy & concurrent)  # only these GPUs' contention is read
        if at_once.size:
            bw_pod = np.fromiter(map(_bandwidth_of, usages), dtype=np.float64, count=n)[of_entry[at_once]]
            sm = sm_pod[at_once] + entries[_SM, at_once]
            bw = bw_pod + entries[_BW, at_once]
            for j in range(1, COLUMN_RESIDENTS):
                sm = sm + entries[_SM + j, at_once]
                bw = bw + entries[_BW + j, at_once]
            cost = 1.0 + interference.context_switch_cost_ratio * residents[at_once]
            pod_slow[at_once] = np.maximum(np.maximum(1.0, sm), bw) * cost
        res_slow = pod_slow.copy()
        # Time-sliced GPUs: the turn-taking fixed point once per distinct (pod, residents) key
        # (`predictors.turn_taking_slowdowns_of`); the columns hold all their residents' SM use.
        resident_sm = entries[_SM : _SM + COLUMN_RESIDENTS]
        turns = np.flatnonzero(
            busy & sliced & (residents <= COLUMN_RESIDENTS) & ~np.isnan(resident_sm).any(axis=0) & ~np.isnan(sm_pod)
        )
        if turns.size == residents.size and set_keys is not None:
            # every GPU takes turns (whole GPUs chosen beside residents on time-sliced nodes): every answer is the
            # grid's, over the arrays as they are (no GPU's column gathered again)
            counts = residents.astype(np.intp)
            pod_slow, res_slow = turn_taking_slowdowns_by_set(sm_pod, set_keys, resident_sm, counts)
            busy[:] = False
        elif turns.size:
            counts = residents[turns].astype(np.intp)
            if set_keys is None:
                taking = turn_taking_slowdowns_of(sm_pod[turns], resident_sm[:, turns], counts)
            else:
                taking = turn_taking_slowdowns_by_set(sm_pod[turns], set_keys[turns], resident_sm[:, turns], counts)
            pod_slow[turns], res_slow[turns] = taking
            busy[turns] = False
        # MIG GPUs and GPUs with more residents than the columns hold are asked below.
        busy = busy & ((residents > COLUMN_RESIDENTS) | ~concurrent)
    else:
        res_slow = pod_slow.copy()
    asked = np.flatnonzero(busy)
    if asked.size:
        pairs = []
        for i, p in zip(rows[asked].tolist(), positions[asked].tolist(), strict=True):
            gpu = nodes[i].gpus[p]
            pairs.append(
                interference.slowdowns(
                    gpu.model, pod.workload, usages[usage_index[i]], gpu.residents, sharing=nodes[i].sharing_mode
                )
            )
        pod_slow[asked] = [a for a, _ in pairs]
        res_slow[asked] = [b for _, b in pairs]
    return pod_slow, res_slow


def gpu_slowdowns(
    pod: PodRequest,
    nodes: Sequence[NodeState],
    at: tuple[NDArray[np.intp], NDArray[np.intp]],
    *,
    usages: Sequence[UsageProfile],
    facts: NodeFacts,
    predictors: Predictors,
) -> tuple[FloatArray, FloatArray]:
    """(the pod's slowdown, the residents' worst) on GPU `at[0][i]` of node `nodes[at[1][i]]`, for any GPUs of
    nodes of any size (whole GPUs chosen on several nodes at once): `_slowdowns` over their columns, gathered from
    `facts.columns` (only the GPUs asked for)."""
    positions, rows = at
    # one gather of the (slot, position) pairs from the columns' (row, slot × position) view, of the rows
    # `_slowdowns` reads (the residents' count and use): each row is a miss per pair in a column array of many
    # nodes; the rows before are NaN, never read. The residents' bandwidth is read only on GPUs whose kernels run
    # at once: gathered for the pairs of such nodes alone (NaN, never read, on the others: time-sliced GPUs read
    # only the SM use)
    width = facts.columns.shape[2]
    flat = facts.slot[rows] * width + positions
    entries = np.empty((COLUMN_ROWS, flat.size))
    entries[:_RESIDENTS] = np.nan
    columns = facts.columns.reshape(COLUMN_ROWS, -1)
    at_once = np.flatnonzero(facts.concurrent[rows])
    if at_once.size == flat.size:
        np.take(columns[_RESIDENTS:], flat, axis=1, out=entries[_RESIDENTS:])
    else:
        np.take(columns[_RESIDENTS:_BW], flat, axis=1, out=entries[_RESIDENTS:_BW])
        entries[_BW:] = np.nan
        if at_once.size:
            entries[_BW:, at_once] = np.take(columns[_BW:], flat[at_once], axis=1)
    return _slowdowns(
        pod,
        nodes,
        entries,
        at,
        usages=usages,
        usage_index=facts.usage_index,
        predictors=predictors,
        modes=(facts.concurrent, facts.sliced),
        set_keys=None if facts.set_keys is None else np.take(facts.set_keys, flat),
    )


def _balance_penalties(
    nodes: Sequence[NodeState],
    fits: Sequence[tuple[tuple[int, int], tuple[int, int]] | None],
    total_after: FloatArray,
    rows: NDArray[np.intp],
    *,
    gpu_count: int,
    config: ScoringConfig,
) -> FloatArray | float:
    """`ScoringConfig.cpu_balance_penalty` for each place a share fits (node `rows[k]`, of `gpu_count` GPUs, with
    `total_after[k]` milli-GPU free after the share), its arithmetic in its order; 0.0 when the config has it off."""
    per_gpu = config.cpu_per_gpu_milli
    resources = config.resources
    if not config.packing_cpu_balance or resources is None or per_gpu is None:
        return 0.0
    cpu_left = np.array(
        [
            resources.cpu_at(f[1][0]) if f is not None and node.cpu_free_milli is not None else np.nan
            for node, f in zip(nodes, fits, strict=True)
        ]
    )[rows]
    gpus_left = total_after / WHOLE_GPU_MILLI
    penalty = config.packing_cpu_balance * np.abs(cpu_left - per_gpu * gpus_left) / (per_gpu * gpu_count)
    return np.where(np.isnan(penalty), 0.0, penalty)


def share_choices(
    pod: PodRequest,
    nodes: Sequence[NodeState],
    fits: Sequence[tuple[tuple[int, int], tuple[int, int]] | None],
    usages: Sequence[UsageProfile],
    *,
    config: ScoringConfig,
    predictors: Predictors,
) -> ShareColumns:
    """`share_arrays` as one list per field (the per-node verdicts are built from them)."""
    arrays = share_arrays(pod, nodes, fits, usages, config=config, predictors=predictors)
    return ShareColumns(*(a.tolist() for a in arrays))


def share_arrays(
    pod: PodRequest,
    nodes: Sequence[NodeState],
    fits: Sequence[tuple[tuple[int, int], tuple[int, int]] | None],
    usages: Sequence[UsageProfile],
    *,
    config: ScoringConfig,
    predictors: Predictors,
    facts: NodeFacts | None = None,
    basis: ShareBasis | None = None,
) -> ShareArrays:
    """For each node (all with the same number of GPUs, at least one healthy), the GPU a share of `pod` goes on:
    the best `weight_packing × packing + weight_interference × interference` among the GPUs it fits on, the first
    on ties, exactly as `scoring._evaluate_share` chooses. `fits` are the nodes' CPU/memory fit indices before and
    after the pod (None: GPU-only), `usages` the pod's expected use on each node's GPU model — or, with `facts`,
    on the node's GPU model as `facts.usage_index` says. `basis`: the nodes' `share_basis` under `config` where the
    caller keeps it (else computed here).

    Packing is computed once per class of GPUs that give the same one (`_class_packing`), interference only for
    the GPUs with residents (`gpu_slowdowns`; an empty GPU's slowdowns are 1); both are the per-GPU arithmetic of
    the scalar path on the same values, so the choice and the numbers are the same."""
    n = len(nodes)
    g = nodes[0].topology.gpu_count
    if facts is None:
        joined = np.frombuffer(b"".join(map(_columns_of, nodes)), dtype=np.float64).reshape(n, COLUMN_ROWS, g)
        concurrent, sliced = node_modes(nodes)
        facts = NodeFacts(
            largest_island=np.fromiter(map(_largest_island_of, nodes), dtype=np.float64, count=n),
            usage_index=np.arange(n),
            concurrent=concurrent,
            sliced=sliced,
            columns=np.ascontiguousarray(joined.transpose(1, 0, 2)),
            slot=np.arange(n),
        )
    if basis is None:
        basis = share_basis(facts.columns, facts.slot, g, facts.largest_island, config=config, fits=fits)
    milli = pod.share_milli
    node_row = np.arange(n) if basis.slot is None else basis.slot  # each node's row in the basis

    def rows_of(per_gpu: FloatArray) -> FloatArray:  # the nodes' rows of a per-GPU array (`take`: 4x an index's speed)
        return per_gpu if basis.slot is None else np.take(per_gpu, node_row, axis=0)[:, :g]

    ok = rows_of(basis.allocated) + milli <= WHOLE_GPU_MILLI
    need = pod.gpu_memory_bytes
    if need is not None:
        ok &= rows_of(basis.memory_free) >= need
    fit = np.flatnonzero(ok)  # the GPUs the share fits on as node × g + position, node by node
    if not fit.size:  # fits nowhere: the other fields mean nothing
        return ShareArrays(np.full(n, -1, dtype=np.intp), *(np.zeros(n) for _ in range(4)))
    rows = fit // g
    positions = fit - rows * g
    at = node_row[rows] * basis.free.shape[1] + positions  # each one's place in the basis's per-GPU arrays
    packing = _class_packing(pod, nodes, fits, config=config, facts=facts, basis=basis, rows=rows, at=at)

    pod_slow, res_slow = np.ones(fit.size), np.ones(fit.size)
    residents = np.take(facts.columns[_RESIDENTS], facts.slot[rows] * facts.columns.shape[2] + positions)
    busy = np.flatnonzero(residents > 0)
    if busy.size:
        pod_slow[busy], res_slow[busy] = gpu_slowdowns(
            pod, nodes, (positions[busy], rows[busy]), usages=usages, facts=facts, predictors=predictors
        )
    interference = 0.5 / pod_slow + 0.5 / res_slow

    value = np.full(n * g, -np.inf)
    value[fit] = config.weight_packing * packing + config.weight_interference * interference
    best = value.reshape(n, g).argmax(axis=1)  # the first GPU position on ties
    picked = np.arange(n) * g + best
    entry = np.zeros(n * g, dtype=np.intp)
    entry[fit] = np.arange(fit.size)
    chosen = entry[picked]
    return ShareArrays(
        np.where(ok.reshape(-1)[picked], best, -1),
        packing[chosen],
        interference[chosen],
        pod_slow[chosen],
        res_slow[chosen],
    )


def _class_packing(
    pod: PodRequest,
    nodes: Sequence[NodeState],
    fits: Sequence[tuple[tuple[int, int], tuple[int, int]] | None],
    *,
    config: ScoringConfig,
    facts: NodeFacts,
    basis: ShareBasis,
    rows: NDArray[np.intp],
    at: NDArray[np.intp],
) -> FloatArray:
    """The packing of a share of `pod` on each GPU it fits on (node `rows[i]`, `at[i]` in the basis's per-GPU
    arrays), `gpuset.packing_of`'s arithmetic in its order, computed for one GPU of each class and gathered: GPUs
    of a node with the same free share and island drop (`ShareBasis.leader`), and, where the packing reads
    nothing of a node but its GPUs and topology (no CPU/memory task mix) and the caller knows which nodes those
    are equal on (`NodeFacts.shapes`), the same classes of all such nodes."""
    g = nodes[0].topology.gpu_count
    owner = rows if facts.shapes is None or config.resources is not None else _dense(facts.shapes)[rows]
    key = owner * g + np.take(basis.leader, at)
    seen = np.zeros(int(key.max()) + 1, dtype=np.bool_)
    seen[key] = True
    classes = np.flatnonzero(seen)
    class_of = np.empty(seen.size, dtype=np.intp)
    class_of[classes] = np.arange(classes.size)
    which = class_of[key]  # each GPU's class
    one = np.empty(classes.size, dtype=np.intp)
    one[which] = np.arange(key.size)  # a GPU of each class (any: a class's GPUs read the same values)
    rows, at = rows[one], at[one]
    node_row = rows if basis.slot is None else basis.slot[rows]
    milli = pod.share_milli
    after = _after(basis, milli=milli, nodes=node_row, at=at)
    if config.resources is None:  # GPU-only: no node has CPU/memory fit indices (`scoring._fit` is not called)
        uses_fit = np.zeros(rows.size, dtype=np.bool_)
        after_weights = None
    else:
        uses_fit = np.array([f is not None for f in fits], dtype=np.bool_)[rows]
        after_weights = _weights(config, [f[1] if f is not None else None for f in fits])
    frag_after = _fragmentation(
        after,
        facts.largest_island[rows],
        config=config,
        weights=None if after_weights is None else after_weights[rows],
        uses_fit=uses_fit,
    )
    delta = frag_after - basis.fragmentation[node_row]
    left_ratio = after.total / max(1, WHOLE_GPU_MILLI * g)
    penalty = _balance_penalties(nodes, fits, after.total, rows, gpu_count=g, config=config)
    packing = _packing(delta, left_ratio, penalty, config)
    gathered: FloatArray = packing[which]
    return gathered


def _dense(ids: NDArray[np.int64]) -> NDArray[np.int64]:
    """`ids` renumbered 0, 1, … in their order (equal ids equal), so that tables over them have as many rows as
    there are ids, not as the largest id."""
    top = int(ids.max()) + 1 if ids.size else 0
    if top <= ids.size:
        return ids
    seen = np.zeros(top, dtype=np.bool_)
    seen[ids] = True
    dense: NDArray[np.int64] = (np.cumsum(seen) - 1)[ids]
    return dense
