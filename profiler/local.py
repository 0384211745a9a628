"""The local runner: a TrialRun's trials as subprocesses on this machine (no cluster needed).

Each side of a trial is started with the same environment its pod would get, its stdout is read for progress
lines, and a sampler thread reads the GPUs through the collector's backend for the side's process tree. Without
a GPU backend the trials still run and are measured for throughput; telemetry is then simply absent.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from collector.backend import GpuBackend
from collector.snapshot import GpuSnapshot
from profiler.progress import parse_progress
from profiler.results import Phase, TrialOutcome
from profiler.sampling import process_tree, telemetry_for
from profiler.spec import TrialRun
from profiler.summary import DEFAULT_WARMUP_FRACTION, SummaryError, TelemetrySample, summarise
from profiler.trials import ENV_TRIAL, Side, Trial, expand, expand_command

CPU_MODEL = "cpu"
STDERR_TAIL_LINES = 20
TERMINATE_GRACE_SECONDS = 5.0


@dataclass
class _Process:
    """A running side of a trial and what has been collected from it so far."""

    side: Side
    popen: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    stderr_tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=STDERR_TAIL_LINES))
    telemetry: list[TelemetrySample] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)


class LocalRunner:
    """Runs trials one after the other; `backend=None` means no GPU telemetry on this machine."""

    def __init__(
        self,
        *,
        backend: GpuBackend | None,
        sample_interval_seconds: float = 0.5,
        warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
        proc_root: Path = Path("/proc"),
        base_env: dict[str, str] | None = None,
        on_event: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.backend = backend
        self.sample_interval_seconds = sample_interval_seconds
        self.warmup_fraction = warmup_fraction
        self.proc_root = proc_root
        self.base_env = dict(os.environ) if base_env is None else base_env
        self.on_event = on_event

    def trials(self, run: TrialRun) -> list[Trial]:
        """The trials this machine runs: the spec's, with GPU models folded into "this machine's GPUs"."""
        matrix = run.spec.matrix.model_copy(update={"gpu_models": None})
        return expand(run.spec.model_copy(update={"matrix": matrix}))

    def run(self, run: TrialRun) -> list[TrialOutcome]:
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
        visible = ",".join(str(g.index) for g in gpus[: trial.gpu_count])
        self.on_event(f"{trial.id}: running {_describe(trial)} for at most {run.spec.max_duration_seconds}s")
        processes = [self._start(trial, side, visible) for side in trial.sides]
        deadline_hit = self._wait(processes, run.spec.max_duration_seconds)
        for process in processes:
            for reader in process.readers:
                reader.join()
        return self._outcome(trial, processes, gpu_model, deadline_hit)

    def _start(self, trial: Trial, side: Side, visible_devices: str) -> _Process:
        env = {**self.base_env, **dict(side.env), ENV_TRIAL: trial.id}
        if self.backend is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible_devices
        popen = subprocess.Popen(
            expand_command(side.command, env),
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

    def _wait(self, processes: Sequence[_Process], max_duration_seconds: int) -> bool:
        """Sample telemetry until every process exits or the deadline passes (then stop them); True on deadline."""
        deadline = time.monotonic() + max_duration_seconds
        while any(p.popen.poll() is None for p in processes):
            if time.monotonic() >= deadline:
                for p in processes:
                    _stop(p.popen)
                return True
            self._sample(processes)
            time.sleep(self.sample_interval_seconds)
        return False

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

    def _outcome(self, trial: Trial, processes: Sequence[_Process], gpu_model: str, deadline_hit: bool) -> TrialOutcome:
        summaries = []
        notes: list[str] = []
        for p in processes:
            stream = parse_progress(p.lines)
            code = p.popen.returncode
            if code != 0 and not deadline_hit:
                notes.append(f"{p.side.workload} exited with code {code}{_last_line(p.stderr_tail)}")
            try:
                summaries.append(summarise(stream.samples, p.telemetry, warmup_fraction=self.warmup_fraction))
            except SummaryError as e:
                reason = "; ".join(notes) if notes else str(e)
                return TrialOutcome(trial, Phase.FAILED, f"{p.side.workload}: {reason}", gpu_model)
        if deadline_hit:
            notes.append("stopped at maxDurationSeconds")
        telemetry = "available" if self.backend is not None else "unavailable (no GPU backend on this machine)"
        return TrialOutcome(
            trial,
            Phase.SUCCEEDED,
            "; ".join(notes),
            gpu_model,
            node=os.uname().nodename,
            summaries=tuple(summaries),
            notes={"runner": "local", "telemetry": telemetry},
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
