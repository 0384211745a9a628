"""Experiment 1 (docs/evaluation.md): openb fragmentation, every policy but the oracle, timed per policy.

    .venv/bin/python bench/sim_openb.py [--seed N] [--plot DIR]
    .venv/bin/python bench/sim_openb.py --seed 1 --weights 0.5,1,1.5 [--variant full|gpu-pods-only|gpu-only]
        [--profile packing|default] [--span POINTS] [--ties random|first]

Runs `gpuadvisor simulate` on ../shared/data/openb (1,213 nodes, 6,212 GPUs, 8,152 pods) and prints the allocation
at 100% arrived demand, the failed pods and the seconds each policy took (goal: < 60 s per policy on 2 cores).

With `--weights`, runs only the advisor policy, in-process, once per extender weight (the validation sweep of
docs/evaluation.md). `--variant`: `full` = the scorer sees node CPU/memory, the task mix gives CPU/memory and pods
without GPU are scored (what `gpuadvisor simulate` runs); `gpu-pods-only` = the same but pods without GPU are left to
kube-scheduler's score; `gpu-only` = the task mix without CPU/memory (the scorer sees GPUs only). `--profile`:
`packing` = the scorer's packing component alone, one extender step per 2 points (`advisor.sim.packing.
scoring_profile`, what `gpuadvisor simulate` runs); `default` = the service's default weights and span.
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
HEADER = f"{'policy':<8} {'gpu_allocation_ratio':>20} {'failed_pods':>11} {'fragmentation_ratio':>19} {'seconds':>8}"


def sweep(seed: int, weights: list[float], *, variant: str, profile: str, span: float | None, ties: str) -> None:
    from dataclasses import replace

    import numpy as np

    from advisor.sim.loaders import load_cluster, load_trace
    from advisor.sim.model import Pod
    from advisor.sim.packing import (
        MAX_ARRIVED_RATIO,
        AdvisorPackPolicy,
        inflated_sequence,
        run_fragmentation,
        scoring_profile,
    )
    from advisor.sim.target_workload import task_mix_of

    cluster = load_cluster(DATA / "openb_node_list_gpu_node.csv")
    pods = [p for p in load_trace(DATA / "openb_pod_list_default.csv") if isinstance(p, Pod)]
    sequence = inflated_sequence(pods, cluster.total_gpus, seed, MAX_ARRIVED_RATIO)
    config = scoring_profile(profile, task_mix_of(pods, with_resources=variant != "gpu-only"))
    if span is not None:
        config = replace(config, extender_span_points=span)
    print(f"seed {seed}, advisor variant {variant}, {profile} profile, span {config.extender_span_points:g}")
    print(f"{'weight':>8} {'gpu_allocation_ratio':>20} {'failed_pods':>11} {'fragmentation_ratio':>19} {'seconds':>8}")
    for weight in weights:
        policy = AdvisorPackPolicy(
            cluster,
            config,
            extender_weight=weight,
            score_pods_without_gpu=variant == "full",
            rng=np.random.default_rng(seed) if ties == "random" else None,
        )
        r = run_fragmentation(cluster, pods, sequence, policy)
        print(
            f"{weight:>8g} {r.gpu_allocation_ratio:>20.4f} {r.failed_pods:>11} "
            f"{r.fragmentation_ratio:>19.4f} {r.seconds:>8.1f}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=None, help="write allocation.png here")
    parser.add_argument("--weights", default=None, help="comma-separated extender weights: advisor-only sweep")
    parser.add_argument("--variant", choices=("full", "gpu-pods-only", "gpu-only"), default="full")
    parser.add_argument(
        "--profile",
        choices=("packing", "default"),
        default="packing",
        help="packing: what `simulate` runs (packing only, span 20); default: the service's default weights, span 40",
    )
    parser.add_argument("--span", type=float, default=None, help="the profile's extender span points, overridden")
    parser.add_argument(
        "--ties",
        choices=("random", "first"),
        default="random",
        help="equal totals: chosen among at random (seeded, as `simulate` and kube-scheduler do) or the first node",
    )
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"openb data not found at {DATA}")
    if args.weights is not None:
        sweep(
            args.seed,
            [float(w) for w in args.weights.split(",")],
            variant=args.variant,
            profile=args.profile,
            span=args.span,
            ties=args.ties,
        )
        return
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
    print(HEADER)
    for name, r in report["policies"].items():
        print(
            f"{name:<8} {r['gpu_allocation_ratio']:>20.4f} {r['failed_pods']:>11} "
            f"{r['fragmentation_ratio']:>19.4f} {r['seconds']:>8.1f}"
        )
        if r.get("curve") and name in ("fgd", "advisor"):
            curve = r["curve"]
            points = {
                x: (y, f)
                for x, y, f in zip(
                    curve["arrived_demand_ratio"], curve["gpu_allocation_ratio"], curve["failed_pods"], strict=True
                )
            }
            shown = ", ".join(
                f"{x:.0%} {points[x][0]:.4f} ({points[x][1]} failed)"
                for x in (0.9, 0.95, 1.05, 1.1, 1.3)
                if x in points
            )
            print(f"{'':<8} allocation at {shown}")


if __name__ == "__main__":
    main()
