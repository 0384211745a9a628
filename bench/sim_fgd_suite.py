"""The FGD paper's trace suite (docs/evaluation.md, "The paper's policies on its traces"): every openb pod list in
../shared/data/openb × the paper's policies and the advisor, GPU allocation at 100 % arrived GPU demand, mean over
seeds, beside the authors' published FGD numbers; the slowest run of each policy in seconds (goal: ≤ 60 s).

    .venv/bin/python bench/sim_fgd_suite.py [--seeds 1,2,3] [--traces default,gpuspec20] [--policies fgd,advisor]
    .venv/bin/python bench/sim_fgd_suite.py --policies fgd --ties random|--scores float|--coverage 1|--cpu-only ours
        |--order sampled      (one of the authors' choices undone: the ablations of docs/evaluation.md)

Runs in-process what `gpuadvisor simulate --mode fragmentation` runs (`advisor.sim.run`), with the FGD policy's
choices exposed as flags.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = next(
    (p / "shared" / "data" / "openb" for p in ROOT.parents if (p / "shared" / "data" / "openb").exists()),
    ROOT.parent / "shared" / "data" / "openb",
)
"""../shared/data/openb, looked for upward from the checkout (a worktree sits one level deeper)."""
AUTHORS_FGD_PERCENT = {
    "default": 95.23,
    "gpushare40": 93.96,
    "multigpu30": 96.36,
    "gpuspec20": 94.66,
    "cpu100": 95.21,
}
"""The authors' FGD at 100 % arrived GPU demand, mean of their 10 seeds (../shared/data/README.md, openb)."""
POLICIES = ("random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd", "advisor")


def main() -> None:
    from advisor.sim.baselines import AuthorsFgd, fragmentation_milli, typical_pods
    from advisor.sim.loaders import load_cluster, load_trace
    from advisor.sim.model import Pod
    from advisor.sim.packing import MAX_ARRIVED_RATIO, SEQUENCES, PackPolicy, run_fragmentation
    from advisor.sim.run import fragmentation_policy, fragmentation_scoring_config, with_model_task_mixes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--traces", default=",".join(AUTHORS_FGD_PERCENT))
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--ties", choices=("first", "random"), default="first", help="fgd: equal scores")
    parser.add_argument("--scores", choices=("integer", "float"), default="integer", help="fgd: score form")
    parser.add_argument("--coverage", type=float, default=0.95, help="fgd: share of pods the target specs cover")
    parser.add_argument("--cpu-only", choices=("authors", "ours"), default="authors", help="fgd: CPU-only tasks")
    parser.add_argument("--order", choices=tuple(SEQUENCES), default="authors", help="how the trace is replayed")
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"openb data not found at {DATA}")
    seeds = [int(s) for s in args.seeds.split(",")]
    names = args.policies.split(",")
    cluster = load_cluster(DATA / "openb_node_list_gpu_node.csv")
    print(f"seeds {seeds}; fgd: ties {args.ties}, {args.scores} scores, coverage {args.coverage:g}, CPU-only tasks "
          f"{args.cpu_only}; order {args.order}")  # fmt: skip
    print(f"{'trace':<12}" + "".join(f"{n:>14}" for n in names) + f"{'authors fgd':>13}")
    slowest = dict.fromkeys(names, 0.0)
    for trace in args.traces.split(","):
        pods = [p for p in load_trace(DATA / f"openb_pod_list_{trace}.csv") if isinstance(p, Pod)]
        typical = typical_pods(pods, coverage_ratio=args.coverage)
        config = with_model_task_mixes(cluster, pods, fragmentation_scoring_config(pods))
        allocation: dict[str, list[float]] = {n: [] for n in names}
        for seed in seeds:
            sequence = SEQUENCES[args.order](pods, cluster.total_gpus, seed, MAX_ARRIVED_RATIO)
            for name in names:
                policy: PackPolicy
                if name == "fgd":
                    policy = AuthorsFgd(
                        cluster,
                        typical,
                        integer_scores=args.scores == "integer",
                        cpu_only_all_fragment=args.cpu_only == "authors",
                        rng=np.random.default_rng(seed) if args.ties == "random" else None,
                    )
                else:
                    policy = fragmentation_policy(name, cluster, config, seed, typical)
                result = run_fragmentation(
                    cluster, pods, sequence, policy, partial(fragmentation_milli, typical, cluster)
                )
                allocation[name].append(100 * result.gpu_allocation_ratio)
                slowest[name] = max(slowest[name], result.seconds)
                done = f"{100 * result.gpu_allocation_ratio:.2f} ({result.failed_pods} failed, {result.seconds:.1f} s)"
                print(f"  {trace} seed {seed} {name}: {done}", file=sys.stderr, flush=True)
        reference = AUTHORS_FGD_PERCENT.get(trace)
        print(
            f"{trace:<12}"
            + "".join(f"{statistics.mean(allocation[n]):>14.2f}" for n in names)
            + (f"{reference:>13.2f}" if reference is not None else f"{'':>13}"),
            flush=True,
        )
    print(f"{'slowest s':<12}" + "".join(f"{slowest[n]:>14.1f}" for n in names))


if __name__ == "__main__":
    main()
