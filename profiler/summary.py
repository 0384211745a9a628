"""The summariser: a trial's progress stream and telemetry → steady-state throughput and utilisation.

Pure functions over plain data, shared by the controller and the local runner. Robust to what real runs do:
a warm-up (compilation, cache fill) that is dropped, stalls (checkpointing, a slow data loader) that are left
out of the rate rather than averaged in, restarts of the counters, and a crash part-way (whatever was reported
before the crash still counts, provided enough of it is steady-state).

A pair (two workloads sharing one GPU) is timed only over its overlap: the window in which both sides were past
their warm-ups at the same time (`summarise_pair`). Two sides that hardly ran together measure each one alone, so
a pair whose overlap is shorter than `OverlapRule` asks for fails with that reason instead of giving a number.
Repeats of one trial are folded into their median and spread (`fold_repeats`).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from profiler.progress import ProgressSample

DEFAULT_WARMUP_FRACTION = 0.2
DEFAULT_STALL_FACTOR = 5.0
MIN_STEADY_INTERVALS = 2
# A pair must have run together past both warm-ups for at least this long and this share of the trial's span.
DEFAULT_MIN_OVERLAP_SECONDS = 5.0
DEFAULT_MIN_OVERLAP_SHARE = 0.3
# Time-bound trials stop after this much steady (for a pair: overlapping) progress unless the spec says otherwise.
DEFAULT_STEADY_SECONDS = 30.0
WARMUP_SETTLED_INTERVALS = 3
WARMUP_SETTLED_RATIO = 0.8


class SummaryError(ValueError):
    """The trial did not report enough progress to measure a throughput."""


@dataclass(frozen=True, slots=True)
class TelemetrySample:
    """One reading of the GPU use of a trial's processes; None where the device cannot say."""

    t_seconds: float
    sm_utilization_ratio: float | None = None
    memory_bandwidth_utilization_ratio: float | None = None
    memory_used_bytes: int | None = None
    power_watts: float | None = None


@dataclass(frozen=True, slots=True)
class TrialSummary:
    throughput_samples_per_s: float
    step_time_seconds: float
    steady_steps: int
    steady_seconds: float
    warmup_seconds: float
    stall_seconds: float
    sm_util_mean_ratio: float | None = None
    sm_util_p95_ratio: float | None = None
    mem_bw_util_ratio: float | None = None
    peak_memory_bytes: int | None = None
    power_watts: float | None = None
    telemetry_samples: int = 0
    repeats: int = 1
    spread_ratio: float | None = None  # (max - min) / median throughput over the repeats; None for one run

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "throughput_samples_per_s": self.throughput_samples_per_s,
            "step_time_seconds": self.step_time_seconds,
            "steady_steps": self.steady_steps,
            "steady_seconds": self.steady_seconds,
            "warmup_seconds": self.warmup_seconds,
            "stall_seconds": self.stall_seconds,
            "sm_util_mean_ratio": self.sm_util_mean_ratio,
            "sm_util_p95_ratio": self.sm_util_p95_ratio,
            "mem_bw_util_ratio": self.mem_bw_util_ratio,
            "peak_memory_bytes": self.peak_memory_bytes,
            "power_watts": self.power_watts,
            "telemetry_samples": self.telemetry_samples,
            "repeats": self.repeats,
            "spread_ratio": self.spread_ratio,
        }


@dataclass(frozen=True, slots=True)
class OverlapRule:
    """How much steady time two sides of a pair must have shared: seconds, and a share of the trial's span (from
    the first side's first report to the last side's last one)."""

    min_seconds: float = DEFAULT_MIN_OVERLAP_SECONDS
    min_share: float = DEFAULT_MIN_OVERLAP_SHARE


def _last_run(samples: Sequence[ProgressSample]) -> list[ProgressSample]:
    """Samples in time order, keeping only the segment after the last counter reset (a restarted process)."""
    ordered = sorted(samples, key=lambda s: s.t_seconds)
    run: list[ProgressSample] = []
    for sample in ordered:
        if run and (sample.samples < run[-1].samples or sample.step < run[-1].step):
            run = []
        if run and sample.t_seconds == run[-1].t_seconds:
            run[-1] = sample
            continue
        run.append(sample)
    return run


def _rate(a: ProgressSample, b: ProgressSample) -> float:
    return (b.samples - a.samples) / (b.t_seconds - a.t_seconds)


def _warmup_end(run: Sequence[ProgressSample], warmup_fraction: float) -> int:
    """Index of the first steady report: past `warmup_fraction` of the time span, and past the point from which
    the rate over a few intervals stays near the final rate (the rate over the second half of the reports).

    Rates are taken over spans of several reports, not per interval, and the final rate is samples over time: a
    workload that shares its device in turns (time slices longer than its reporting interval) reports in bursts,
    whose per-interval rates alternate between fast and slow without the workload warming up at all."""
    start_t = run[0].t_seconds
    warmup_end_t = start_t + (run[-1].t_seconds - start_t) * warmup_fraction
    by_time = next(i for i, s in enumerate(run) if s.t_seconds >= warmup_end_t)
    final_rate = _rate(run[len(run) // 2 - 1], run[-1])
    by_rate = len(run) - 1
    for i in range(len(run) - WARMUP_SETTLED_INTERVALS):
        if _rate(run[i], run[i + WARMUP_SETTLED_INTERVALS]) >= WARMUP_SETTLED_RATIO * final_rate:
            by_rate = i
            break
    return min(max(by_time, by_rate), len(run) - 1 - MIN_STEADY_INTERVALS)


def _percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile (0..1) with linear interpolation between closest ranks."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _steady_start(run: Sequence[ProgressSample], warmup_fraction: float) -> float:
    """Time of the first steady report of one side's run (which has at least MIN_STEADY_INTERVALS + 1 reports)."""
    return run[_warmup_end(run, warmup_fraction)].t_seconds


def _checked_run(progress: Sequence[ProgressSample], warmup_fraction: float) -> list[ProgressSample]:
    if not 0.0 <= warmup_fraction < 1.0:
        raise ValueError(f"warmup_fraction must be in [0, 1), got {warmup_fraction}")
    run = _last_run(progress)
    if len(run) < MIN_STEADY_INTERVALS + 1:
        raise SummaryError(f"only {len(run)} progress reports; at least {MIN_STEADY_INTERVALS + 1} are needed")
    return run


def summarise(
    progress: Sequence[ProgressSample],
    telemetry: Sequence[TelemetrySample] = (),
    *,
    warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
    stall_factor: float = DEFAULT_STALL_FACTOR,
) -> TrialSummary:
    """Steady-state figures of one side of a trial.

    Warm-up is at least the first `warmup_fraction` of the reported time span, and lasts until the rate has
    settled near its final value (a slow start such as compilation is longer). Of the remaining intervals between
    reports, one that took more than `stall_factor` times the median interval per step is a stall and is left
    out of both samples and time. Telemetry is averaged over the steady window (all of it when none falls
    there); peak memory is over the whole run.
    """
    run = _checked_run(progress, warmup_fraction)
    steady = run[_warmup_end(run, warmup_fraction) :]
    return _figures(run, steady, telemetry, stall_factor)


def steady_seconds(progress: Sequence[ProgressSample], warmup_fraction: float = DEFAULT_WARMUP_FRACTION) -> float:
    """How long one side has been past its warm-up so far (0 before it has enough reports to tell)."""
    run = _last_run(progress)
    if len(run) < MIN_STEADY_INTERVALS + 1:
        return 0.0
    return run[-1].t_seconds - _steady_start(run, warmup_fraction)


@dataclass(frozen=True, slots=True)
class Overlap:
    """The window in which both sides of a pair were past their warm-ups, and the span of the whole trial."""

    start_seconds: float
    end_seconds: float
    span_seconds: float

    @property
    def seconds(self) -> float:
        return max(0.0, self.end_seconds - self.start_seconds)

    @property
    def share(self) -> float:
        return self.seconds / self.span_seconds if self.span_seconds > 0 else 0.0


def _overlap(runs: Sequence[Sequence[ProgressSample]], warmup_fraction: float) -> Overlap:
    """Each side's warm-up is judged on its reports up to the earlier side's last one: a side that runs on alone
    speeds up, and its warm-up must not be taken to last until then."""
    ends = [run[-1].t_seconds for run in runs]
    first = min(run[0].t_seconds for run in runs)
    shared_end = min(ends)
    starts = []
    for run in runs:
        together = [s for s in run if s.t_seconds <= shared_end]
        if len(together) < MIN_STEADY_INTERVALS + 1:
            return Overlap(start_seconds=shared_end, end_seconds=shared_end, span_seconds=max(ends) - first)
        starts.append(_steady_start(together, warmup_fraction))
    return Overlap(start_seconds=max(starts), end_seconds=shared_end, span_seconds=max(ends) - first)


def _pair_overlap(progress: Sequence[Sequence[ProgressSample]], warmup_fraction: float) -> Overlap | None:
    runs = [_last_run(p) for p in progress]
    if any(len(run) < MIN_STEADY_INTERVALS + 1 for run in runs):
        return None
    return _overlap(runs, warmup_fraction)


def overlap_seconds(
    progress: Sequence[Sequence[ProgressSample]], warmup_fraction: float = DEFAULT_WARMUP_FRACTION
) -> float:
    """How long the sides have been past their warm-ups together so far (a solo side: its steady time)."""
    if len(progress) == 1:
        return steady_seconds(progress[0], warmup_fraction)
    overlap = _pair_overlap(progress, warmup_fraction)
    return 0.0 if overlap is None else overlap.seconds


def measured_enough(
    progress: Sequence[Sequence[ProgressSample]],
    target_seconds: float,
    *,
    warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
    rule: OverlapRule = OverlapRule(),
) -> bool:
    """Whether a running trial can be stopped: `target_seconds` of steady progress, and for a pair an overlap that
    `rule` accepts (a partner that started late can need more than `target_seconds` for the share)."""
    if len(progress) == 1:
        return steady_seconds(progress[0], warmup_fraction) >= target_seconds
    overlap = _pair_overlap(progress, warmup_fraction)
    return (
        overlap is not None
        and overlap.seconds >= max(target_seconds, rule.min_seconds)
        and overlap.share >= rule.min_share
    )


def summarise_pair(
    progress: tuple[Sequence[ProgressSample], Sequence[ProgressSample]],
    telemetry: tuple[Sequence[TelemetrySample], Sequence[TelemetrySample]] = ((), ()),
    *,
    warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
    stall_factor: float = DEFAULT_STALL_FACTOR,
    rule: OverlapRule = OverlapRule(),
) -> tuple[TrialSummary, TrialSummary]:
    """Each side's figures over the overlap only: from the later of the two warm-up ends to the earlier of the two
    last reports. Raises SummaryError when that window is shorter than `rule` allows."""
    runs = [_checked_run(p, warmup_fraction) for p in progress]
    overlap = _overlap(runs, warmup_fraction)
    if overlap.seconds < rule.min_seconds or overlap.share < rule.min_share:
        raise SummaryError(
            f"the sides ran together past their warm-ups for {overlap.seconds:.2f} s ({overlap.share:.0%} of the "
            f"{overlap.span_seconds:.2f} s trial); at least {rule.min_seconds:g} s and {rule.min_share:.0%} are "
            "needed to time a pair"
        )
    summaries = []
    for run, side_telemetry in zip(runs, telemetry, strict=True):
        window = [s for s in run if overlap.start_seconds <= s.t_seconds <= overlap.end_seconds]
        if len(window) < MIN_STEADY_INTERVALS + 1:
            raise SummaryError(
                f"only {len(window)} progress reports inside the {overlap.seconds:.2f} s overlap; at least "
                f"{MIN_STEADY_INTERVALS + 1} are needed"
            )
        summaries.append(_figures(run, window, side_telemetry, stall_factor, until_seconds=overlap.end_seconds))
    return summaries[0], summaries[1]


def _figures(
    run: Sequence[ProgressSample],
    steady: Sequence[ProgressSample],
    telemetry: Sequence[TelemetrySample],
    stall_factor: float,
    until_seconds: float | None = None,
) -> TrialSummary:
    """Rate and utilisation over the `steady` reports of `run` (telemetry up to `until_seconds` when given)."""
    intervals = [
        (b.t_seconds - a.t_seconds, b.step - a.step, b.samples - a.samples) for a, b in itertools.pairwise(steady)
    ]
    per_step = [dt / dsteps for dt, dsteps, _ in intervals if dsteps > 0]
    typical_per_step = statistics.median(per_step) if per_step else 0.0
    kept_seconds = kept_samples = kept_steps = 0.0
    stall_seconds = 0.0
    for dt, dsteps, dsamples in intervals:
        if typical_per_step > 0 and dt > stall_factor * typical_per_step * max(dsteps, 1):
            stall_seconds += dt
            continue
        kept_seconds += dt
        kept_samples += dsamples
        kept_steps += dsteps
    if kept_seconds <= 0 or kept_steps <= 0:
        raise SummaryError("no steady progress: the workload reported no steps after its warm-up")
    start_t, steady_start_t = run[0].t_seconds, steady[0].t_seconds
    end_t = until_seconds if until_seconds is not None else float("inf")
    window = [s for s in telemetry if steady_start_t <= s.t_seconds <= end_t] or list(telemetry)
    sm = [s.sm_utilization_ratio for s in window if s.sm_utilization_ratio is not None]
    bw = [s.memory_bandwidth_utilization_ratio for s in window if s.memory_bandwidth_utilization_ratio is not None]
    power = [s.power_watts for s in window if s.power_watts is not None]
    memory = [s.memory_used_bytes for s in telemetry if s.memory_used_bytes is not None]
    return TrialSummary(
        throughput_samples_per_s=kept_samples / kept_seconds,
        step_time_seconds=kept_seconds / kept_steps,
        steady_steps=int(kept_steps),
        steady_seconds=kept_seconds,
        warmup_seconds=steady_start_t - start_t,
        stall_seconds=stall_seconds,
        sm_util_mean_ratio=_mean(sm),
        sm_util_p95_ratio=_percentile(sm, 0.95) if sm else None,
        mem_bw_util_ratio=_mean(bw),
        peak_memory_bytes=max(memory) if memory else None,
        power_watts=_mean(power),
        telemetry_samples=len(telemetry),
    )


def spread_ratio(values: Sequence[float]) -> float | None:
    """(max - min) / median of repeated measurements; None for fewer than two (no spread can be told)."""
    if len(values) < 2:
        return None
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle > 0 else None


def fold_repeats(repeats: Sequence[TrialSummary]) -> TrialSummary:
    """One summary of repeated runs of the same side: the median throughput (and step time), the spread of the
    throughputs, and the utilisation figures of the run whose throughput is the (lower) median."""
    if not repeats:
        raise ValueError("no repeats to fold")
    throughputs = [r.throughput_samples_per_s for r in repeats]
    middle = statistics.median_low(throughputs)
    typical = next(r for r in repeats if r.throughput_samples_per_s == middle)
    fields = {name: getattr(typical, name) for name in TrialSummary.__slots__}
    fields["throughput_samples_per_s"] = statistics.median(throughputs)
    fields["step_time_seconds"] = statistics.median(r.step_time_seconds for r in repeats)
    fields["repeats"] = len(repeats)
    fields["spread_ratio"] = spread_ratio(throughputs)
    return TrialSummary(**fields)
