"""From trial outcomes to store rows and TrialRun status: shared by the controller and the local runner.

`records_for` is pure (outcomes → profile and co-location records); `save_results` writes them with the store's
upserts, so summarising the same trials again updates the same rows instead of adding new ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sqlalchemy.orm import Session

from profiler.records import ColocationRecord, ProfileRecord
from profiler.spec import TrialRun
from profiler.store import repo
from profiler.summary import TrialSummary, fold_repeats
from profiler.trials import Trial, TrialKind, solo_of

UNKNOWN_GPU_MODEL = "unknown"


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    """Where one trial stands; `summaries` has one entry per side once it succeeded."""

    trial: Trial
    phase: Phase
    message: str = ""
    gpu_model: str | None = None
    node: str | None = None
    summaries: tuple[TrialSummary, ...] = ()
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.phase in (Phase.SUCCEEDED, Phase.FAILED)

    def measured_model(self) -> str:
        return self.gpu_model or self.trial.gpu_model or UNKNOWN_GPU_MODEL


def source_of(run: TrialRun) -> str:
    return f"trialrun/{run.metadata.namespace}/{run.metadata.name}"


# A result whose repeats differ by more than this share of their median is flagged and kept out of training.
DEFAULT_MAX_SPREAD_RATIO = 0.2


def _flagged(spread: float | None, max_spread_ratio: float) -> bool:
    return spread is not None and spread > max_spread_ratio


def _profile(
    run: TrialRun, outcome: TrialOutcome, summary: TrialSummary, repeats: Sequence[TrialOutcome], max_spread: float
) -> ProfileRecord:
    trial = outcome.trial
    return ProfileRecord(
        workload=trial.workload,
        gpu_model=outcome.measured_model(),
        throughput_samples_per_s=summary.throughput_samples_per_s,
        gpu_count=trial.gpu_count,
        batch_size=trial.batch_size or 0,
        source=source_of(run),
        step_time_seconds=summary.step_time_seconds,
        sm_util_mean_ratio=summary.sm_util_mean_ratio,
        sm_util_p95_ratio=summary.sm_util_p95_ratio,
        mem_bw_util_ratio=summary.mem_bw_util_ratio,
        peak_memory_bytes=summary.peak_memory_bytes,
        power_watts=summary.power_watts,
        trial_run=(run.metadata.namespace, run.metadata.name),
        extra={
            "trial": trial.id,
            "node": outcome.node,
            "steady_steps": summary.steady_steps,
            "warmup_seconds": summary.warmup_seconds,
            "stall_seconds": summary.stall_seconds,
            "telemetry_samples": summary.telemetry_samples,
            **outcome.notes,
            "repeats": summary.repeats,
            "repeat_throughputs": [o.summaries[0].throughput_samples_per_s for o in repeats],
            "spread_ratio": summary.spread_ratio,
            "flagged": _flagged(summary.spread_ratio, max_spread),
        },
    )


def _colocation(
    run: TrialRun,
    pair: TrialOutcome,
    *,
    sides: tuple[TrialSummary, TrialSummary],
    solo_a: TrialSummary,
    solo_b: TrialSummary,
    max_spread: float,
) -> ColocationRecord:
    a, b = sides
    side_a, side_b = pair.trial.sides
    spreads = [x.spread_ratio for x in (a, b, solo_a, solo_b) if x.spread_ratio is not None]
    spread = max(spreads) if spreads else None
    return ColocationRecord(
        gpu_model=pair.measured_model(),
        workload_a=side_a.workload,
        workload_b=side_b.workload,
        solo_throughput_a=solo_a.throughput_samples_per_s,
        solo_throughput_b=solo_b.throughput_samples_per_s,
        coloc_throughput_a=a.throughput_samples_per_s,
        coloc_throughput_b=b.throughput_samples_per_s,
        batch_size_a=side_a.batch_size or 0,
        batch_size_b=side_b.batch_size or 0,
        sm_util_a=solo_a.sm_util_mean_ratio,
        mem_bw_util_a=solo_a.mem_bw_util_ratio,
        mem_bytes_a=solo_a.peak_memory_bytes,
        sm_util_b=solo_b.sm_util_mean_ratio,
        mem_bw_util_b=solo_b.mem_bw_util_ratio,
        mem_bytes_b=solo_b.peak_memory_bytes,
        source=source_of(run),
        trial_run=(run.metadata.namespace, run.metadata.name),
        sharing=str(pair.notes.get("sharing") or ""),
        repeats=a.repeats,
        spread_ratio=spread,
        flagged=_flagged(spread, max_spread),
    )


@dataclass(frozen=True, slots=True)
class Records:
    """Records keyed by the id of each configuration's first trial; `ids_of` maps every trial id (repeats too) to
    that key."""

    profiles: dict[str, ProfileRecord]
    colocations: dict[str, ColocationRecord]
    problems: dict[str, str]
    ids_of: dict[str, str] = field(default_factory=dict)


def _folded(outcomes: Sequence[TrialOutcome]) -> tuple[TrialSummary, ...]:
    """Each side's repeats folded into median and spread."""
    return tuple(fold_repeats([o.summaries[i] for o in outcomes]) for i in range(len(outcomes[0].summaries)))


def records_for(
    run: TrialRun,
    trials: Sequence[Trial],
    outcomes: Sequence[TrialOutcome],
    *,
    max_spread_ratio: float = DEFAULT_MAX_SPREAD_RATIO,
) -> Records:
    """One profile record per solo configuration and one co-location record per pair configuration, each over the
    succeeded repeats of that configuration (median throughput, spread, flagged above `max_spread_ratio`).

    A pair whose solo runs did not succeed cannot be normalised; it is reported in `problems` instead.
    """
    groups: dict[tuple[object, ...], list[TrialOutcome]] = {}
    for outcome in outcomes:
        groups.setdefault(outcome.trial.key, []).append(outcome)
    profiles: dict[str, ProfileRecord] = {}
    colocations: dict[str, ColocationRecord] = {}
    problems: dict[str, str] = {}
    ids_of: dict[str, str] = {}
    folded: dict[tuple[object, ...], tuple[TrialSummary, ...]] = {}
    for key, group in groups.items():
        done = [o for o in group if o.phase is Phase.SUCCEEDED]
        if done:
            folded[key] = _folded(done)
    for key, group in groups.items():
        done = [o for o in group if o.phase is Phase.SUCCEEDED]
        if not done:
            continue
        first = group[0].trial.id
        for o in group:
            ids_of[o.trial.id] = first
        trial = done[0].trial
        if trial.kind is TrialKind.SOLO:
            profiles[first] = _profile(run, done[0], folded[key][0], done, max_spread_ratio)
            continue
        solo_keys = [solo_of(list(trials), side, trial.gpu_model).key for side in trial.sides]
        if any(k not in folded for k in solo_keys):
            for o in done:
                problems[o.trial.id] = "a solo run of this pair did not succeed, so it cannot be normalised"
            continue
        pair_sides = folded[key]
        colocations[first] = _colocation(
            run,
            done[0],
            sides=(pair_sides[0], pair_sides[1]),
            solo_a=folded[solo_keys[0]][0],
            solo_b=folded[solo_keys[1]][0],
            max_spread=max_spread_ratio,
        )
    _annotate_solo_profiles(trials, profiles, colocations)
    return Records(profiles=profiles, colocations=colocations, problems=problems, ids_of=ids_of)


def _annotate_solo_profiles(
    trials: Sequence[Trial], profiles: dict[str, ProfileRecord], colocations: dict[str, ColocationRecord]
) -> None:
    """Give each side's solo profile the partner and both normalised throughputs of its co-location trials."""
    by_id = {t.id: t for t in trials}
    for pair_id, coloc in colocations.items():
        pair = by_id[pair_id]
        entries = (
            (pair.sides[0], coloc.workload_b, coloc.norm_a, coloc.norm_b),
            (pair.sides[1], coloc.workload_a, coloc.norm_b, coloc.norm_a),
        )
        for side, partner, mine, theirs in entries:
            solo_id = solo_of(list(trials), side, pair.gpu_model).id
            if solo_id not in profiles:
                continue
            record = profiles[solo_id]
            shared = [
                *record.extra.get("colocations", []),
                {
                    "partner": partner,
                    "trial": pair_id,
                    "normalized_throughput": mine,
                    "partner_normalized_throughput": theirs,
                    "sharing": coloc.sharing,
                },
            ]
            profiles[solo_id] = _with_extra(record, {"colocations": shared})


def _with_extra(record: ProfileRecord, extra: dict[str, Any]) -> ProfileRecord:
    fields = {name: getattr(record, name) for name in ProfileRecord.__slots__}
    fields["extra"] = {**record.extra, **extra}
    return ProfileRecord(**fields)


def run_phase(outcomes: Sequence[TrialOutcome]) -> tuple[Phase, str]:
    """The TrialRun's phase from its trials' phases, with a one-line message."""
    if not outcomes:
        return Phase.PENDING, "no trials"
    if not all(o.done for o in outcomes):
        running = sum(o.phase is Phase.RUNNING for o in outcomes)
        finished = sum(o.done for o in outcomes)
        phase = Phase.RUNNING if running or finished else Phase.PENDING
        return phase, f"{finished} of {len(outcomes)} trials finished"
    failed = [o for o in outcomes if o.phase is Phase.FAILED]
    if failed:
        return (
            Phase.FAILED,
            f"{len(failed)} of {len(outcomes)} trials failed (first: {failed[0].trial.id}: {failed[0].message})",
        )
    return Phase.SUCCEEDED, f"{len(outcomes)} trials succeeded"


def status_of(outcomes: Sequence[TrialOutcome], ids: dict[str, int] | None = None) -> dict[str, Any]:
    """The TrialRun status object (`phase`, `message`, one entry per trial) as the CRD and the store keep it."""
    phase, message = run_phase(outcomes)
    trials = []
    for o in outcomes:
        entry: dict[str, Any] = {**o.trial.config(), "phase": str(o.phase), "message": o.message}
        if o.gpu_model:
            entry["measuredGpuModel"] = o.gpu_model
        if o.node:
            entry["node"] = o.node
        if o.notes.get("sharing") is not None:
            entry["sharing"] = o.notes["sharing"]
        if o.summaries:
            entry["throughputs"] = [s.throughput_samples_per_s for s in o.summaries]
            entry["smUtilMeanRatios"] = [s.sm_util_mean_ratio for s in o.summaries]
            entry["peakMemoryBytes"] = [s.peak_memory_bytes for s in o.summaries]
        if ids is not None and o.trial.id in ids:
            entry["profileId" if o.trial.kind is TrialKind.SOLO else "colocationId"] = ids[o.trial.id]
        trials.append(entry)
    return {"phase": str(phase), "message": message, "trials": trials}


def save_results(
    *,
    session: Session,
    run: TrialRun,
    trials: Sequence[Trial],
    outcomes: Sequence[TrialOutcome],
    max_spread_ratio: float = DEFAULT_MAX_SPREAD_RATIO,
) -> dict[str, Any]:
    """Write the run, its profiles and co-locations (idempotently) and return the status that was stored."""
    records = records_for(run, trials, outcomes, max_spread_ratio=max_spread_ratio)
    spec = run.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    namespace, name = run.metadata.namespace, run.metadata.name
    repo.save_trial_run(session=session, namespace=namespace, name=name, workload=run.spec.workload, spec=spec)
    stored: dict[str, int] = {}
    for trial_id, profile in records.profiles.items():
        stored[trial_id] = repo.save_profile(session=session, profile=profile)
    for trial_id, coloc in records.colocations.items():
        stored[trial_id] = repo.save_colocation(session=session, colocation=coloc)
    ids = {trial_id: stored[first] for trial_id, first in records.ids_of.items() if first in stored}
    adjusted = [
        TrialOutcome(o.trial, Phase.FAILED, records.problems[o.trial.id], o.gpu_model, o.node, o.summaries, o.notes)
        if o.trial.id in records.problems
        else o
        for o in outcomes
    ]
    status = status_of(adjusted, ids)
    repo.save_trial_run(
        session=session,
        namespace=namespace,
        name=name,
        workload=run.spec.workload,
        spec=spec,
        phase=status["phase"],
        status=status,
        message=status["message"],
    )
    return status
