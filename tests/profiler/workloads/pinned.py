"""A CPU-bound trial workload pinned to one core: two of them time-share that core as two contexts time-share a GPU.

`python pinned.py --core N [--delay S] [--max-seconds M]` sleeps S seconds first (as a PyTorch import does before
the first step), then runs steps on core N until stopped (or M seconds as a safety net), reporting progress every
100 ms. A step is a fixed half millisecond of this process's own CPU time, not a fixed count of additions: the
virtual machines this runs on change speed by up to 2x from one second to the next (the host's other tenants), and
a step of fixed CPU time keeps that out of the throughput, the way a GPU kernel of fixed work at a fixed clock does.
What is left is what the check is about: the share of the core each process gets.

Where this process may, it runs under SCHED_RR: other programs on the machine then cannot take turns on the core
too, so the core runs only the trial's processes, like a GPU that runs only its own contexts; without that right it
runs as an ordinary process and shares the core with whatever else runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from profiler import report

REPORT_EVERY_SECONDS = 0.1
STEP_CPU_SECONDS = 0.0005


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
        until = time.thread_time() + STEP_CPU_SECONDS
        while time.thread_time() < until:
            pass
        steps += 1
        now = time.time()
        if now - last_report >= REPORT_EVERY_SECONDS:
            report(step=steps, samples=steps * batch)
            last_report = now
        if now - started > args.max_seconds:
            return


if __name__ == "__main__":
    main()
