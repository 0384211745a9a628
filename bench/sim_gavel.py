"""Experiment 2 (docs/evaluation.md): JCT on a heterogeneous cluster with Gavel's traces and throughputs.

    .venv/bin/python bench/sim_gavel.py [--arrival-scales 1,1.5,2,3,4] [--seeds 0] [--knowledge cold|profiled]
                                        [--lengths history|exact] [--plot DIR] [--json FILE]
    .venv/bin/python bench/sim_gavel.py --validate [--validate-spans 40,20 | --validate-slacks off,1,1.5,2]

36 K80 + 36 P100 + 36 V100 GPUs, 4 per node (bench/data/gavel_cluster.csv). Each of the three traces in
../shared/data/gavel/traces_seed0_top3.csv is run on its own with spread, binpack, advisor (models trained on held-out
Gavel data, advisor.sim.heldout) and oracle (true throughputs and co-location slowdowns, the same job lengths as the
advisor). Goal: advisor avg JCT ≤ 0.7 × spread and within 15% of the oracle.

Load sweep, as Gavel's own evaluation sweeps the job arrival rate: `--arrival-scales` multiplies every arrival time
by each value in turn (1 = the published traces, which ask for more GPU time than the 108 GPUs have even with every
job on its fastest GPU; 2 = half the arrival rate). `--seeds` are the `gpuadvisor simulate --seed` values (they break
placement ties at random, as kube-scheduler does). Prints the exact command of every run, its table, and a summary
of the goal per trace, scale and seed. Plots are named with the scale.

`--lengths` sets what the advisor and the oracle know of each job's length: `history` (the default, the goal's
protocol), the median of its job type over the other two traces, as the service's JCT model knows a workload from its
history; or `exact`, each job's own (clairvoyant: every run before 2026-11-22 03:30 UTC, and the oracle's before
2026-11-22 07:00 UTC).

`--knowledge` sets what the advisor's held-out models know of each job (`simulate --advisor-knowledge`): `cold`, a
trial run on the K80 only (the protocol of the goal), or `profiled`, 1-GPU trial runs on every GPU type as the
profiler's GPU-type matrix gives (multi-GPU speeds and all co-location still predicted from other job families).
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from advisor.gpus import normalize_gpu_model
from advisor.sim.model import Job
from advisor.sim.rates import RateTable

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "gavel"
CLUSTER = ROOT / "bench" / "data" / "gavel_cluster.csv"
POLICIES = "spread,binpack,advisor,oracle"
GOAL_VS_SPREAD = 0.7
GOAL_VS_ORACLE = 1.15
VALIDATION_TRACE = "msr_vc_6c71a0"
VALIDATION_SCALE = 2.0
VALIDATION_WEIGHTS = (0.5, 1.0, 2.0, 3.0, 5.0)


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


def history_of(trace: Path, traces: list[Path], directory: Path) -> Path:
    """The other traces' jobs in one file: the history from which the advisor knows job lengths (`simulate
    --advisor-history`), disjoint from the jobs it places."""
    path = directory / f"history_without_{trace.stem}.csv"
    lines: list[str] = []
    for other in traces:
        if other != trace:
            rows = other.read_text().splitlines()
            lines += rows if not lines else rows[1:]
    path.write_text("\n".join(lines) + "\n")
    return path


def values(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def run_one(
    trace: Path,
    scale: float,
    seed: int,
    plot: Path | None,
    tmp: Path,
    *,
    knowledge: str = "cold",
    policies: str = POLICIES,
    hold: bool = False,
    shortest_first: bool = False,
    history: Path | None = None,
) -> dict[str, dict[str, float]]:
    """One `gpuadvisor simulate` run; the advisor and oracle know job lengths from `history` (None: each job's
    own)."""
    command = [
        sys.executable, "-m", "advisor.cli", "simulate",
        "--cluster", str(CLUSTER), "--trace", str(trace),
        "--throughputs", str(DATA / "simulation_throughputs.json"),
        "--policies", policies, "--mode", "jct", "--seed", str(seed), "--json",
        "--advisor-knowledge", knowledge,
    ]  # fmt: skip
    if hold:
        command.append("--hold-for-blocked")
    if shortest_first:
        command.append("--shortest-first")
    command += ["--advisor-history", str(history)] if history is not None else ["--clairvoyant-lengths"]
    if plot is not None:
        command += ["--plot", str(tmp)]
    print(f"$ {shlex.join(command)}   # arrivals x{scale:g}", flush=True)
    done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
    report = json.loads(done.stdout)
    if plot is not None:
        plot.mkdir(parents=True, exist_ok=True)
        (tmp / "jct_cdf.png").replace(plot / f"gavel_{trace.stem}_x{scale:g}_s{seed}_jct_cdf.png")
    results: dict[str, dict[str, float]] = report["policies"]
    spread, oracle = results["spread"]["avg_jct_s"], results["oracle"]["avg_jct_s"]
    print(f"trace {trace.stem}: {report['trace']['entries']} jobs, arrivals x{scale:g}, seed {seed}")
    print(f"{'policy':<8} {'avg_jct_s':>11} {'p95_jct_s':>11} {'makespan_s':>12} {'avg_queue_s':>11} "
          f"{'gpu_util':>8} {'/spread':>7} {'/oracle':>7} {'seconds':>7}")  # fmt: skip
    for name, r in results.items():
        print(
            f"{name:<8} {r['avg_jct_s']:>11.0f} {r['p95_jct_s']:>11.0f} {r['makespan_s']:>12.0f} "
            f"{r['avg_queue_s']:>11.0f} {r['gpu_utilization']:>8.3f} {r['avg_jct_s'] / spread:>7.3f} "
            f"{r['avg_jct_s'] / oracle:>7.3f} {r['seconds']:>7.1f}",
            flush=True,
        )
    return results


def validate(
    spans: list[float] | None = None, slacks: list[float | None] | None = None, *, lengths: str = "history"
) -> None:
    """The knob choice of the JCT wiring (advisor.sim.jobs.JCT_EXTENDER_WEIGHT, the trace's task mix), in process:
    avg JCT of advisor and oracle per extender weight, with the scorer's default task mix and with the trace's.
    With `spans`: the trace's task mix at JCT_EXTENDER_WEIGHT, once per `ScoringConfig.extender_span_points`; with
    `slacks`, once per `ScoringConfig.wait_slack` (None: the filter never waits for a faster GPU). `lengths` as
    `--lengths`: the advisor and oracle know job lengths from the other traces ("history") or each job's own
    ("exact")."""
    from advisor.placement.config import ScoringConfig
    from advisor.sim.heldout import heldout_table
    from advisor.sim.jobs import JCT_EXTENDER_WEIGHT, ExtenderJobPolicy, KubeJobPolicy, job_task_mix, run_jct
    from advisor.sim.loaders import load_cluster, load_throughputs, load_trace
    from advisor.sim.rates import truth_table
    from advisor.sim.run import history_lengths

    path = DATA / "simulation_throughputs.json"
    truth, believed = truth_table(load_throughputs(path)), heldout_table(path)
    cluster = load_cluster(CLUSTER)
    with tempfile.TemporaryDirectory() as tmp:
        traces = {
            t.stem: [j for j in load_trace(t) if isinstance(j, Job)]
            for t in split_traces(DATA / "traces_seed0_top3.csv", Path(tmp), VALIDATION_SCALE)
        }
    jobs = traces[VALIDATION_TRACE]
    past = [j for name, others in traces.items() if name != VALIDATION_TRACE for j in others]
    known = history_lengths(past, jobs) if lengths == "history" else None
    print(f"the advisor's and oracle's job lengths: {lengths}")
    seeds = (0, 1, 2)
    spread = [run_jct(cluster, jobs, KubeJobPolicy(most=False, seed=s), truth).avg_jct_s for s in seeds]
    print(f"{VALIDATION_TRACE} x{VALIDATION_SCALE:g}, seeds {seeds}: spread avg JCT {statistics.fmean(spread):,.0f} s")
    trace_mix = job_task_mix(jobs, 4, sharing=True)
    weights: tuple[float, ...] = (JCT_EXTENDER_WEIGHT,)
    if spans:
        grid = [(f"trace, span {x:g}", ScoringConfig(task_mix=trace_mix, extender_span_points=x)) for x in spans]
    elif slacks:
        grid = [(f"trace, wait slack {x}", ScoringConfig(task_mix=trace_mix, wait_slack=x)) for x in slacks]
    else:
        grid = [("default", ScoringConfig()), ("trace", ScoringConfig(task_mix=trace_mix))]
        weights = VALIDATION_WEIGHTS
    for mix, config in grid:
        for weight in weights:
            avg = {
                name: statistics.fmean(
                    run_jct(
                        cluster, jobs,
                        ExtenderJobPolicy(
                            name, cluster, table, config, extender_weight=weight, seed=s,
                            lengths=known,
                        ),
                        truth,
                    ).avg_jct_s
                    for s in seeds
                )
                for name, table in (("advisor", believed), ("oracle", truth))
            }  # fmt: skip
            print(
                f"task mix {mix:<7} weight {weight:>3g}: advisor {avg['advisor']:>9,.0f} s, oracle "
                f"{avg['oracle']:>9,.0f} s, advisor/spread {avg['advisor'] / statistics.fmean(spread):.3f}, "
                f"advisor/oracle {avg['advisor'] / avg['oracle']:.3f}",
                flush=True,
            )


def print_model_errors(knowledge: str = "cold") -> None:
    """What the advisor gets wrong: its held-out predictions (advisor.sim.heldout) against Gavel's measurements."""
    from advisor.sim.heldout import heldout_table, prediction_errors
    from advisor.sim.loaders import load_throughputs
    from advisor.sim.rates import truth_table

    path = DATA / "simulation_throughputs.json"
    truth = truth_table(load_throughputs(path))
    with tempfile.TemporaryDirectory() as tmp:
        for trace in split_traces(DATA / "traces_seed0_top3.csv", Path(tmp), 1.0):
            print(f"{trace.stem}: least load at arrivals x1 (no co-location): {least_load(trace, truth):.2f}")
    believed = heldout_table(path, knowledge=knowledge)
    for name, value in prediction_errors(believed, truth).items():
        print(f"{name:<22} {value:.3f}")
    for model in ("p100", "v100"):
        for label, counts in (("1 GPU", (1,)), ("2-8 GPUs, one node", (2, 4, 8))):
            keys = [k for k in truth.isolated if k[0] == model and k[2] in counts and k[3] and k in believed.isolated]
            ape = [abs(believed.isolated[k] / truth.isolated[k] - 1) for k in keys]
            print(f"mape_{model}, {label}: {statistics.fmean(ape):.3f} ({len(keys)} job types x counts)")
    types = sorted({k[1] for k in truth.isolated if k[2] == 1 and k[3]})
    for table in (believed, truth):
        ratios = [(table.speed("v100", t, 1, True) or 0.0) / (table.speed("k80", t, 1, True) or 1.0) for t in types]
        span = f"{min(ratios):.2f}-{max(ratios):.2f}"
        print(f"{table.name}: 1-GPU V100/K80 speed ratio over {len(types)} job types {span}")


def least_load(trace: Path, truth: RateTable) -> float:
    """The least load any placement can run the trace at, co-location aside: the smallest λ such that the jobs'
    GPU-seconds, split (even fractionally) over the GPU models, fit in λ × each model's GPUs × the arrival span (a
    linear programme). Falls as 1 / the arrival scale; above 1 queues grow whatever the placement."""
    from scipy.optimize import linprog

    from advisor.sim.loaders import load_cluster, load_trace

    cluster = load_cluster(CLUSTER)
    gpus: dict[str, int] = {}
    for node in cluster.nodes:
        model = normalize_gpu_model(node.gpu_model)
        gpus[model] = gpus.get(model, 0) + node.gpus
    models = sorted(gpus)
    jobs = [j for j in load_trace(trace) if isinstance(j, Job)]
    span = max(j.arrival_s for j in jobs) - min(j.arrival_s for j in jobs)
    n, m = len(jobs), len(models)
    cost = np.array(
        [[job.num_gpus * job.work / (truth.speed(t, job.job_type, job.num_gpus, True) or 1e-9) for t in models]
         for job in jobs]
    )  # fmt: skip
    # Variables: x[j, t] (row-major), then λ. Minimise λ.
    objective = np.zeros(n * m + 1)
    objective[-1] = 1.0
    each_job_once = np.zeros((n, n * m + 1))
    for j in range(n):
        each_job_once[j, j * m : (j + 1) * m] = 1.0
    capacity = np.zeros((m, n * m + 1))
    for t, model in enumerate(models):
        capacity[t, t : n * m : m] = cost[:, t]
        capacity[t, -1] = -gpus[model] * span
    result = linprog(objective, A_ub=capacity, b_ub=np.zeros(m), A_eq=each_job_once, b_eq=np.ones(n), method="highs")
    return float(result.x[-1])


def print_report(runs: list[dict[str, Any]]) -> None:
    """Markdown: per trace and arrival scale, each policy's avg JCT (mean over seeds) and the advisor's ratios."""
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["trace"], run["arrival_scale"]), []).append(run)
    names = tuple(n for n in ("spread", "binpack", "advisor", "oracle") if all(n in r["policies"] for r in runs))
    print("| trace | arrivals | seeds | " + " | ".join(f"{n} avg JCT (s)" for n in names) + " | advisor / spread "
          "| advisor / oracle | oracle / spread | both goals |")  # fmt: skip
    print("|---" * (len(names) + 7) + "|")
    for (trace, scale), group in sorted(groups.items()):
        mean = {n: statistics.fmean(r["policies"][n]["avg_jct_s"] for r in group) for n in names}
        ratio = {
            key: [r["policies"][a]["avg_jct_s"] / r["policies"][b]["avg_jct_s"] for r in group]
            for key, (a, b) in {
                "as": ("advisor", "spread"),
                "ao": ("advisor", "oracle"),
                "os": ("oracle", "spread"),
            }.items()
        }
        met = sum(x <= GOAL_VS_SPREAD and y <= GOAL_VS_ORACLE for x, y in zip(ratio["as"], ratio["ao"], strict=True))
        cells = [f"{mean[n]:,.0f}" for n in names] + [spread_of(ratio[k]) for k in ("as", "ao", "os")]
        seeds = ",".join(str(r["seed"]) for r in group)
        print(f"| {trace} | ×{scale:g} | {seeds} | " + " | ".join(cells) + f" | {met} of {len(group)} |")


def spread_of(values: list[float]) -> str:
    """Mean, with the range over seeds."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.fmean(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arrival-scales", default="1,1.5,2,3,4", help="comma-separated arrival-time multipliers")
    parser.add_argument("--seeds", default="0", help="comma-separated simulate --seed values")
    parser.add_argument("--plot", type=Path, default=None, help="write gavel_<trace>_x<scale>_s<seed>_jct_cdf.png here")
    parser.add_argument("--json", type=Path, default=None, help="write every run's per-policy figures here")
    parser.add_argument(
        "--policies", default=POLICIES, help=f"simulate --policies (default {POLICIES}; spread and oracle are needed)"
    )
    parser.add_argument(
        "--knowledge", choices=("cold", "profiled"), default="cold",
        help="what the advisor's models know of each job (simulate --advisor-knowledge): a K80 trial run, or 1-GPU"
        " trial runs on every GPU type",
    )  # fmt: skip
    parser.add_argument(
        "--hold", action="store_true",
        help="the advisor and oracle hold nodes for the first blocked job (simulate --hold-for-blocked)",
    )  # fmt: skip
    parser.add_argument(
        "--shortest-first", action="store_true",
        help="the advisor and oracle serve the queue by response ratio (simulate --shortest-first)",
    )  # fmt: skip
    parser.add_argument(
        "--lengths", choices=("history", "exact"), default="history",
        help="what the advisor and oracle know of each job's length: the median of its job type over the other two"
        " traces (simulate --advisor-history; the goal's protocol), or each job's own (clairvoyant, as before"
        " 2026-11-22)",
    )  # fmt: skip
    parser.add_argument(
        "--model-errors", action="store_true", help="only print the held-out models' errors and each trace's load"
    )
    parser.add_argument("--report", type=Path, nargs="+", help="only print markdown tables of earlier --json files")
    parser.add_argument(
        "--validate", action="store_true", help="only run the knob choice: extender weights and task mixes on the "
        f"validation run ({VALIDATION_TRACE} at arrivals x{VALIDATION_SCALE:g}, seeds 0-2)"
    )  # fmt: skip
    parser.add_argument(
        "--validate-spans", default=None, help="with --validate: compare these extender spans (comma-separated) instead"
    )
    parser.add_argument(
        "--validate-slacks", default=None,
        help="with --validate: compare these wait slacks (comma-separated; 'off' never waits) instead",
    )  # fmt: skip
    args = parser.parse_args()
    if args.report:
        print_report([run for path in args.report for run in json.loads(path.read_text())])
        return
    if not DATA.exists():
        sys.exit(f"Gavel data not found at {DATA}")
    if args.model_errors:
        print_model_errors(args.knowledge)
        return
    if args.validate:
        validate(
            [float(x) for x in values(args.validate_spans)] if args.validate_spans else None,
            [None if x == "off" else float(x) for x in values(args.validate_slacks)] if args.validate_slacks else None,
            lengths=args.lengths,
        )
        return
    runs: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for scale in map(float, values(args.arrival_scales)):
            traces = split_traces(DATA / "traces_seed0_top3.csv", tmp, scale)
            for trace in traces:
                history = history_of(trace, traces, tmp) if args.lengths == "history" else None
                for seed in map(int, values(args.seeds)):
                    policies = run_one(
                        trace, scale, seed, args.plot, tmp, knowledge=args.knowledge, policies=args.policies,
                        hold=args.hold, shortest_first=args.shortest_first, history=history,
                    )  # fmt: skip
                    runs.append(
                        {
                            "trace": trace.stem,
                            "arrival_scale": scale,
                            "seed": seed,
                            "knowledge": args.knowledge,
                            "hold_for_blocked": args.hold,
                            "shortest_first": args.shortest_first,
                            "lengths": args.lengths,
                            "policies": policies,
                        }
                    )
    print("\nsummary (avg JCT ratios; goal: advisor/spread <= 0.7 and advisor/oracle <= 1.15)")
    print(f"{'trace':<14} {'scale':>5} {'seed':>4} {'adv/spread':>10} {'adv/oracle':>10} {'orc/spread':>10}  goals")
    met = 0
    for run in runs:
        p = run["policies"]
        assert isinstance(p, dict)
        adv, spread, oracle = (p[k]["avg_jct_s"] for k in ("advisor", "spread", "oracle"))
        both = adv / spread <= GOAL_VS_SPREAD and adv / oracle <= GOAL_VS_ORACLE
        met += both
        print(
            f"{run['trace']!s:<14} {run['arrival_scale']:>5g} {run['seed']!s:>4} {adv / spread:>10.3f} "
            f"{adv / oracle:>10.3f} {oracle / spread:>10.3f}  {'both met' if both else '-'}"
        )
    print(f"both goals met in {met} of {len(runs)} runs")
    if args.json is not None:
        args.json.write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    main()
