"""Expansion of a TrialRun into trials: every matrix combination, plus solo and paired runs for co-location.

With `repeats: N` the whole list is made N times over, one round after another, so each pair's repeat runs next
to its solos' repeats (a drift of the machine during the run spreads over all of them alike). Repeats of one
configuration share a `key`; the results fold them into their median and spread.

Pure and deterministic (same spec → same trials in the same order), so the controller can re-derive the trial
list on every reconcile and match it against the Jobs it already created.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from profiler.spec import EnvVar, SecretKeySelector, TrialRun, TrialRunSpec

ENV_BATCH_SIZE = "GPUADVISOR_BATCH_SIZE"
ENV_GPU_COUNT = "GPUADVISOR_GPU_COUNT"
ENV_WORKLOAD = "GPUADVISOR_WORKLOAD"
ENV_TRIAL = "GPUADVISOR_TRIAL"


class TrialKind(StrEnum):
    SOLO = "solo"
    PAIR = "pair"


@dataclass(frozen=True, slots=True)
class Side:
    """One process of a trial: what to run and the configuration it runs in."""

    workload: str
    image: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str | SecretKeySelector], ...]
    """Each variable's literal value, or the Secret key its value comes from (read where the side runs)."""
    batch_size: int | None


@dataclass(frozen=True, slots=True)
class Trial:
    """One measured configuration. A pair trial has two sides sharing one GPU (`gpu_count` is 1)."""

    index: int
    kind: TrialKind
    gpu_model: str | None
    gpu_count: int
    sides: tuple[Side, ...]
    repeat: int = 0

    @property
    def key(self) -> tuple[object, ...]:
        """What repeats of one configuration have in common."""
        return (self.kind, self.gpu_model, self.gpu_count, tuple((s.workload, s.batch_size) for s in self.sides))

    @property
    def id(self) -> str:
        return f"t{self.index:03d}"

    @property
    def workload(self) -> str:
        return self.sides[0].workload

    @property
    def batch_size(self) -> int | None:
        return self.sides[0].batch_size

    def config(self) -> dict[str, object]:
        """The configuration as shown in status and by the CLI."""
        out: dict[str, object] = {
            "trial": self.id,
            "kind": str(self.kind),
            "workload": self.workload,
            "gpuModel": self.gpu_model,
            "gpuCount": self.gpu_count,
            "batchSize": self.batch_size,
        }
        if self.repeat:
            out["repeat"] = self.repeat
        if self.kind is TrialKind.PAIR:
            out["partner"] = self.sides[1].workload
            out["partnerBatchSize"] = self.sides[1].batch_size
        return out


def _env(
    base: list[EnvVar], workload: str, batch_size: int | None, gpu_count: int
) -> tuple[tuple[str, str | SecretKeySelector], ...]:
    pairs: list[tuple[str, str | SecretKeySelector]] = [
        (e.name, e.value_from.secret_key_ref if e.value_from is not None else e.value) for e in base
    ]
    pairs.append((ENV_WORKLOAD, workload))
    pairs.append((ENV_GPU_COUNT, str(gpu_count)))
    if batch_size is not None:
        pairs.append((ENV_BATCH_SIZE, str(batch_size)))
    return tuple(pairs)


def expand(spec: TrialRunSpec) -> list[Trial]:
    """The trials of `spec`: `spec.repeats` rounds of one round's trials, renumbered in one sequence."""
    one_round = _one_round(spec)
    return [
        Trial(round_ * len(one_round) + t.index, t.kind, t.gpu_model, t.gpu_count, t.sides, round_)
        for round_ in range(spec.repeats)
        for t in one_round
    ]


def _one_round(spec: TrialRunSpec) -> list[Trial]:
    """One round: solo matrix combinations first, then co-location solos and pairs (deduplicated)."""
    models: list[str | None] = list(spec.matrix.gpu_models) if spec.matrix.gpu_models else [None]
    batch_sizes: list[int | None] = list(spec.matrix.batch_sizes) if spec.matrix.batch_sizes else [None]
    trials: list[Trial] = []
    seen: set[tuple[str, str | None, int, int | None]] = set()

    def main_side(batch_size: int | None, gpu_count: int) -> Side:
        return Side(
            workload=spec.workload,
            image=spec.image,
            command=tuple(spec.command),
            env=_env(spec.env, spec.workload, batch_size, gpu_count),
            batch_size=batch_size,
        )

    def add_solo(side: Side, model: str | None, gpu_count: int) -> None:
        key = (side.workload, model, gpu_count, side.batch_size)
        if key in seen:
            return
        seen.add(key)
        trials.append(Trial(len(trials), TrialKind.SOLO, model, gpu_count, (side,)))

    for model in models:
        for count in spec.matrix.gpu_counts:
            for batch_size in batch_sizes:
                add_solo(main_side(batch_size, count), model, count)
    for partner in spec.colocate_with:
        other = Side(
            workload=partner.workload,
            image=partner.image or spec.image,
            command=tuple(partner.command),
            env=_env(partner.env, partner.workload, partner.batch_size, 1),
            batch_size=partner.batch_size,
        )
        for model in models:
            add_solo(other, model, 1)
            for batch_size in batch_sizes:
                mine = main_side(batch_size, 1)
                add_solo(mine, model, 1)
                trials.append(Trial(len(trials), TrialKind.PAIR, model, 1, (mine, other)))
    return trials


def solo_of(trials: list[Trial], side: Side, gpu_model: str | None, repeat: int = 0) -> Trial:
    """The solo one-GPU trial measuring `side` on `gpu_model` in round `repeat` (expansion always creates it)."""
    for trial in trials:
        if (
            trial.kind is TrialKind.SOLO
            and trial.repeat == repeat
            and trial.gpu_count == 1
            and trial.gpu_model == gpu_model
            and trial.workload == side.workload
            and trial.batch_size == side.batch_size
        ):
            return trial
    raise LookupError(f"no solo trial of {side.workload} on {gpu_model or 'any GPU'}")


_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand_command(command: tuple[str, ...], env: dict[str, str]) -> list[str]:
    """Kubernetes' `$(VAR)` substitution in a command, so the local runner runs what the pod would run.

    `$(VAR)` becomes the value of VAR when it is defined and stays as written otherwise; `$$` is a literal `$`.
    """

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        return env.get(name, match.group(0))

    return [_VAR_REF.sub(substitute, arg) for arg in command]


def target_seconds(run: TrialRun, default_seconds: float) -> float:
    """Steady (for a pair: overlapping) time after which a time-bound trial is stopped: the spec's `steadySeconds`,
    else the runner's default (`profiler.summary.measured_enough` adds what a pair's overlap rule needs)."""
    return run.spec.steady_seconds or default_seconds
