"""Experiment 1 (docs/evaluation.md): openb fragmentation, every policy but the oracle, timed per policy.

    .venv/bin/python bench/sim_openb.py [--seed N] [--plot DIR]

Runs `gpuadvisor simulate` on ../shared/data/openb (1,213 nodes, 6,212 GPUs, 8,152 pods) and prints the allocation
at 100% arrived demand, the failed pods and the seconds each policy took (goal: < 60 s per policy on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "openb"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=None, help="write allocation.png here")
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"openb data not found at {DATA}")
    command = [
        sys.executable, "-m", "advisor.cli", "simulate",
        "--cluster", str(DATA / "openb_node_list_gpu_node.csv"),
        "--trace", str(DATA / "openb_pod_list_default.csv"),
        "--policies", "random,spread,binpack,fgd,advisor",
        "--mode", "fragmentation", "--seed", str(args.seed), "--json",
    ]  # fmt: skip
    if args.plot is not None:
        command += ["--plot", str(args.plot)]
    print("$", shlex.join(command))
    done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
    report = json.loads(done.stdout)
    print(f"{'policy':<8} {'gpu_allocation_ratio':>20} {'failed_pods':>11} {'fragmentation_ratio':>19} {'seconds':>8}")
    for name, r in report["policies"].items():
        print(
            f"{name:<8} {r['gpu_allocation_ratio']:>20.4f} {r['failed_pods']:>11} "
            f"{r['fragmentation_ratio']:>19.4f} {r['seconds']:>8.1f}"
        )


if __name__ == "__main__":
    main()
