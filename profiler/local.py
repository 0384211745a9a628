"""The local runner: a TrialRun's trials as subprocesses on this machine (no cluster needed).

Each side of a trial is started with the same environment its pod would get, its stdout is read for progress
lines, and a sampler thread reads the GPUs through the collector's backend for the side's process tree. Without
a GPU backend the trials still run and are measured for throughput; telemetry is then simply absent.

Trials are time-bound: the runner stops a trial once it has seen `steady_seconds` of steady progress (a pair: of
both sides past their warm-ups at once), so a workload's own step count does not decide what is measured. A pair
is timed over its overlap only (`profiler.summary.summarise_pair`) and records how the GPU was shared, read
through the collector's NVML wrapper by the collector's rule (`collector.sharing.sharing_mode`). A command whose
program is `python`/`python3` runs under this interpreter (`sys.executable`), not whichever python is first on PATH.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from collector.backend import GpuBackend, SharingFacts
from collector.sharing import MIG, MPS, TIME_SLICING, mps_daemon_running, sharing_mode
from collector.snapshot import GpuSnapshot
from profiler.progress import ProgressSample, parse_progress
from profiler.results import Phase, TrialOutcome
from profiler.sampling import process_tree, telemetry_for
from profiler.spec import TrialRun
from profiler.summary import (
    DEFAULT_STEADY_SECONDS,
    DEFAULT_WARMUP_FRACTION,
    OverlapRule,
    SummaryError,
    TelemetrySample,
    TrialSummary,
    measured_enough,
    summarise,
    summarise_pair,
)
from profiler.trials import ENV_TRIAL, Side, Trial, TrialKind, expand, expand_command, target_seconds

CPU_MODEL = "cpu"
STDERR_TAIL_LINES = 20
TERMINATE_GRACE_SECONDS = 5.0
PYTHON_PROGRAMS = frozenset({"python", "python3"})


class UnresolvedSecretError(ValueError):
    """A trial variable whose value comes from a Secret that the local runner cannot read."""


def local_env(side: Side, base_env: Mapping[str, str]) -> dict[str, str]:
    """The variables `side` sets, as the local runner runs it. A variable from a Secret (`valueFrom.secretKeyRef`)
    cannot be read without the cluster, so it takes the value the runner's own environment has under the same
    name (`export WANDB_API_KEY=...` before `profile request --local`); without one, an optional reference leaves it
    unset and any other is an `UnresolvedSecretError`."""
    env: dict[str, str] = {}
    for name, value in side.env:
        if isinstance(value, str):
            env[name] = value
        elif name in base_env:
            env[name] = base_env[name]
        elif not value.optional:
            raise UnresolvedSecretError(
                f"{side.workload}: env {name} comes from Secret {value.name!r} key {value.key!r} "
                f"(valueFrom.secretKeyRef), which the local runner cannot read; export {name} in this shell to "
                "give its value, or run the trial in the cluster"
            )
    return env


def check_local_env(run: TrialRun, base_env: Mapping[str, str]) -> None:
    """`UnresolvedSecretError` when a side of `run` has a variable from a Secret that `local_env` cannot give."""
    for trial in expand(run.spec):
        for side in trial.sides:
            local_env(side, base_env)


def program_of(command: list[str]) -> list[str]:
    """`command` with a bare `python`/`python3` replaced by the interpreter the runner runs under."""
    if command and command[0] in PYTHON_PROGRAMS:
        return [sys.executable, *command[1:]]
    return command


@dataclass
class _Process:
    """A running side of a trial and what has been collected from it so far."""

    side: Side
    popen: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    stderr_tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=STDERR_TAIL_LINES))
    telemetry: list[TelemetrySample] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)
    progress: list[ProgressSample] = field(default_factory=list)
    parsed_lines: int = 0

    def progress_so_far(self) -> list[ProgressSample]:
        """The progress reported so far (lines are parsed once, as they arrive)."""
        upto = len(self.lines)
        self.progress.extend(parse_progress(self.lines[self.parsed_lines : upto]).samples)
        self.parsed_lines = upto
        return self.progress


class LocalRunner:
    """Runs trials one after the other; `backend=None` means no GPU telemetry on this machine."""

    def __init__(
        self,
        *,
        backend: GpuBackend | None,
        sample_interval_seconds: float = 0.5,
        warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
        steady_seconds: float = DEFAULT_STEADY_SECONDS,
        overlap: OverlapRule = OverlapRule(),
        sharing_facts: Callable[[int], SharingFacts] | None = None,
        proc_root: Path = Path("/proc"),
        base_env: dict[str, str] | None = None,
        on_event: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.backend = backend
        self.sample_interval_seconds = sample_interval_seconds
        self.warmup_fraction = warmup_fraction
        self.steady_seconds = steady_seconds
        self.overlap = overlap
        self.sharing_facts = sharing_facts
        self.proc_root = proc_root
        self.base_env = dict(os.environ) if base_env is None else base_env
        self.on_event = on_event

    def trials(self, run: TrialRun) -> list[Trial]:
        """The trials this machine runs: the spec's, with GPU models folded into "this machine's GPUs"."""
        matrix = run.spec.matrix.model_copy(update={"gpu_models": None})
        return expand(run.spec.model_copy(update={"matrix": matrix}))

    def run(self, run: TrialRun) -> list[TrialOutcome]:
        """Every trial of `run`, one after another; `UnresolvedSecretError` before any starts when a variable from
        a Secret has no value here."""
        check_local_env(run, self.base_env)
        if run.spec.matrix.gpu_models:
            self.on_event(
                f"note: gpuModels {', '.join(run.spec.matrix.gpu_models)} ignored; the local runner uses this "
                "machine's GPUs"
            )
        return [self.run_trial(run, trial) for trial in self.trials(run)]

    def _gpus(self) -> list[GpuSnapshot]:
        if self.backend is None:
            return []
        return sorted((g for g in self.backend.read().gpus if g.healthy), key=lambda g: g.index)

    def run_trial(self, run: TrialRun, trial: Trial) -> TrialOutcome:
        gpus = self._gpus()
        if self.backend is not None and trial.gpu_count > len(gpus):
            return TrialOutcome(
                trial, Phase.FAILED, f"needs {trial.gpu_count} GPUs, this machine has {len(gpus)} healthy"
            )
        gpu_model = gpus[0].model if gpus else CPU_MODEL
        chosen = gpus[: trial.gpu_count]
        visible = ",".join(str(g.index) for g in chosen)
        target = target_seconds(run, self.steady_seconds)
        repeat = f" (repeat {trial.repeat + 1} of {run.spec.repeats})" if run.spec.repeats > 1 else ""
        self.on_event(
            f"{trial.id}: running {_describe(trial)}{repeat} until {target:g}s steady"
            f"{' together' if trial.kind is TrialKind.PAIR else ''}, at most {run.spec.max_duration_seconds}s"
        )
        processes = [self._start(trial, side, visible) for side in trial.sides]
        sharing: list[str] = []
        ended = self._wait(
            processes,
            max_duration_seconds=run.spec.max_duration_seconds,
            target_seconds=target,
            gpus=chosen,
            trial=trial,
            sharing=sharing,
        )
        for process in processes:
            for reader in process.readers:
                reader.join()
        return self._outcome(trial, processes, gpu_model, ended, sharing)

    def _start(self, trial: Trial, side: Side, visible_devices: str) -> _Process:
        env = {**self.base_env, **local_env(side, self.base_env), ENV_TRIAL: trial.id}
        if self.backend is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible_devices
        popen = subprocess.Popen(
            program_of(expand_command(side.command, env)),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        process = _Process(side=side, popen=popen)
        assert popen.stdout is not None
        assert popen.stderr is not None
        for stream, sink in ((popen.stdout, process.lines.append), (popen.stderr, process.stderr_tail.append)):
            reader = threading.Thread(target=_pump, args=(stream, sink), daemon=True)
            reader.start()
            process.readers.append(reader)
        return process

    def _wait(
        self,
        processes: Sequence[_Process],
        *,
        max_duration_seconds: int,
        target_seconds: float,
        gpus: Sequence[GpuSnapshot],
        trial: Trial,
        sharing: list[str],
    ) -> str:
        """Sample telemetry until every process exits, the trial has `target_seconds` of steady (overlapping)
        progress, or the deadline passes (the last two stop the processes). Returns "exited", "measured" or
        "deadline"."""
        deadline = time.monotonic() + max_duration_seconds
        while any(p.popen.poll() is None for p in processes):
            if time.monotonic() >= deadline:
                self._stop_all(processes)
                return "deadline"
            progress = [p.progress_so_far() for p in processes]
            if measured_enough(progress, target_seconds, warmup_fraction=self.warmup_fraction, rule=self.overlap):
                self._stop_all(processes)
                return "measured"
            self._sample(processes)
            if trial.kind is TrialKind.PAIR:
                self._observe_sharing(processes, gpus, sharing)
            time.sleep(self.sample_interval_seconds)
        return "exited"

    @staticmethod
    def _stop_all(processes: Sequence[_Process]) -> None:
        for p in processes:
            _stop(p.popen)

    def _observe_sharing(self, processes: Sequence[_Process], gpus: Sequence[GpuSnapshot], out: list[str]) -> None:
        """Read how the pair's GPU is shared while both sides run (MPS clients are listed only while alive)."""
        if self.backend is None:
            out.append(TIME_SLICING)  # two processes on this machine's cores: the OS scheduler takes turns
            return
        if self.sharing_facts is None or not gpus:
            return
        pids: set[int] = set()
        for p in processes:
            if p.popen.poll() is None:
                pids |= process_tree(p.popen.pid, self.proc_root)
        mode = sharing_mode(self.sharing_facts(gpus[0].index), pids, mps_daemon_running(self.base_env))
        if mode:
            out.append(mode)

    def _sample(self, processes: Sequence[_Process]) -> None:
        if self.backend is None:
            return
        reading = self.backend.read()
        now = time.time()
        for p in processes:
            if p.popen.poll() is not None:
                continue
            sample = telemetry_for(reading, process_tree(p.popen.pid, self.proc_root), now)
            if sample is not None:
                p.telemetry.append(sample)

    def _outcome(
        self, trial: Trial, processes: Sequence[_Process], gpu_model: str, ended: str, sharing: list[str]
    ) -> TrialOutcome:
        summaries: list[TrialSummary] = []
        notes: list[str] = []
        for p in processes:
            code = p.popen.returncode
            if code != 0 and ended == "exited":
                notes.append(f"{p.side.workload} exited with code {code}{_last_line(p.stderr_tail)}")
            try:
                summaries.append(summarise(p.progress_so_far(), p.telemetry, warmup_fraction=self.warmup_fraction))
            except SummaryError as e:
                reason = "; ".join(notes) if notes else str(e)
                return TrialOutcome(trial, Phase.FAILED, f"{p.side.workload}: {reason}", gpu_model)
        extra: dict[str, str] = {}
        if trial.kind is TrialKind.PAIR:
            a, b = processes
            try:
                summaries = list(
                    summarise_pair(
                        (a.progress_so_far(), b.progress_so_far()),
                        (a.telemetry, b.telemetry),
                        warmup_fraction=self.warmup_fraction,
                        rule=self.overlap,
                    )
                )
            except SummaryError as e:
                return TrialOutcome(trial, Phase.FAILED, "; ".join([*notes, str(e)]), gpu_model)
            # the most specific mode seen while both ran (a daemon started mid-trial still means MPS for part of it)
            modes = set(sharing)
            extra["sharing"] = next((m for m in (MIG, MPS, TIME_SLICING) if m in modes), "")
        if ended == "deadline":
            notes.append("stopped at maxDurationSeconds")
        telemetry = "available" if self.backend is not None else "unavailable (no GPU backend on this machine)"
        return TrialOutcome(
            trial,
            Phase.SUCCEEDED,
            "; ".join(notes),
            gpu_model,
            node=os.uname().nodename,
            summaries=tuple(summaries),
            notes={"runner": "local", "telemetry": telemetry, "ended": ended, **extra},
        )


def _describe(trial: Trial) -> str:
    sides = " + ".join(f"{s.workload}" + (f" bs={s.batch_size}" if s.batch_size else "") for s in trial.sides)
    return f"{trial.kind} {sides} on {trial.gpu_count} GPU(s)"


def _last_line(tail: collections.deque[str]) -> str:
    lines = [line.strip() for line in tail if line.strip()]
    return f": {lines[-1]}" if lines else ""


def _pump(stream: IO[str], sink: Callable[[str], None]) -> None:
    for line in stream:
        sink(line)


def _stop(popen: subprocess.Popen[str]) -> None:
    """SIGTERM the process group, then SIGKILL it if it does not exit within the grace period."""
    if popen.poll() is not None:
        return
    try:
        os.killpg(popen.pid, signal.SIGTERM)
        popen.wait(timeout=TERMINATE_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()
    except ProcessLookupError:
        popen.wait()
