"""A CPU-bound trial workload pinned to one core: two of them time-share that core as two contexts time-share a GPU.

`python pinned.py --core N [--delay S] [--max-seconds M]` sleeps S seconds first (as a PyTorch import does before
the first step), then runs fixed units of arithmetic on core N until stopped (or M seconds as a safety net),
reporting progress every 100 ms. Where this process may, it runs under SCHED_RR: other programs on the machine
then cannot take turns on the core too, so the core runs only the trial's processes, like a GPU that runs only its
own contexts; without that right it runs as an ordinary process and shares the core with whatever else runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from profiler import report

REPORT_EVERY_SECONDS = 0.1
UNIT = 20_000  # additions per step: a step of a few hundred microseconds


def _own_the_core(core: int) -> str:
    os.sched_setaffinity(0, {core})
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
    except (PermissionError, OSError) as e:
        return f"ordinary scheduling ({e})"
    return "SCHED_RR"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--core", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--max-seconds", type=float, default=60.0)
    args = parser.parse_args()
    batch = int(os.environ.get("GPUADVISOR_BATCH_SIZE", "1"))
    time.sleep(args.delay)
    policy = _own_the_core(args.core)
    print(f"pinned to core {args.core} under {policy}", file=sys.stderr, flush=True)
    started = last_report = time.time()
    steps = 0
    while True:
        total = 0
        for i in range(UNIT):
            total += i
        steps += 1
        now = time.time()
        if now - last_report >= REPORT_EVERY_SECONDS:
            report(step=steps, samples=steps * batch)
            last_report = now
        if now - started > args.max_seconds:
            return


if __name__ == "__main__":
    main()
