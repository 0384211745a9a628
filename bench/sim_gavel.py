"""Experiment 2 (docs/evaluation.md): JCT on a heterogeneous cluster with Gavel's traces and throughputs.

    .venv/bin/python bench/sim_gavel.py [--arrival-scale X] [--plot DIR]

36 K80 + 36 P100 + 36 V100 GPUs, 4 per node (bench/data/gavel_cluster.csv). Each of the three traces in
../shared/data/gavel/traces_seed0_top3.csv is run on its own with spread, binpack, advisor (models trained on held-out
Gavel data, advisor.sim.heldout) and oracle (true throughputs). Goal: advisor avg JCT ≤ 0.7 × spread and within 15%
of the oracle.

`--arrival-scale X` multiplies every arrival time by X (the published traces, X = 1, ask for more GPU time than the
108 GPUs have even with every job on its fastest GPU; X = 2 halves the load). Plots are named with the scale.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "gavel"
CLUSTER = ROOT / "bench" / "data" / "gavel_cluster.csv"


def split_traces(source: Path, directory: Path, arrival_scale: float) -> list[Path]:
    with source.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        fields = reader.fieldnames or []
    out: list[Path] = []
    for name in sorted({r["trace"] for r in rows}):
        path = directory / f"{name}.csv"
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(
                {**r, "arrival_time_s": str(float(r["arrival_time_s"]) * arrival_scale)}
                for r in rows
                if r["trace"] == name
            )
        out.append(path)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arrival-scale", type=float, default=1.0, help="multiply arrival times by this")
    parser.add_argument("--plot", type=Path, default=None, help="write <trace>_jct_cdf.png here")
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"Gavel data not found at {DATA}")
    with tempfile.TemporaryDirectory() as tmp:
        for trace in split_traces(DATA / "traces_seed0_top3.csv", Path(tmp), args.arrival_scale):
            command = [
                sys.executable, "-m", "advisor.cli", "simulate",
                "--cluster", str(CLUSTER), "--trace", str(trace),
                "--throughputs", str(DATA / "simulation_throughputs.json"),
                "--policies", "spread,binpack,advisor,oracle", "--mode", "jct", "--json",
            ]  # fmt: skip
            if args.plot is not None:
                command += ["--plot", tmp]
            print("$", shlex.join(command), flush=True)
            done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
            report = json.loads(done.stdout)
            if args.plot is not None:
                args.plot.mkdir(parents=True, exist_ok=True)
                (Path(tmp) / "jct_cdf.png").replace(
                    args.plot / f"gavel_{trace.stem}_x{args.arrival_scale:g}_jct_cdf.png"
                )
            policies = report["policies"]
            spread, oracle = policies["spread"]["avg_jct_s"], policies["oracle"]["avg_jct_s"]
            print(f"trace {trace.stem}: {report['trace']['entries']} jobs, arrivals x{args.arrival_scale:g}")
            print(f"{'policy':<8} {'avg_jct_s':>11} {'p95_jct_s':>11} {'makespan_s':>12} {'avg_queue_s':>11} "
                  f"{'gpu_util':>8} {'/spread':>7} {'/oracle':>7} {'seconds':>7}")  # fmt: skip
            for name, r in policies.items():
                print(
                    f"{name:<8} {r['avg_jct_s']:>11.0f} {r['p95_jct_s']:>11.0f} {r['makespan_s']:>12.0f} "
                    f"{r['avg_queue_s']:>11.0f} {r['gpu_utilization']:>8.3f} {r['avg_jct_s'] / spread:>7.3f} "
                    f"{r['avg_jct_s'] / oracle:>7.3f} {r['seconds']:>7.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
