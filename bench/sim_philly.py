"""Experiment 3 (docs/evaluation.md): Philly arrivals on 8-GPU NVLink nodes, topology-aware advisor vs spread/binpack.

    .venv/bin/python bench/sim_philly.py [--start 2017-10-09] [--days 7] [--plot DIR]

The jobs of every Philly virtual cluster submitted in one week (../shared/data/philly/philly.csv) on 64 nodes × 8 V100
(bench/data/philly_cluster.csv: NVLink inside GPUs 0-3 and 4-7, as in a DGX-1's two NVLink quads). A job runs for its
recorded duration when its GPUs sit in one NVLink group, 1/0.85 × that across groups of a node, 1/0.7 × across nodes
(advisor.sim.rates). Prints average/p95 JCT, queueing delay and utilisation per policy.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "philly" / "philly.csv"
CLUSTER = ROOT / "bench" / "data" / "philly_cluster.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", default="2017-10-09")
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--plot", type=Path, default=None, help="write philly_jct_cdf.png here")
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"Philly data not found at {DATA}")
    frame = pd.read_csv(DATA)
    stamps = pd.to_datetime(frame["timestamp"])
    start = datetime.fromisoformat(args.start)
    window = frame[(stamps >= start) & (stamps < start + timedelta(days=args.days))]
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / f"philly_{args.start}_{args.days:g}d.csv"
        window.to_csv(trace, index=False)
        command = [
            sys.executable, "-m", "advisor.cli", "simulate",
            "--cluster", str(CLUSTER), "--trace", str(trace),
            "--policies", "spread,binpack,advisor", "--mode", "jct", "--json",
        ]  # fmt: skip
        if args.plot is not None:
            command += ["--plot", tmp]
        print("$", shlex.join(command), flush=True)
        done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
        if args.plot is not None:
            args.plot.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / "jct_cdf.png").replace(args.plot / "philly_jct_cdf.png")
    report = json.loads(done.stdout)
    print(f"{len(window)} jobs from {args.start}, {args.days:g} days; {report['cluster']['gpus']} GPUs")
    print(f"{'policy':<8} {'avg_jct_s':>10} {'p95_jct_s':>10} {'avg_queue_s':>11} {'makespan_s':>11} {'gpu_util':>8} "
          f"{'x-NVLink':>8} {'x-node':>6} {'seconds':>7}")  # fmt: skip
    for name, r in report["policies"].items():
        print(
            f"{name:<8} {r['avg_jct_s']:>10.0f} {r['p95_jct_s']:>10.0f} {r['avg_queue_s']:>11.0f} "
            f"{r['makespan_s']:>11.0f} {r['gpu_utilization']:>8.3f} {r['cross_nvlink_group_jobs']:>8} "
            f"{r['multi_node_jobs']:>6} {r['seconds']:>7.1f}"
        )


if __name__ == "__main__":
    main()
