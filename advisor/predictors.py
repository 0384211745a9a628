"""What the scorer asks of the learned models, and the documented heuristics it falls back to.

The scorer (`advisor.placement.scoring`) never imports a model: it takes a `Predictors` bundle whose members satisfy the
protocols below. The service builds the bundle from the promoted models of the registry; wherever a model is missing
(or has no answer for a workload) the heuristic members answer instead, and the scorer says so in every `reason`.

Heuristics (what the advisor does without a model):

* GPU speed (heterogeneity, `SpecSpeed`): the data-sheet prior `prior_speed_ratio`, a weighted geometric mean of the
  GPU's dense FP16 tensor throughput and memory bandwidth relative to a V100 (`advisor.gpus.gpu_spec`), since
  training steps are partly compute- and partly memory-bound. The weight of compute is the workload's
  compute-boundness when its profile says (SM utilisation over SM plus memory-bandwidth utilisation), else 1/2
  (H100 ≈ 5.4, A100-40GB ≈ 2.1, T4 ≈ 0.43). A GPU model not in the table is *unknown*: `speed_of` answers None and
  says so; for ranking alone (`relative_speed`) it counts as the reference, and the reason names it unknown.
  With no JCT estimate, the scorer compares nodes by `slowdown / relative speed`.
* Interference (`HeuristicInterference`): sharing a GPU is modelled as contention for two resources, SM time and
  memory bandwidth. The pod's expected use is its profile when known, else its GPU share (`gpu_milli / 1000`; 1 for a
  whole GPU) for SM and 0.6 × that for memory bandwidth (training kernels are usually compute-bound). Both sides'
  slowdown is `max(1, Σ SM demand, Σ memory-bandwidth demand)` (the worse of the two over-subscriptions), times a
  5 % context-switch cost per process already on the GPU.
  That is the picture of kernels running at once (MPS, or a GPU whose sharing is unknown). On a time-sliced GPU
  (the default compute mode) the contexts take turns instead (`advisor.sharing.turn_taking`): each side waits out
  the others' turns, the residents together counting as one context whose duty cycle is the sum of theirs (at most
  1), every side stepping every `DEFAULT_STEP_SECONDS` (a pod's step time is not known here), whatever the
  utilisations sum to (`turn_taking_slowdowns`).
* JCT (`HeuristicJct`): no estimate without a model (returns None); the scorer then ranks by relative speed only.
  `/v1/predict/jct` with the job's requested `steps` and no history of it estimates from physics instead: the steps
  over the workload's single-GPU steps/s on that GPU (`SpeedPredictor.steps_per_second`: its profile there, else its
  profile elsewhere times its speed ratio), over the data-parallel speed-up of its GPU count
  (`data_parallel_speedup`: each doubling keeps `SCALING_EFFICIENCY_PER_DOUBLING` of the per-GPU throughput).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from advisor.gpus import gpu_spec
from advisor.sharing import DEFAULT_STEP_SECONDS, TIME_SLICING, turn_taking, turn_taking_one

HEURISTIC = "heuristic"
DATA_SHEETS = "data sheets"
DEFAULT_COMPUTE_SHARE = 0.5

_CONTEXT_SWITCH_COST_RATIO = 0.05
# Data-parallel training: the share of per-GPU throughput each doubling of the GPU count keeps (gradient exchange
# grows with the count). 0.9 is the median over Sia's measured placements (7 applications on T4, V100, A100, RTX
# GPUs, 2-16 GPUs, each against its 1-GPU throughput at the same per-GPU batch; docs/models.md).
SCALING_EFFICIENCY_PER_DOUBLING = 0.9
_DEFAULT_BW_PER_SM_RATIO = 0.6


@dataclass(frozen=True, slots=True)
class UsageProfile:
    """Expected use of one GPU by one process/pod: SM time and memory bandwidth, ratios 0..1."""

    sm_utilization_ratio: float
    memory_bandwidth_utilization_ratio: float


class ResidentLike(Protocol):
    """What an interference predictor reads of a process already on the GPU (see `advisor.placement.types.Resident`)."""

    @property
    def workload(self) -> str | None: ...
    @property
    def sm_utilization_ratio(self) -> float: ...
    @property
    def memory_bandwidth_utilization_ratio(self) -> float: ...


class SpeedPredictor(Protocol):
    """Relative training speed of a GPU model (V100 = 1.0)."""

    name: str

    def relative_speed(self, gpu_model: str) -> float:
        """The data-sheet prior for ranking (an unknown model counts as the reference: see `speed_of`)."""
        ...

    def speed_of(self, workload: str | None, gpu_model: str, gpu_count: int) -> tuple[float | None, str]:
        """How fast `workload` runs on `gpu_model` relative to the reference GPU, and what answered (None: unknown)."""
        ...

    def steps_per_second(self, workload: str | None, gpu_model: str) -> tuple[float | None, str]:
        """`workload`'s training steps per second on one `gpu_model` (at its profiled batch size), and what says so;
        None (and why) without a profile of it or for an unknown GPU model."""
        ...


class InterferencePredictor(Protocol):
    """Slowdowns (≥ 1, time multipliers) when a pod joins the residents of one GPU."""

    name: str

    def slowdowns(
        self,
        gpu_model: str,
        workload: str | None,
        usage: UsageProfile,
        residents: Sequence[ResidentLike],
        *,
        sharing: str = "",
    ) -> tuple[float, float]:
        """Return (the pod's slowdown, the worst slowdown among the residents) on a GPU shared the `sharing` way
        (`advisor.sharing`: "time-slicing", "mps", "mig"; "" unknown)."""
        ...


class JctPredictor(Protocol):
    """Predicted completion time of a job, or None when there is no basis for one."""

    name: str

    def jct_seconds(self, workload: str | None, gpu_model: str, gpu_count: int) -> float | None: ...


class UsagePredictor(Protocol):
    """Expected per-GPU use of a workload (from its profiles), or None when it was never profiled."""

    name: str

    def usage(self, workload: str | None, gpu_model: str) -> UsageProfile | None: ...


_SPEED_CACHE_ENTRIES = 1024


def compute_share(usage: UsageProfile | None) -> float:
    """How compute-bound a workload is, 0..1: SM over SM plus memory-bandwidth utilisation of its profile, else 1/2."""
    if usage is None:
        return DEFAULT_COMPUTE_SHARE
    total = usage.sm_utilization_ratio + usage.memory_bandwidth_utilization_ratio
    return usage.sm_utilization_ratio / total if total > 0 else DEFAULT_COMPUTE_SHARE


def prior_speed_ratio(gpu_model: str, reference: str, share: float = DEFAULT_COMPUTE_SHARE) -> float | None:
    """Data-sheet speed of `gpu_model` over `reference` for a workload whose time is `share` compute (FP16 tensor
    throughput) and ``1 - share`` memory traffic (bandwidth); None when either GPU model is unknown."""
    spec, ref = gpu_spec(gpu_model), gpu_spec(reference)
    if not (spec.known and ref.known):
        return None
    compute = spec.fp16_tflops / ref.fp16_tflops
    bandwidth = spec.memory_bandwidth_bytes_per_s / ref.memory_bandwidth_bytes_per_s
    return float(compute**share * bandwidth ** (1.0 - share))


def unknown_gpu_text(gpu_model: str) -> str:
    """The reason given wherever a GPU model is not in the data-sheet table."""
    return f"unknown GPU model {gpu_model!r} (not in the data-sheet table, advisor.gpus)"


class SpecSpeed:
    """Relative speed from data-sheet numbers (see the module docstring)."""

    name = HEURISTIC

    def __init__(self, reference_model: str = "v100") -> None:
        self._reference = reference_model
        self._cache: dict[str, float] = {}

    def relative_speed(self, gpu_model: str) -> float:
        speed = self._cache.get(gpu_model)
        if speed is None:
            speed = prior_speed_ratio(gpu_model, self._reference) if gpu_model else None
            speed = 1.0 if speed is None else speed
            if len(self._cache) < _SPEED_CACHE_ENTRIES:  # model names come from requests: keep the cache bounded
                self._cache[gpu_model] = speed
        return speed

    def speed_of(self, workload: str | None, gpu_model: str, gpu_count: int) -> tuple[float | None, str]:
        if not gpu_spec(gpu_model).known:
            return None, unknown_gpu_text(gpu_model)
        return self.relative_speed(gpu_model), DATA_SHEETS

    def steps_per_second(self, workload: str | None, gpu_model: str) -> tuple[float | None, str]:
        if not gpu_spec(gpu_model).known:
            return None, unknown_gpu_text(gpu_model)
        return None, "data sheets alone give no throughput: no profile of the workload is served"


class HeuristicInterference:
    """SM / memory-bandwidth over-subscription model (see the module docstring)."""

    name = HEURISTIC
    context_switch_cost_ratio = _CONTEXT_SWITCH_COST_RATIO  # read by the vectorised scorer (placement.columnar)

    def slowdowns(
        self,
        gpu_model: str,
        workload: str | None,
        usage: UsageProfile,
        residents: Sequence[ResidentLike],
        *,
        sharing: str = "",
    ) -> tuple[float, float]:
        if not residents:
            return 1.0, 1.0
        if sharing == TIME_SLICING:
            return turn_taking_slowdowns(usage.sm_utilization_ratio, [r.sm_utilization_ratio for r in residents])
        sm = usage.sm_utilization_ratio
        bw = usage.memory_bandwidth_utilization_ratio
        for r in residents:
            sm += r.sm_utilization_ratio
            bw += r.memory_bandwidth_utilization_ratio
        contention = max(1.0, sm, bw) * (1.0 + _CONTEXT_SWITCH_COST_RATIO * len(residents))
        return contention, contention


class HeuristicJct:
    """No model, no estimate: the scorer ranks by relative GPU speed instead."""

    name = HEURISTIC

    def jct_seconds(self, workload: str | None, gpu_model: str, gpu_count: int) -> float | None:
        return None


class HeuristicUsage:
    """No profile: nothing known about the workload's use; the scorer derives it from the GPU request."""

    name = HEURISTIC

    def usage(self, workload: str | None, gpu_model: str) -> UsageProfile | None:
        return None


def turn_taking_slowdowns(pod_sm: float, resident_sm: Sequence[float]) -> tuple[float, float]:
    """(the pod's slowdown, the worst resident's) when the pod's context takes turns with the residents' on a
    time-sliced GPU (`advisor.sharing.turn_taking`): each side against all the others as one context."""
    pod, residents = round(pod_sm, 2), sorted(round(r, 2) for r in resident_sm)
    key = _turn_key(pod, residents)
    known = _TURNS.find_one(key) if key is not None else None
    if known is not None:
        return known
    total = pod + _residents_sum(residents)
    step = DEFAULT_STEP_SECONDS
    speed = turn_taking_one(pod, step, min(1.0, total - pod), step)[0]
    slowest = min(turn_taking_one(r, step, min(1.0, total - r), step)[0] for r in residents)
    found = (1.0 / speed, 1.0 / slowest)
    if key is not None:
        _TURNS.keep([key], np.array([found]))
    return found


def turn_taking_slowdowns_of(
    pod_sm: NDArray[np.float64], resident_sm: NDArray[np.float64], counts: NDArray[np.intp]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """`turn_taking_slowdowns` for many GPUs at once: GPU i has the pod's `pod_sm[i]` and the residents'
    `resident_sm[:counts[i], i]` (rows past a GPU's count are ignored; every GPU has at least one resident). The
    same numbers bit for bit, with no Python step per GPU or per distinct utilisation: utilisations rounded to whole
    percent as Python's `round` does (`_percents`), each GPU's residents sorted as integers, one integer key per GPU
    (`_turn_key`'s). A pod of 0..100 % is answered from its resident set's grid (`_TurnGrid`: every pod percent of
    a set solved once the set has met `_GRID_AFTER_MISSES` pod percents, so that a new share size beside residents
    seen before solves nothing);
    other GPUs' keys are looked up in the one memo together and the keys it lacks solved together (`_solve_keys`).
    A GPU whose key does not fit 63 bits (a utilisation that is NaN or outside 0..40.94, more than four residents)
    is asked one at a time."""
    m = pod_sm.size
    width = resident_sm.shape[0]
    if not m:
        return np.ones(0), np.ones(0)
    padding = np.arange(width)[:, None] >= counts[None, :]
    percents = _percents(np.vstack([pod_sm[None, :], resident_sm]))
    percents[1:][padding] = _NO_RESIDENT
    keyed = (percents >= 0).all(axis=0) & (width + 1 <= _KEY_DIGITS)
    if not keyed.all():  # outside what a key holds: one GPU at a time
        pod_slow, res_slow = np.empty(m), np.empty(m)
        for i in np.flatnonzero(~keyed).tolist():
            pod_slow[i], res_slow[i] = turn_taking_slowdowns(float(pod_sm[i]), resident_sm[: counts[i], i].tolist())
        some = np.flatnonzero(keyed)
        if some.size:
            pod_slow[some], res_slow[some] = turn_taking_slowdowns_of(pod_sm[some], resident_sm[:, some], counts[some])
        return pod_slow, res_slow
    percents[1:] = np.sort(percents[1:], axis=0)  # the residents in `sorted` order, no resident after every one
    small, found = _SMALL_SETS.find(_pack(percents[1:]), percents[0])
    if found.any():
        pod_slow, res_slow = small[:, 0].copy(), small[:, 1].copy()
        others = np.flatnonzero(~found)
        if others.size:
            pod_slow[others], res_slow[others] = turn_taking_slowdowns_of(
                pod_sm[others], resident_sm[:, others], counts[others]
            )
        return pod_slow, res_slow
    pod_slow, res_slow = np.empty(m), np.empty(m)
    on_grid = np.flatnonzero(percents[0] < _GRID_PERCENTS)
    rest = np.flatnonzero(percents[0] >= _GRID_PERCENTS) if on_grid.size < m else on_grid[:0]
    if on_grid.size:
        answered, left = _from_grid(percents[:, on_grid])
        pod_slow[on_grid], res_slow[on_grid] = answered[:, 0], answered[:, 1]
        rest = np.sort(np.concatenate([rest, on_grid[left]]))
    if rest.size:
        pod_slow[rest], res_slow[rest] = _from_keys(percents[:, rest])
    return pod_slow, res_slow


def resident_set_keys(resident_sm: NDArray[np.float64], counts: NDArray[np.intp]) -> NDArray[np.int64]:
    """Each GPU's resident set as `turn_taking_slowdowns_of` keys its grid (GPU i has the residents'
    `resident_sm[:counts[i], i]`): their percents sorted and packed; -1 where the GPU has no resident or a key holds
    none of them (see `turn_taking_slowdowns_of`). A caller that keeps these per GPU asks
    `turn_taking_slowdowns_by_set` instead, and the residents' utilisations are not rounded on every call."""
    width = resident_sm.shape[0]
    if not counts.size or width + 1 > _KEY_DIGITS:
        return np.full(counts.size, -1, dtype=np.int64)
    percents = _percents(resident_sm)
    percents[np.arange(width)[:, None] >= counts[None, :]] = _NO_RESIDENT
    keyed = (percents >= 0).all(axis=0) & (counts > 0)
    return np.where(keyed, _pack(np.sort(percents, axis=0)), -1)


def turn_taking_slowdowns_by_set(
    pod_sm: NDArray[np.float64],
    set_keys: NDArray[np.int64],
    resident_sm: NDArray[np.float64],
    counts: NDArray[np.intp],
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """`turn_taking_slowdowns_of(pod_sm, resident_sm, counts)` where each GPU's `resident_set_keys` are known
    (`set_keys`): a GPU whose set has a grid is a gather by its pod percent; the rest go through
    `turn_taking_slowdowns_of` (which solves their sets' grids). The same numbers."""
    bits = pod_sm.view(np.int64)
    if bits.size and (bits == bits[0]).all():  # one pod use (the same bits) on every GPU: its percent once
        pods = np.full(pod_sm.size, _percents(pod_sm[None, :1])[0, 0])
    else:
        pods = _percents(pod_sm[None, :])[0]
    small, found = _SMALL_SETS.find(set_keys, pods)
    if found.all():
        return small[:, 0].copy(), small[:, 1].copy()
    on_grid = ~found & (set_keys >= 0) & (pods >= 0) & (pods < _GRID_PERCENTS)
    answers, in_grid = _GRID.find_keys(set_keys, np.where(on_grid, pods, 0), on_grid)
    answers[found] = small[found]
    found |= in_grid
    pod_slow, res_slow = answers[:, 0].copy(), answers[:, 1].copy()
    left = np.flatnonzero(~found)
    if left.size:
        pod_slow[left], res_slow[left] = turn_taking_slowdowns_of(pod_sm[left], resident_sm[:, left], counts[left])
    return pod_slow, res_slow


def _pack(percents: NDArray[np.int64]) -> NDArray[np.int64]:
    """`_turn_key` of each column of percents (`_NO_RESIDENT` rows left out), as int64."""
    packed = np.ones(percents.shape[1], dtype=np.int64)
    for digits in percents:
        packed = np.where(digits == _NO_RESIDENT, packed, (packed << _KEY_BITS) | digits)
    return packed


def _from_keys(percents: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The answers of GPUs given as percent columns (the pod's, then the residents' sorted) by their full keys in
    the memo (`_TURNS`), the missing keys solved together and kept."""
    keys, which = np.unique(_pack(percents), return_inverse=True)
    which = which.reshape(-1)
    first = np.empty(keys.size, dtype=np.intp)
    first[which] = np.arange(which.size)  # a GPU of each key (any: a key's GPUs have the same percents)
    answers, missing = _TURNS.find(keys.tolist())
    if missing.size:
        columns = percents[:, first[missing]]
        answers[missing] = _solve_keys(columns)
        _TURNS.keep(keys[missing].tolist(), answers[missing])
        on_grid = columns[0] < _GRID_PERCENTS
        _GRID.note_misses(_pack(columns[1:, on_grid]).tolist())  # each a pod percent its set had not met
    picked = answers[which]
    return picked[:, 0].copy(), picked[:, 1].copy()


def _from_grid(percents: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.intp]]:
    """The answers (GPU × 2) of GPUs whose pod percent is on the grid (0..100), given as percent columns, from their
    resident sets' grids (`_GRID`). A set without a grid that has missed `_GRID_AFTER_MISSES` pod percents in the
    memo of whole keys gets one now (`_solve_sets`, together with the others', at most `_GRID_SETS_PER_CALL` of them,
    the sets a call meets first): a set that lives on and meets many pod sizes is solved once, one that is replaced
    soon (a node's next snapshot) costs no more than its keys. Also the positions of the GPUs left unanswered: the
    caller asks the memo of whole keys for them."""
    pods = percents[0]
    sets, which = np.unique(_pack(percents[1:]), return_inverse=True)
    which = which.reshape(-1)
    answers, missing = _GRID.find(sets.tolist(), which, pods)
    if not missing.size:
        return answers, missing
    due = missing[_GRID.misses(sets[missing].tolist()) >= _GRID_AFTER_MISSES]
    solving = due[:_GRID_SETS_PER_CALL]
    if not solving.size:  # none due a grid yet: all key by key
        return answers, np.flatnonzero(np.isin(which, missing))
    first = np.empty(sets.size, dtype=np.intp)
    first[which] = np.arange(which.size)
    solved = _solve_sets(percents[1:, first[solving]])  # one column per set
    _GRID.keep(sets[solving].tolist(), solved)
    set_row = np.full(sets.size, -1, dtype=np.intp)
    set_row[solving] = np.arange(solving.size)
    row = set_row[which]
    fresh = np.flatnonzero(row >= 0)
    answers[fresh] = solved[row[fresh], pods[fresh]]
    unsolved = np.zeros(sets.size, dtype=np.bool_)
    unsolved[missing] = True
    unsolved[solving] = False
    return answers, np.flatnonzero(unsolved[which])


def _solve_sets(
    residents: NDArray[np.int64],
    side_speeds: Callable[[NDArray[np.complex128]], NDArray[np.float64]] | None = None,
) -> NDArray[np.float64]:
    """Resident sets' grids (set × pod percent × 2) for sets given as percent columns (ascending, `_NO_RESIDENT`
    for none): `_solve_keys` of each set's 101 keys, the same numbers, from the sides they are made of. A side's
    speed depends on its own utilisation and the others' (`turn_taking`, element by element), and the others' are
    `min(1, pod + residents' sum − own)`: over the 101 pod percents, the pod's side is a function of the residents'
    sum alone and a resident's of (its percent, the sum). So each distinct (side, sum) is one row of 101 speeds in
    `_SIDES`, shared by every set that has it and solved once; a grid is then gathers and a minimum. `side_speeds`:
    how the distinct sides' rows are found (`_SIDES.speeds`, the memo, unless given)."""
    present = residents != _NO_RESIDENT
    utilisation = np.where(present, residents / 100.0, 0.0)
    total = np.zeros(residents.shape[1])
    for row in utilisation:  # left to right, as `_solve_keys` adds them (an absent resident adds 0.0: no change)
        total = total + row
    # each side as (its percent, or `_POD_SIDE`; the residents' sum) in one complex number: neither part is NaN or
    # -0.0, so equal numbers are equal bits
    codes = np.vstack([np.full((1, residents.shape[1]), _POD_SIDE, dtype=np.int64), residents])
    sides = codes + 1j * np.broadcast_to(total, codes.shape)
    there = np.vstack([np.ones((1, residents.shape[1]), dtype=np.bool_), present])
    distinct, inverse = np.unique(sides[there], return_inverse=True)
    speeds = np.full((*codes.shape, _GRID_PERCENTS), np.inf)
    speeds[there] = (side_speeds or _SIDES.speeds)(distinct)[inverse.reshape(-1)]
    return np.stack([1.0 / speeds[0], 1.0 / speeds[1:].min(axis=0)], axis=-1)


def _side_speeds(sides: NDArray[np.complex128]) -> NDArray[np.float64]:
    """Each side's speed (side × pod percent) at every pod percent of the grid: the pod's (real part `_POD_SIDE`)
    or a resident's of that percent, beside residents whose utilisations sum to the imaginary part, as
    `_solve_keys` computes a key's sides (the pod's percent / 100 added to that sum, the side's own taken off)."""
    pods = np.arange(_GRID_PERCENTS, dtype=np.int64)[None, :] / 100.0
    total = pods + sides.imag[:, None]
    codes = sides.real[:, None]
    own = np.where(codes == _POD_SIDE, pods, codes.astype(np.int64) / 100.0)
    others = np.minimum(1.0, total - own)
    pairs, inverse = np.unique(own + 1j * others, return_inverse=True)  # as `_solve_keys` pairs them
    return _PAIRS.speeds(pairs)[inverse.reshape(own.shape)]


_KEY_BITS = 12
_KEY_DIGITS = 5
"""Percents an int64 key holds (`_turn_key`'s in 63 bits): the pod and four residents, the columns' most."""
_NO_RESIDENT = (1 << _KEY_BITS) - 1
"""The percent that stands for no resident (padding): above every percent a key holds."""
_HALF_WAY = 1e-6
"""How close to a half percent a utilisation × 100 must be for `_percents` to ask Python's `round` (far above the
rounding error of × 100 for utilisations below 41, far below any half-way distance that decides differently)."""


def _turn_key(pod: float, residents: Sequence[float]) -> int | None:
    """The memo key of rounded utilisations (`round(u, 2)`; residents sorted): a leading 1, then each one's percent in
    `_KEY_BITS` bits (a Python integer: any number of residents). None where a utilisation is outside what a key
    holds (NaN, negative or -0.0, 40.95 or more): such a GPU is solved without the memo."""
    key = 1
    for value in (pod, *residents):
        if not 0.0 <= value < (_NO_RESIDENT - 0.5) / 100.0 or math.copysign(1.0, value) < 0:
            return None
        key = (key << _KEY_BITS) | round(value * 100.0)
    return key


def _percents(values: NDArray[np.float64]) -> NDArray[np.int64]:
    """`round(round(u, 2) * 100)` of each utilisation (-1 where `_turn_key` would give no key): `numpy.rint` of
    u × 100 wherever that is not within `_HALF_WAY` of a half percent (there the product's rounding error cannot
    change which whole percent is nearest, and Python's `round(u, 2)` is the float nearest that percent / 100, as
    `percent / 100.0` is), Python's `round` at the rest."""
    scaled = values * 100.0
    usable = (values >= 0.0) & ~np.signbit(values) & (scaled < _NO_RESIDENT - 0.5)
    percents = np.where(usable, np.rint(scaled), -1.0)
    doubtful = np.flatnonzero(usable & (np.abs(scaled - np.floor(scaled) - 0.5) < _HALF_WAY))
    if doubtful.size:  # each distinct value once (a share's own utilisation is often one, on every GPU)
        distinct, inverse = np.unique(values.flat[doubtful], return_inverse=True)
        percents.flat[doubtful] = np.array([round(round(v, 2) * 100.0) for v in distinct.tolist()])[inverse]
    return percents.astype(np.int64)


def _residents_sum(residents: Sequence[float]) -> float:
    """The residents' utilisations added left to right (what `sum` did before Python 3.12; the array form adds the
    same way, so both give the same total on any Python)."""
    total = 0.0
    for r in residents:
        total += r
    return total


def _solve_keys(percents: NDArray[np.int64]) -> NDArray[np.float64]:
    """`turn_taking_slowdowns`' answers (key × 2) for keys given as percent columns (the pod's, then the residents'
    ascending, `_NO_RESIDENT` for none): every side of every key in one `turn_taking` over arrays (the same IEEE
    operations as `turn_taking_one` on floats)."""
    present = percents != _NO_RESIDENT
    utilisation = np.where(present, percents / 100.0, 0.0)  # = round(u, 2), as `_percents` says
    total = np.zeros(percents.shape[1])
    for row in utilisation[1:]:  # left to right, as `_residents_sum` (an absent resident adds 0.0: no change)
        total = total + row
    total = utilisation[0] + total
    sides = np.column_stack([utilisation[present], np.minimum(1.0, (total - utilisation)[present])])
    # A side's speed depends on its (own, others') utilisations alone: each distinct pair solved once. The pairs
    # as complex numbers (one sort): neither part is NaN or -0.0 (percents / 100 and a total less a part of it),
    # so equal numbers are equal bits.
    pairs, inverse = np.unique(sides.view(np.complex128).reshape(-1), return_inverse=True)
    speeds = np.full(percents.shape, np.inf)
    speeds[present] = _PAIRS.speeds(pairs)[inverse.reshape(-1)]
    return np.column_stack([1.0 / speeds[0], 1.0 / speeds[1:].min(axis=0)])


class _TurnPairs:
    """Speeds of (own, others') utilisation pairs (`turn_taking`'s first side, one element each): what every key and
    grid side is made of. Own utilisations are whole percents and the others' the percents' sums less one, at most
    1, so a cluster meets a few tens of thousands of pairs and soon knows nearly all of them: solving a key or a
    grid is then a lookup, not 25 rounds of the fixed point. The pairs as complex numbers, sorted (one
    `searchsorted` finds many), replaced whole when new ones are kept (readers hold the arrays they found);
    emptied when `limit` is reached (24 bytes a pair)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._pairs = np.zeros(0, dtype=np.complex128)
        self._speeds = np.zeros(0)

    def speeds(self, pairs: NDArray[np.complex128]) -> NDArray[np.float64]:
        """The speed of each of `pairs` (distinct, ascending: `numpy.unique`'s), those not kept solved and kept."""
        with self._lock:
            kept, speeds = self._pairs, self._speeds
        found = np.zeros(pairs.size, dtype=np.bool_)
        out = np.empty(pairs.size)
        if kept.size:
            at = np.minimum(np.searchsorted(kept, pairs), kept.size - 1)
            found = kept[at] == pairs
            out[found] = speeds[at[found]]
        missing = np.flatnonzero(~found)
        if missing.size:
            new = pairs[missing]
            if new.size <= _PAIRS_ONE_BY_ONE:  # the fixed point's ~1,000 array operations cost more than these
                step = DEFAULT_STEP_SECONDS
                solved = np.array([turn_taking_one(p.real, step, p.imag, step)[0] for p in new.tolist()])
            else:
                steps = np.full(new.size, DEFAULT_STEP_SECONDS)
                solved = turn_taking(new.real.copy(), steps, new.imag.copy(), steps)[0]
            out[missing] = solved
            with self._lock:
                kept, speeds = self._pairs, self._speeds
                if kept.size + new.size > self.limit:
                    kept, speeds = kept[:0], speeds[:0]
                where = np.searchsorted(kept, new)  # a pair kept meanwhile by another thread is kept twice: same speed
                self._pairs = np.insert(kept, where, new)
                self._speeds = np.insert(speeds, where, solved)
        return out


_PAIRS = _TurnPairs(65536)
_PAIRS_ONE_BY_ONE = 16
"""New pairs up to which `_TurnPairs` solves each in plain floats (`turn_taking_one`, the same operations: ~50 µs
a pair) rather than on arrays (~1 ms whatever their number)."""


class _TurnMemo:
    """Turn-taking answers by key (`_turn_key`), memoised on utilisations rounded to 1 % (finer than anything the
    model can tell apart): the fixed point costs more than the scorer's other arithmetic. A key's answer is a row of
    one array, found through a dict, so that many keys are looked up with one gather. Bounded: emptied when full (a
    cluster's keys come back at once). One lock: the service scores in several threads, and rows are reused once the
    memo is emptied, so a row is read under the lock it was found under."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._rows: dict[int, int] = {}
        self._answers = np.empty((limit, 2))
        self._used = 0

    def find_one(self, key: int) -> tuple[float, float] | None:
        with self._lock:
            row = self._rows.get(key)
            return None if row is None else (float(self._answers[row, 0]), float(self._answers[row, 1]))

    def find(self, keys: list[int]) -> tuple[NDArray[np.float64], NDArray[np.intp]]:
        """The answers of `keys` (key × 2; rows of keys not kept mean nothing) and the positions of those keys."""
        with self._lock:
            rows = np.fromiter(map(self._rows.get, keys, repeat(-1)), dtype=np.intp, count=len(keys))
            answers = self._answers[np.maximum(rows, 0)]
        return answers, np.flatnonzero(rows < 0)

    def keep(self, keys: list[int], answers: NDArray[np.float64]) -> None:
        """Keep each key's answer (a key kept meanwhile by another thread gets a new row: the old one is never
        reused before the memo is emptied)."""
        keys, answers = keys[: self.limit], answers[: self.limit]
        with self._lock:
            if self._used + len(keys) > self.limit:
                self._rows.clear()
                self._used = 0
            self._answers[self._used : self._used + len(keys)] = answers
            self._rows.update(zip(keys, range(self._used, self._used + len(keys)), strict=True))
            self._used += len(keys)


_TURNS = _TurnMemo(16384)


_GRID_PERCENTS = 101
"""Pod percents a resident set's grid holds: 0..100 %, every share's assumed use and a whole GPU's."""
_GRID_SETS_PER_CALL = 4096
"""New resident sets whose grids one call solves (the grid's bound; the rest of that call's sets go key by key)."""
_GRID_AFTER_MISSES = 2
"""Pod percents a resident set must have missed in the memo of whole keys before its grid is solved: a grid solves
101 keys (fewer where other sets share its sides, `_TurnSides`), so a set replaced soon (a node's next snapshot,
met once) is better solved key by key; at 10,000 nodes with half the candidates new every call, solving every set
met at once tripled the longest prioritize (bench/state_gc.py)."""
_POD_SIDE = -1
"""The code of the pod's side in `_solve_sets` (a resident's side is coded by its percent)."""


class _TurnGrid:
    """Turn-taking answers per resident set (the residents' percents, sorted, packed as `_turn_key` packs them) for
    every pod percent on the grid at once: a pod of a percent not seen before beside residents seen before (a new
    share size) is a lookup, not a fixed point per key. A set's grid is `_solve_sets`' (its 101 keys from the memo of
    sides), the same numbers as solving any one of them (each column of the fixed point is computed on its own).
    Bounded like
    `_TurnMemo` (101 × 2 × 8 bytes per set), one lock for the same reason."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._rows: dict[int, int] = {}
        self._answers = np.empty((limit, _GRID_PERCENTS, 2))
        self._used = 0
        self._misses: dict[int, int] = {}  # set → pod percents it missed in the memo of whole keys (no grid yet)
        # the kept sets sorted, and their rows: many GPUs' sets found by one `searchsorted`, no Python step per set
        self._sorted_sets = np.zeros(0, dtype=np.int64)
        self._sorted_rows = np.zeros(0, dtype=np.intp)

    def note_misses(self, sets: list[int]) -> None:
        """Count a missed pod percent for each of `sets` (repeats count again); emptied past 4 × `limit` sets."""
        with self._lock:
            misses = self._misses
            if len(misses) > 4 * self.limit:
                misses.clear()
            for key in sets:
                misses[key] = misses.get(key, 0) + 1

    def misses(self, sets: list[int]) -> NDArray[np.int64]:
        """The pod percents each of `sets` has missed so far."""
        with self._lock:
            return np.fromiter(map(self._misses.get, sets, repeat(0)), dtype=np.int64, count=len(sets))

    def find_keys(
        self, sets: NDArray[np.int64], pods: NDArray[np.int64], asked: NDArray[np.bool_]
    ) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        """The answers (GPU × 2) of GPUs of set `sets[i]` and pod percent `pods[i]` (0..100) where `asked`, and
        whether each was found (the rows of the others mean nothing)."""
        with self._lock:
            kept, rows = self._sorted_sets, self._sorted_rows
            if not kept.size:
                return np.empty((sets.size, 2)), np.zeros(sets.size, dtype=np.bool_)
            # each distinct set searched once (a call's GPUs hold few distinct sets: 91 among 3,569 GPUs of a 4-GPU
            # pod at 5,000 nodes), then the answers by one flat index into the (row × percent) pairs
            distinct, inverse = np.unique(sets, return_inverse=True)
            at = np.minimum(np.searchsorted(kept, distinct), kept.size - 1)[inverse.reshape(-1)]
            found = asked & (kept[at] == sets)
            flat = np.where(found, rows[at], 0) * _GRID_PERCENTS + pods
            answers = np.take(self._answers.reshape(-1, 2), flat, axis=0)
        return answers, found

    def find(
        self, sets: list[int], which: NDArray[np.intp], pods: NDArray[np.int64]
    ) -> tuple[NDArray[np.float64], NDArray[np.intp]]:
        """The answers (GPU × 2) of GPUs of set `sets[which[i]]` and pod percent `pods[i]` (rows of GPUs whose set
        is not kept mean nothing) and the positions in `sets` of the sets not kept."""
        with self._lock:
            rows = np.fromiter(map(self._rows.get, sets, repeat(-1)), dtype=np.intp, count=len(sets))
            answers = self._answers[np.maximum(rows, 0)[which], pods]
        return answers, np.flatnonzero(rows < 0)

    def keep(self, sets: list[int], answers: NDArray[np.float64]) -> None:
        """Keep each set's grid (`answers`: set × percent × 2); emptied first when full."""
        sets, answers = sets[: self.limit], answers[: self.limit]
        with self._lock:
            if self._used + len(sets) > self.limit:
                self._rows.clear()
                self._used = 0
            self._answers[self._used : self._used + len(sets)] = answers
            self._rows.update(zip(sets, range(self._used, self._used + len(sets)), strict=True))
            self._used += len(sets)
            kept = np.fromiter(self._rows, dtype=np.int64, count=len(self._rows))
            order = np.argsort(kept)
            self._sorted_sets = kept[order]
            self._sorted_rows = np.fromiter(self._rows.values(), dtype=np.intp, count=len(self._rows))[order]
            for key in sets:
                self._misses.pop(key, None)


_GRID = _TurnGrid(4096)


class _TurnSides:
    """Speeds of grid sides (`_solve_sets`): per distinct (side, residents' sum), one row of `_GRID_PERCENTS`
    speeds, found through a dict by the side's complex number. Cluster resident sets share sides (a percent beside
    the same sum), so a new set's grid mostly gathers rows solved before. Bounded like `_TurnMemo` (808 bytes a
    side), one lock for the same reason: rows are copied out under the lock they were found under."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._rows: dict[complex, int] = {}
        self._speeds = np.empty((limit, _GRID_PERCENTS))
        self._used = 0

    def speeds(self, sides: NDArray[np.complex128]) -> NDArray[np.float64]:
        """The rows of `sides` (distinct), those not kept solved (`_side_speeds`) and kept."""
        keys = sides.tolist()
        with self._lock:
            rows = np.fromiter(map(self._rows.get, keys, repeat(-1)), dtype=np.intp, count=len(keys))
            found = self._speeds[np.maximum(rows, 0)]
        missing = np.flatnonzero(rows < 0)
        if missing.size:
            found[missing] = _side_speeds(sides[missing])
            new = [keys[i] for i in missing[: self.limit].tolist()]
            with self._lock:
                if self._used + len(new) > self.limit:
                    self._rows.clear()
                    self._used = 0
                self._speeds[self._used : self._used + len(new)] = found[missing[: self.limit]]
                self._rows.update(zip(new, range(self._used, self._used + len(new)), strict=True))
                self._used += len(new)
        return found


_SIDES = _TurnSides(8192)


class _SmallSets:
    """Turn-taking answers of every resident set of one or two residents (each 0..100 %) at every pod percent
    0..100 (`_GRID_PERCENTS`): 5,252 sets' grids (8.5 MB), solved together by `prepare_turn_taking` before a
    service serves (its ~21,000 (own, others') pairs in one array fixed point), so that no request meets such a
    set for the first time: their answers are found from the set key's digits alone (no sort, no search). Sets of
    more residents, and every set before the table is built, go through the memos (`_GRID`, `_TURNS`). Built once
    per process, never changed after (readers need no lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: NDArray[np.float64] | None = None  # set × pod percent × 2, flattened to (set × percent) × 2
        self._pair_row = np.full((_GRID_PERCENTS, _GRID_PERCENTS), -1, dtype=np.intp)

    def build(self) -> None:
        with self._lock:
            if self._answers is not None:
                return
            one = np.arange(_GRID_PERCENTS)
            low, high = np.triu_indices(_GRID_PERCENTS)  # two residents, ascending as keys sort them
            residents = np.vstack(
                [np.concatenate([one, low]), np.concatenate([np.full(one.size, _NO_RESIDENT), high])]
            ).astype(np.int64)
            # the grids' own arithmetic, not their memo; a few hundred sets at a time (all at once: 117 MB of
            # temporaries), their pairs kept by `_PAIRS` so that each is solved once
            grids = np.concatenate(
                [
                    _solve_sets(residents[:, start : start + _SMALL_SETS_AT_ONCE], side_speeds=_side_speeds)
                    for start in range(0, residents.shape[1], _SMALL_SETS_AT_ONCE)
                ]
            )
            self._pair_row[low, high] = _GRID_PERCENTS + np.arange(low.size)
            self._answers = grids.reshape(-1, 2)

    def find(
        self, set_keys: NDArray[np.int64], pods: NDArray[np.int64]
    ) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        """The answers (GPU × 2) of GPUs of resident set `set_keys[i]` (`resident_set_keys`' packing; -1: none)
        and pod percent `pods[i]`, and whether each was in the table (the rows of the others mean nothing)."""
        answers = self._answers
        if answers is None:
            return np.empty((set_keys.size, 2)), np.zeros(set_keys.size, dtype=np.bool_)
        high = set_keys >> _KEY_BITS  # 1 for one resident, 1 << _KEY_BITS | low for two, more for more
        digit = set_keys & _NO_RESIDENT
        low = high - (1 << _KEY_BITS)
        one = (high == 1) & (digit < _GRID_PERCENTS)
        two = (low >= 0) & (low < _GRID_PERCENTS) & (digit < _GRID_PERCENTS)
        pair = np.clip(low, 0, _GRID_PERCENTS - 1) * _GRID_PERCENTS + np.minimum(digit, _GRID_PERCENTS - 1)
        row = np.where(one, digit, np.take(self._pair_row, pair))
        found = (one | two) & (row >= 0) & (pods >= 0) & (pods < _GRID_PERCENTS) & (set_keys >= 0)
        flat = np.where(found, row * _GRID_PERCENTS + pods, 0)
        return np.take(answers, flat, axis=0), found


_SMALL_SETS = _SmallSets()
_SMALL_SETS_AT_ONCE = 512


def prepare_turn_taking() -> None:
    """Solve the turn-taking of every set of one or two residents now (`_SmallSets`; ~0.2 s of CPU, once per
    process): what a service does before it serves, so that no prioritize call solves a fixed point for them."""
    _SMALL_SETS.build()


def data_parallel_speedup(gpu_count: int) -> float:
    """How many times one GPU's throughput `gpu_count` GPUs give a data-parallel job:
    ``n × SCALING_EFFICIENCY_PER_DOUBLING ** log2(n)`` (1 GPU: 1; 8: 5.8; 1,024: 358)."""
    if gpu_count < 1:
        raise ValueError(f"gpu_count: expected at least 1, got {gpu_count}")
    return float(gpu_count * SCALING_EFFICIENCY_PER_DOUBLING ** math.log2(gpu_count))


def default_usage(gpu_milli: int) -> UsageProfile:
    """The pod's assumed use without a profile: its share for SM (0 = a whole GPU), 0.6 × that for bandwidth."""
    sm = min(1.0, gpu_milli / 1000.0) if gpu_milli > 0 else 1.0
    return UsageProfile(sm_utilization_ratio=sm, memory_bandwidth_utilization_ratio=sm * _DEFAULT_BW_PER_SM_RATIO)


@dataclass(frozen=True, slots=True, eq=False)
class Predictors:
    """The bundle the scorer uses; `heuristic()` is the all-fallback bundle."""

    speed: SpeedPredictor
    interference: InterferencePredictor
    jct: JctPredictor
    usage: UsagePredictor

    @classmethod
    def heuristic(cls) -> Predictors:
        return cls(speed=SpecSpeed(), interference=HeuristicInterference(), jct=HeuristicJct(), usage=HeuristicUsage())

    def names(self) -> dict[str, str]:
        """Which predictor is served for each question ("heuristic" or a model version)."""
        return {
            "speed": self.speed.name,
            "interference": self.interference.name,
            "jct": self.jct.name,
            "usage": self.usage.name,
        }

    def answered(self, workload: str | None, gpu_models: Sequence[str], gpu_count: int) -> dict[str, str]:
        """Which model answered each question for this request's workload on these GPU models: `names` with the
        speed and JCT entries replaced by what actually answered (``"throughput v2"``, ``"data sheets"``,
        ``"heuristic: no JCT estimate"``, an unknown GPU model…), distinct answers joined by ``"; "``."""
        models = self.names()
        if not gpu_models:
            return models
        speeds = dict.fromkeys(self.speed.speed_of(workload, g, gpu_count)[1] for g in gpu_models)
        models["speed"] = "; ".join(speeds)
        jcts = [self.jct.jct_seconds(workload, g, gpu_count) for g in gpu_models]
        if self.jct.name != HEURISTIC and any(j is None for j in jcts):
            models["jct"] = f"{HEURISTIC}: no JCT estimate from {self.jct.name}, ranked by GPU speed"
        return models
