"""The simulator at cluster scale: wall time of each policy on ×1, ×2, ×4 copies of one cluster and its trace, and the
ratio to ×1 (goal: ×4 nodes ≤ 6× the time, i.e. near-linear, since the trace grows with the cluster).

    .venv/bin/python bench/sim_scale.py [--scales 1,2,4] [--fragmentation-policies fgd] [--jct-policies spread,oracle]
                                        [--jobs 400] [--lengths trace|own] [--hold-for-blocked] [--shortest-first]
                                        [--seed 0] [--repeat 1] [--digest]

Fragmentation mode: openb's node list (../shared/data/openb, 1,213 nodes) repeated k times (node names suffixed
`~1`, `~2`, ...) and the default pod list repeated k times, so the inflated sequence (`authors_sequence`) asks for
130 % of the k-times larger cluster; the policies as `gpuadvisor simulate --mode fragmentation` builds them.
JCT mode: Gavel's cluster (bench/data/gavel_cluster.csv, 108 GPUs) repeated k times and the first `--jobs` jobs of
trace msr_vc_6c71a0 at half its arrival rate, each job k times (same arrival, ids suffixed), with Gavel's true
throughputs (`oracle` scores with them: the advisor's own code path without training held-out models first) and,
as `gpuadvisor simulate` by default, each job's length believed from the trace's other jobs of its type (`--lengths
own`: its own); `--hold-for-blocked` / `--shortest-first` switch those rules on in the advisor's and the oracle's
scorer, as the CLI's flags do. Each policy's time is its run's `seconds` (placement loop and bookkeeping; loading
excluded), and beside it the CPU time of this process over the run (steadier than the wall time on a shared machine;
the ratio is given for both). `--repeat N` runs each N times and keeps the least of each time (the run's own cost,
less what other work on the machine added); the runs are seeded, so their outcomes must agree.

`--digest` prints a hash of every run's outcome (allocation curves, JCTs) instead of timing alone: two checkouts
that print the same digests placed every pod and job identically.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's advisor, also when run from another directory
SHARED = next(
    (p / "shared" / "data" for p in ROOT.parents if (p / "shared" / "data" / "openb").exists()),
    ROOT.parent / "shared" / "data",
)
"""../shared/data, looked for upward from the checkout (a worktree sits one level deeper)."""
GAVEL_TRACE = "msr_vc_6c71a0"
GAVEL_ARRIVAL_SCALE = 2.0


def main() -> None:  # noqa: PLR0912, PLR0915 - a benchmark's steps in the order it reports them
    from advisor.sim.baselines import typical_pods
    from advisor.sim.loaders import load_cluster, load_throughputs, load_trace
    from advisor.sim.model import Cluster, Job, Pod
    from advisor.sim.rates import truth_table
    from advisor.sim.run import jct_scoring_config, run_fragmentation_mode, run_jct_mode, trace_lengths

    def replicate(cluster: Cluster, k: int) -> Cluster:
        """The node list k times, copy c > 0 with names suffixed `~c`."""
        return Cluster(
            tuple(n if c == 0 else replace(n, name=f"{n.name}~{c}") for c in range(k) for n in cluster.nodes)
        )

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="1,2,4")
    parser.add_argument("--fragmentation-policies", default="fgd")
    parser.add_argument("--jct-policies", default="spread,oracle")
    parser.add_argument("--jobs", type=int, default=400, help="JCT mode: jobs of the Gavel trace at ×1")
    parser.add_argument(
        "--lengths",
        choices=("trace", "own"),
        default="trace",
        help="JCT mode: what the oracle believes of job lengths: the trace's other jobs of the type (the CLI's "
        "default) or each job's own",
    )
    parser.add_argument("--hold-for-blocked", action="store_true", help="JCT mode: ScoringConfig.hold_for_blocked")
    parser.add_argument("--shortest-first", action="store_true", help="JCT mode: ScoringConfig.shortest_first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each policy and scale; the least times count")
    parser.add_argument("--digest", action="store_true", help="print a hash of each run's outcome")
    args = parser.parse_args()
    scales = [int(s) for s in args.scales.split(",")]
    frag_policies = [p for p in args.fragmentation_policies.split(",") if p]
    jct_policies = [p for p in args.jct_policies.split(",") if p]
    openb = SHARED / "openb"
    gavel = SHARED / "gavel"
    if not openb.exists() or not gavel.exists():
        sys.exit(f"openb / gavel data not found under {SHARED}")

    timings: dict[tuple[str, str], dict[int, tuple[float, float]]] = {}  # (wall, CPU) seconds per scale
    if frag_policies:
        base_cluster = load_cluster(openb / "openb_node_list_gpu_node.csv")
        base_pods = [p for p in load_trace(openb / "openb_pod_list_default.csv") if isinstance(p, Pod)]
        for k in scales:
            cluster = replicate(base_cluster, k)
            pods = [p if c == 0 else replace(p, name=f"{p.name}~{c}") for c in range(k) for p in base_pods]
            typical_pods(pods)  # warm imports outside the timings
            for name in frag_policies:
                wall = cpu = math.inf
                outcomes = set()
                for _ in range(args.repeat):
                    started = time.process_time()
                    (result,) = run_fragmentation_mode(cluster, pods, [name], args.seed)
                    cpu = min(cpu, time.process_time() - started)
                    wall = min(wall, result.seconds)
                    outcome = [result.allocation_ratio, result.failed_curve, result.fragmentation_ratio]
                    outcomes.add(hashlib.sha256(json.dumps(outcome).encode()).hexdigest()[:16])
                if len(outcomes) > 1:
                    sys.exit(f"fragmentation ×{k} {name}: repeated runs differ")
                timings.setdefault(("fragmentation", name), {})[k] = (wall, cpu)
                line = (
                    f"fragmentation ×{k}: {len(cluster.nodes)} nodes, {len(pods)} pods, {name}: "
                    f"{wall:.2f} s (CPU {cpu:.2f} s), allocation {result.gpu_allocation_ratio:.4f}"
                )
                if args.digest:
                    line += f", digest {outcomes.pop()}"
                print(line, flush=True)
    if jct_policies:
        base_cluster = load_cluster(ROOT / "bench" / "data" / "gavel_cluster.csv")
        truth = truth_table(load_throughputs(gavel / "simulation_throughputs.json"))
        every = [j for j in load_trace(gavel / "traces_seed0_top3.csv") if isinstance(j, Job)]
        base_jobs = [
            replace(j, arrival_s=j.arrival_s * GAVEL_ARRIVAL_SCALE) for j in every if j.job_id.startswith(GAVEL_TRACE)
        ][: args.jobs]
        for k in scales:
            cluster = replicate(base_cluster, k)
            jobs = [j if c == 0 else replace(j, job_id=f"{j.job_id}~{c}") for j in base_jobs for c in range(k)]
            config = replace(
                jct_scoring_config(cluster, jobs, truth),
                hold_for_blocked=args.hold_for_blocked,
                shortest_first=args.shortest_first,
            )
            given = trace_lengths(jobs) if args.lengths == "trace" else None
            for name in jct_policies:
                wall = cpu = whole = math.inf
                outcomes = set()
                for _ in range(args.repeat):
                    started, on_cpu = time.perf_counter(), time.process_time()
                    (result,) = run_jct_mode(
                        cluster, jobs, [name], truth=truth, believed=None, config=config, seed=args.seed, lengths=given
                    )
                    cpu = min(cpu, time.process_time() - on_cpu)
                    whole = min(whole, time.perf_counter() - started)
                    wall = min(wall, result.seconds)
                    outcome = [result.jct_s, result.avg_queue_s, result.makespan_s, result.gpu_utilization]
                    outcomes.add(hashlib.sha256(json.dumps(outcome).encode()).hexdigest()[:16])
                if len(outcomes) > 1:
                    sys.exit(f"jct ×{k} {name}: repeated runs differ")
                timings.setdefault(("jct", name), {})[k] = (wall, cpu)
                line = (
                    f"jct ×{k}: {len(cluster.nodes)} nodes, {len(jobs)} jobs, {name}: {wall:.2f} s "
                    f"({whole:.2f} s with set-up, CPU {cpu:.2f} s), avg JCT {result.avg_jct_s:.0f} s"
                )
                if args.digest:
                    line += f", digest {outcomes.pop()}"
                print(line, flush=True)

    print()
    print(f"{'mode':<14} {'policy':<8} " + " ".join(f"{'×' + str(k):>8}" for k in scales) + "  ratio ×max/×min")
    for (mode, name), by_scale in timings.items():
        for label, i in (("wall", 0), ("CPU", 1)):
            cells = " ".join(f"{by_scale[k][i]:>7.2f}s" for k in scales)
            low, high = by_scale[scales[0]][i], by_scale[scales[-1]][i]
            ratio = high / low if low > 0 else float("nan")
            print(f"{mode:<14} {name:<8} {cells}  {ratio:.1f} ({label})")


if __name__ == "__main__":
    main()
