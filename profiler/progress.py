"""The progress protocol between a trial's workload and the profiler: one JSON line per report on stdout.

A workload calls `report(step=..., samples=...)` (re-exported as `profiler.report`); the controller reads the
lines back from pod logs and the local runner from the child's stdout. Anything else the workload prints is
ignored, so the protocol coexists with ordinary logging and with a traceback after a crash.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TextIO

PROTOCOL_VERSION = 1


@dataclass(frozen=True, slots=True)
class ProgressSample:
    """Cumulative progress of a workload at wall-clock time `t_seconds` (unix seconds)."""

    step: int
    samples: int
    t_seconds: float


@dataclass(frozen=True, slots=True)
class ProgressStream:
    """What was parsed from a workload's output: the samples, in order, and how many lines were unusable."""

    samples: tuple[ProgressSample, ...]
    malformed_lines: int = 0


def format_line(step: int, samples: int, t_seconds: float) -> str:
    return json.dumps({"gpuadvisor": PROTOCOL_VERSION, "step": step, "samples": samples, "t": t_seconds})


def report(*, step: int, samples: int, out: TextIO | None = None, clock: Callable[[], float] = time.time) -> None:
    """Print one progress line: `step` and `samples` are cumulative counts since the workload started."""
    if step < 0 or samples < 0:
        raise ValueError(f"progress counts must be non-negative, got step={step} samples={samples}")
    stream = out if out is not None else sys.stdout
    stream.write(format_line(step, samples, clock()) + "\n")
    stream.flush()


def _parse_line(line: str) -> ProgressSample | None:
    """The sample on `line`, or None when it is not (valid) protocol output."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("gpuadvisor") != PROTOCOL_VERSION:
        return None
    step, samples, t = data.get("step"), data.get("samples"), data.get("t")
    if not (isinstance(step, int) and isinstance(samples, int) and isinstance(t, int | float)):
        return None
    if isinstance(step, bool) or isinstance(samples, bool) or step < 0 or samples < 0:
        return None
    return ProgressSample(step=step, samples=samples, t_seconds=float(t))


def parse_progress(lines: Iterable[str]) -> ProgressStream:
    """Pick the protocol lines out of a workload's output.

    Lines that do not look like protocol output at all are ordinary logs and are skipped silently; lines that
    start like a protocol record but do not parse (e.g. cut off by a crash) are counted as malformed.
    """
    samples: list[ProgressSample] = []
    malformed = 0
    for raw in lines:
        line = raw.strip()
        if not line.startswith("{"):
            continue
        sample = _parse_line(line)
        if sample is not None:
            samples.append(sample)
        elif '"gpuadvisor"' in line:
            malformed += 1
    return ProgressStream(samples=tuple(samples), malformed_lines=malformed)
