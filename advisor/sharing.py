"""Physical priors of co-location interference, one per way a GPU is shared: right before anything is learned.

How much two processes on one GPU slow each other down depends first on *how* the GPU is shared (DESIGN §11, the
colocations CSV's `sharing` column):

- ``time-slicing`` (the default compute mode, several CUDA contexts): the contexts take turns. NVIDIA's documentation
  of time-slicing (the GPU operator's "time-slicing GPUs in Kubernetes", the CUDA MPS guide's account of what MPS
  avoids) says the GPU runs one context at a time: a context keeps the GPU until its time slice expires or it has no
  more work, and a context with work waits for the holder's turn to end; every change of turn saves and restores a
  context. `turn_taking` builds each side's normalised throughput from that alone, from each side's solo duty cycle
  ``u`` (its SM utilisation: the share of its step ``T`` the GPU is busy with it, so ``b = u·T`` seconds of GPU work
  per step) and its granularity (the step: a training step synchronises with the GPU once per step, e.g. reading its
  loss, so each step asks for the GPU anew). Per step, side ``i`` waits

      w_i = q_j · (max(0, turn_j − g_i) + c) + (1 − q_j) · h_j · (turn_j / 2 + c)  +  e_i · r_j · (turn_j + 2c)

  The first two terms are the wait when its step's work arrives. If the other had work when this side last gave up
  the GPU (``q_j``), the other took the GPU then and holds it for ``turn_j = min(τ, b_j)`` (a turn ends at the
  slice or when the holder's step's work is done), of which this side's CPU gap ``g_i = T_i − b_i`` has passed;
  else the other may have begun a turn during the gap (``h_j``, its share of wall time on the GPU), half of it left
  on average. The third: at each expiry of its own slice, ``e_i = max(0, b_i/τ − 1)`` per step, the other, if it
  has work (``r_j``), gets a whole turn, with a switch there and back. Whether the other has work at such a moment
  is not its time-average share ``p_j`` of wall time with work pending (its waits included): the moments are tied
  to the turns, so ``q_j`` and ``r_j`` add the chance that its CPU gap ended during the elapsed turn or slice
  (``_pending_after``) — without that, a side with a gap shorter than a slice would be counted idle at the slice's
  end, and the two sides' GPU time could add up to more than the GPU has. The side's speed is
  ``T_i / (T_i + w_i)``; ``p`` and ``h`` depend on the waits, so the pair is solved as a fixed point. What comes
  out: two saturating contexts get about 0.48 each (``1 / (2 + 2c/τ)``); two at u = 0.9 about 0.54; a light
  process with short steps (1.2 ms, u = 0.12) next to a heavy one (10 ms, u = 0.9) 0.55, the heavy one 0.92 (the
  light one waits out the heavy one's slices, long against its own step — the SM-utilisation sum of ~1 says nothing
  about that); with 100 ms steps the same light process keeps 0.91 (a 2 ms slice is short against its step) and
  the heavy one 0.83 (it now waits the light one's longer turns). The two sides' GPU time never exceeds the GPU's.
  ``τ`` = 2 ms (NVIDIA documents the time slice only as a setting, ``nvidia-smi compute-policy --set-timeslice``;
  2 ms is the order reported for the default), ``c`` = 50 µs (saving and restoring a context's SM state, tens of
  MB on a recent data-centre GPU, at memory speed, plus the scheduler). A side whose step is unknown (no throughput
  or batch size) is taken to step every ``DEFAULT_STEP_SECONDS``.
- ``mps`` (an MPS server; kernels of both run at once): contention for SM time, ``min(1, 1 / (u_self + u_other))``
  — the utilisation-sum picture the advisor has always used (`util_sum_prior`).
- ``mig`` (each on its own MIG instance): compute and memory slices are isolated; what is shared is memory bandwidth
  beyond the instances' own and the board's power, ``min(1, 1 / (b_self + b_other)) / (1 + POWER_COST × u_other)``
  with ``b`` the memory-bandwidth utilisation (a missing one counts as 0: nothing says it is shared).
- unknown (empty): the utilisation sum, as for data sets that do not say (Gavel's pairs: its runtime can start an
  MPS daemon, `--use_mps`, off by default, and the published throughputs do not record which was used).

A missing SM utilisation counts as 1.0 (assume the GPU is saturated), as in the utilisation-sum heuristic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from advisor.features import FloatArray, SideColumns
from collector.sharing import SOURCE_LABEL, SOURCE_SNAPSHOT, decide_sharing
from profiler.csv_formats import SHARING_MODES

TIME_SLICING, MPS, MIG = SHARING_MODES
UNKNOWN = ""
TIME_SLICE_SECONDS = 2e-3
CONTEXT_SWITCH_SECONDS = 50e-6
# A training step of a job whose step time is unknown (a typical step of a mid-sized model on one GPU).
DEFAULT_STEP_SECONDS = 0.01
# The fixed point of `turn_taking` converges geometrically: 20 rounds agree with 400 to 1e-15 over a grid of duty
# cycles 0..1 and steps of 0.2 ms to 1 s.
_FIXED_POINT_ITERATIONS = 25
# Guards of `_turn_taking`'s divisions and of its 0/1 test of "has GPU work" (seconds; a step's work is far above
# 1e-12 s, its gap is 0 only for a saturating side).
_TINY = 1e-12
_HUGE = 1e12
POWER_COST = 0.03
DEFAULT_UTIL_RATIO = 1.0
# Modes in which kernels of both sides run at once (the utilisation-sum picture); "" (unknown) is read so too.
CONCURRENT_MODES = (MPS, UNKNOWN)
# Node labels of NVIDIA's GPU operator that say how a node's GPUs are shared.
SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
# Which source decided a node's sharing mode (`node_sharing`; `/v1/score`'s `models.sharing` names it): the two of
# `collector.sharing.decide_sharing`, or neither said and the default compute mode is assumed.
SOURCE_ASSUMED = "assumed"


def node_sharing(
    labels: Mapping[str, str] | None, gpu_modes: Iterable[str] = (), has_mig_devices: bool = False
) -> tuple[str, str]:
    """How a node's GPUs are shared between pods, and which source said so (`SOURCE_SNAPSHOT`, `SOURCE_LABEL`,
    `SOURCE_ASSUMED`). `gpu_modes` are the `sharing` of its snapshot's GPUs (the collector's reading of compute mode,
    MIG mode and MPS clients; "" where a GPU could not tell or the collector is older than the field).

    1. The snapshot's positive facts: a GPU in MIG mode (or MIG devices) means ``mig``; a GPU with MPS clients or an
       MPS control daemon in sight means ``mps`` — whatever a label says.
    2. The `nvidia.com/mig.strategy` / `nvidia.com/gpu.sharing-strategy` labels of NVIDIA's GPU operator.
    3. The snapshot's default compute mode: ``time-slicing``. It ranks below a label because it is read from an
       absence: MPS clients are listed only while they run and the control daemon's pipe is often out of the
       collector's sight, so an idle MPS GPU in the default compute mode looks time-sliced.
    4. Otherwise the default compute mode is assumed (MPS and MIG both need to be set up on purpose): contexts on one
       GPU take turns, ``time-slicing``.

    1–3 are `collector.sharing.decide_sharing`, which the profiler's controller records a pair's mode with too."""
    labels = labels or {}
    read = {sharing_mode(m) for m in gpu_modes} | ({MIG} if has_mig_devices else set())
    if labels.get(MIG_STRATEGY_LABEL, "none") not in ("", "none"):
        labelled = MIG
    else:
        labelled = sharing_mode(labels.get(SHARING_STRATEGY_LABEL, ""))
    mode, source = decide_sharing(read, labelled)
    if mode:
        return mode, source
    return TIME_SLICING, SOURCE_ASSUMED


def sharing_mode(value: object) -> str:
    """A `sharing` cell or label as one of `SHARING_MODES`, or "" (unknown) for anything else."""
    text = str(value or "").strip().lower().replace("_", "-")
    if text in ("time-sliced", "timeslicing", "time-slicing", "timeslice"):
        return TIME_SLICING
    return text if text in SHARING_MODES else UNKNOWN


def _sm(side: SideColumns) -> FloatArray:
    return np.nan_to_num(side.sm_util, nan=DEFAULT_UTIL_RATIO)


def util_sum_prior(this: SideColumns, other: SideColumns) -> FloatArray:
    """``1 if u_a + u_b <= 1 else 1 / (u_a + u_b)`` of the SM utilisations, a missing one counting as 1.0."""
    result: FloatArray = np.minimum(1.0, 1.0 / np.maximum(_sm(this) + _sm(other), 1e-9))
    return result


def step_seconds(side: SideColumns) -> FloatArray:
    """Each row's solo step time, batch size over samples per second; `DEFAULT_STEP_SECONDS` where either is
    missing or not positive."""
    batch = np.asarray(side.batch_size, dtype=np.float64)
    rate = np.asarray(side.solo_throughput, dtype=np.float64)
    known = np.isfinite(batch) & np.isfinite(rate) & (batch > 0) & (rate > 0)
    result: FloatArray = np.where(known, batch / np.where(known, rate, 1.0), DEFAULT_STEP_SECONDS)
    return result


def turn_taking(
    util_a: FloatArray, step_a: FloatArray, util_b: FloatArray, step_b: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Both sides' normalised throughputs when their contexts take turns on one GPU (the module doc's time-slicing
    model), from solo duty cycles (ratios 0..1) and solo step times (seconds), row by row."""
    util_a, util_b = np.clip(util_a, 0.0, 1.0), np.clip(util_b, 0.0, 1.0)
    speed_a, speed_b = _turn_taking(
        util_a * step_a, step_a, util_b * step_b, step_b, maximum=np.maximum, minimum=np.minimum
    )
    return np.asarray(speed_a, dtype=np.float64), np.asarray(speed_b, dtype=np.float64)


def turn_taking_one(util_a: float, step_a: float, util_b: float, step_b: float) -> tuple[float, float]:
    """`turn_taking` of one pair in plain floats: the same model, for the scorer's per-GPU questions, where numpy's
    per-call cost on one-element arrays would be most of the time."""
    util_a, util_b = min(1.0, max(0.0, util_a)), min(1.0, max(0.0, util_b))
    speed_a, speed_b = _turn_taking(util_a * step_a, step_a, util_b * step_b, step_b, maximum=max, minimum=min)
    return float(speed_a), float(speed_b)


def _turn_taking(
    busy_a: Any, step_a: Any, busy_b: Any, step_b: Any, *, maximum: Callable[..., Any], minimum: Callable[..., Any]
) -> tuple[Any, Any]:
    """The fixed point of the module doc's waits, in operators that floats and numpy arrays share (`maximum` and
    `minimum` are numpy's or the builtins), so one definition serves both `turn_taking` and `turn_taking_one`."""
    gap_a, gap_b = step_a - busy_a, step_b - busy_b
    turn_a, turn_b = minimum(TIME_SLICE_SECONDS, busy_a), minimum(TIME_SLICE_SECONDS, busy_b)
    expiries_a = maximum(0.0, busy_a / TIME_SLICE_SECONDS - 1.0)
    expiries_b = maximum(0.0, busy_b / TIME_SLICE_SECONDS - 1.0)
    # 1 for a side with GPU work, 0 for one without: it never asks for the GPU, so never waits at a step's start.
    asks_a, asks_b = minimum(1.0, busy_a * _HUGE), minimum(1.0, busy_b * _HUGE)
    c = CONTEXT_SWITCH_SECONDS

    def still_idle(gap: Any, elapsed: Any) -> Any:
        # Whether a side has work `elapsed` seconds after the other took the GPU: it had work then (its time-average
        # share `pending`), or its CPU gap ended meanwhile (surely if the gap is shorter, else with chance
        # elapsed / gap): pending after = 1 - (1 - pending) × this. A side without a gap is always pending.
        return minimum(1.0, maximum(0.0, 1.0 - elapsed / maximum(gap, _TINY)))

    # What the rounds below read that no round changes, computed once (the same operations on the same values as
    # computing them in every round: the same numbers).
    idle_a, idle_b = still_idle(gap_a, turn_b), still_idle(gap_b, turn_a)
    idle_a_slice, idle_b_slice = still_idle(gap_a, TIME_SLICE_SECONDS), still_idle(gap_b, TIME_SLICE_SECONDS)
    behind_a, behind_b = maximum(0.0, turn_b - gap_a) + c, maximum(0.0, turn_a - gap_b) + c
    half_a, half_b = turn_b / 2 + c, turn_a / 2 + c
    expiring_a, expiring_b = expiries_a * asks_b, expiries_b * asks_a
    round_trip_a, round_trip_b = turn_b + 2 * c, turn_a + 2 * c
    wait_a, wait_b = busy_a * 0.0, busy_b * 0.0
    for _ in range(_FIXED_POINT_ITERATIONS):
        cycle_a, cycle_b = step_a + wait_a, step_b + wait_b
        pending_a, pending_b = (busy_a + wait_a) / cycle_a, (busy_b + wait_b) / cycle_b
        holding_a, holding_b = busy_a / cycle_a, busy_b / cycle_b
        took_a = asks_a * (1.0 - (1.0 - pending_a) * idle_a)
        took_b = asks_b * (1.0 - (1.0 - pending_b) * idle_b)
        wait_a = (
            asks_a * (took_b * behind_a + (1.0 - took_b) * holding_b * half_a)
            + expiring_a * (1.0 - (1.0 - pending_b) * idle_b_slice) * round_trip_a
        )
        wait_b = (
            asks_b * (took_a * behind_b + (1.0 - took_a) * holding_a * half_b)
            + expiring_b * (1.0 - (1.0 - pending_a) * idle_a_slice) * round_trip_b
        )
    return step_a / (step_a + wait_a), step_b / (step_b + wait_b)


def time_slicing_prior(this: SideColumns, other: SideColumns) -> FloatArray:
    """`this` side's normalised throughput when its context takes turns with `other`'s (see the module doc)."""
    return turn_taking(_sm(this), step_seconds(this), _sm(other), step_seconds(other))[0]


def mig_prior(this: SideColumns, other: SideColumns) -> FloatArray:
    """`this` side's normalised throughput on its own MIG instance beside `other`'s (see the module doc)."""
    bandwidth = np.nan_to_num(this.mem_bw_util, nan=0.0) + np.nan_to_num(other.mem_bw_util, nan=0.0)
    result: FloatArray = np.minimum(1.0, 1.0 / np.maximum(bandwidth, 1e-9)) / (1.0 + POWER_COST * _sm(other))
    return result


def sharing_prior(this: SideColumns, other: SideColumns, modes: Sequence[str]) -> FloatArray:
    """`this` side's normalised throughput next to `other`, row by row under each row's sharing mode."""
    codes = np.asarray([sharing_mode(m) for m in modes], dtype=object)
    result = util_sum_prior(this, other)
    for mode, prior in ((TIME_SLICING, time_slicing_prior), (MIG, mig_prior)):
        rows = codes == mode
        if rows.any():
            result = np.where(rows, prior(this, other), result)
    return result


def describe_sharing(modes: Iterable[tuple[str, str]]) -> str:
    """What a score took of how the scored nodes' GPUs are shared, and from where (`node_sharing`'s sources), e.g.
    ``"time-slicing on 3 nodes (assumed: default compute mode, no sharing-strategy label or snapshot reading);
    mps on 1 node (snapshot)"``."""
    counts = Counter(modes)
    parts = []
    for (mode, source), n in sorted(counts.items()):
        where = f"on {n} node{'s' if n != 1 else ''}"
        if not mode:
            parts.append(f"unknown {where} (interference as trained)")
        elif source == SOURCE_ASSUMED:
            parts.append(
                f"{mode} {where} (assumed: default compute mode, no {SHARING_STRATEGY_LABEL} label or snapshot reading)"
            )
        elif source == SOURCE_LABEL:
            parts.append(f"{mode} {where} (node label)")
        elif source == SOURCE_SNAPSHOT:
            parts.append(f"{mode} {where} (snapshot: the collector's reading of the GPUs)")
        else:
            parts.append(f"{mode} {where} ({source})")
    return "; ".join(parts)
