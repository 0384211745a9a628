"""Experiment (docs/evaluation.md, "MIG variant"): openb with a share of its GPU nodes partitioned with MIG, against
the same pods on whole GPUs.

    .venv/bin/python bench/sim_openb_mig.py [--seed N] [--mig-node-ratio 0.3] [--trace default|gpushare40|...]

Builds the variant as `advisor.sim.mig` describes (GPU-share pods take MIG instances of the smallest A100 profile
their share fits), places the same seeded pod sequence as fragmentation mode (`authors_sequence`) with first-fit, our
fgd and the advisor, once on the MIG variant and once with no node partitioned, and prints the GPU allocation at 100 %
arrived demand, the failed GPU pods, the pods placed on MIG instances and the share of MIG capacity taken. Last line:
JSON of every figure.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "openb"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mig-node-ratio", type=float, default=0.3)
    parser.add_argument("--trace", default="default", help="openb pod list: openb_pod_list_<TRACE>.csv")
    args = parser.parse_args()
    if not 0.0 <= args.mig_node_ratio <= 1.0:
        parser.error(f"--mig-node-ratio must be within 0..1, got {args.mig_node_ratio}")
    trace = DATA / f"openb_pod_list_{args.trace}.csv"
    if not trace.is_file():
        parser.error(f"no openb trace {trace} (see ../shared/data/README.md)")

    from advisor.sim.baselines import authors_node_rank, typical_pods
    from advisor.sim.loaders import load_cluster, load_trace
    from advisor.sim.mig import MIG_POLICIES, FirstFitPolicy, mig_nodes, run_mig
    from advisor.sim.model import Pod
    from advisor.sim.packing import MAX_ARRIVED_RATIO, PackPolicy, authors_sequence
    from advisor.sim.run import fragmentation_policy, fragmentation_scoring_config, with_model_task_mixes

    cluster = load_cluster(DATA / "openb_node_list_gpu_node.csv")
    pods = [p for p in load_trace(trace) if isinstance(p, Pod)]
    sequence = authors_sequence(pods, cluster.total_gpus, args.seed, MAX_ARRIVED_RATIO)
    config = with_model_task_mixes(cluster, pods, fragmentation_scoring_config(pods))
    typical = typical_pods(pods)
    node_rank = authors_node_rank(cluster, args.seed)
    partitioned = mig_nodes(cluster, args.mig_node_ratio, args.seed)
    print(
        f"openb {args.trace}, seed {args.seed}: {len(partitioned)} of {len(cluster.nodes)} nodes in MIG "
        f"({sum(cluster.nodes[n].gpus for n in partitioned)} of {cluster.total_gpus} GPUs), {len(sequence)} pods arrive"
    )
    print(
        f"{'layout':<12} {'policy':<10} {'gpu_allocation':>14} {'failed_pods':>11} {'mig_pods':>8} {'mig_taken':>9} "
        f"{'s':>6}"
    )
    figures: dict[str, dict[str, dict[str, float]]] = {}
    for layout, nodes in (("mig", partitioned), ("whole-gpus", [])):
        for name in MIG_POLICIES:
            policy: PackPolicy = (
                FirstFitPolicy()
                if name == "first-fit"
                else fragmentation_policy(name, cluster, config, args.seed, typical)
            )
            r = run_mig(
                cluster,
                pods,
                sequence,
                policy,
                mig_choice="advisor" if name == "advisor" else "first",
                partitioned=nodes,
                node_rank=node_rank,
            )
            print(
                f"{layout:<12} {name:<10} {r.gpu_allocation_ratio:>14.4f} {r.failed_pods:>11} {r.mig_pods:>8} "
                f"{r.mig_allocation_ratio:>9.4f} {r.seconds:>6.1f}",
                flush=True,
            )
            figures.setdefault(layout, {})[name] = {
                "gpu_allocation_ratio": round(r.gpu_allocation_ratio, 4),
                "failed_pods": r.failed_pods,
                "mig_pods": r.mig_pods,
                "mig_allocation_ratio": round(r.mig_allocation_ratio, 4),
            }
    print(json.dumps({"trace": args.trace, "seed": args.seed, "mig_node_ratio": args.mig_node_ratio, **figures}))


if __name__ == "__main__":
    main()
