"""Physical priors of co-location interference, one per way a GPU is shared: right before anything is learned.

How much two processes on one GPU slow each other down depends first on *how* the GPU is shared (DESIGN §11, the
colocations CSV's `sharing` column):

- ``time-slicing`` (the default compute mode, several CUDA contexts): the contexts take turns. The GPU runs one
  context at a time; a context that has work waits for the other's turn whenever the other is busy. With ``u`` the
  solo SM utilisation (the share of time a process keeps the GPU busy alone, its duty cycle), a side waits one turn
  of the other for each of its own turns with probability ``u_other``, so its speed is ``1 / (1 + u_other + σ)``:
  two saturating processes get about half each, a light process next to a heavy one about half (its small kernels
  wait out the heavy one's slices: the SM-utilisation sum of ~1 says nothing about that), the heavy one ``1 / (1 +
  u_light + σ)``. ``σ`` is the cost of the switches themselves (saving and restoring a context at every turn),
  ``SWITCH_COST × min(1, u_self + u_other)``: it grows with how often turns change hands. 0.15 makes the heavy side
  lose about a fifth next to a 12 %-busy light one, as measured by hand on an H100 in its default compute mode (the
  issues 32 and 33: heavy pairs 0.45–0.57 each, light with heavy ≈ 0.5 and 0.8).
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
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from advisor.features import FloatArray, SideColumns
from collector.sharing import SOURCE_LABEL, SOURCE_SNAPSHOT, decide_sharing
from profiler.csv_formats import SHARING_MODES

TIME_SLICING, MPS, MIG = SHARING_MODES
UNKNOWN = ""
SWITCH_COST = 0.15
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


def time_slicing_prior(this: SideColumns, other: SideColumns) -> FloatArray:
    """`this` side's normalised throughput when its context takes turns with `other`'s (see the module doc)."""
    own, partner = _sm(this), _sm(other)
    switch = SWITCH_COST * np.minimum(1.0, own + partner)
    result: FloatArray = 1.0 / (1.0 + partner + switch)
    return result


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
