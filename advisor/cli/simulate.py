"""`gpuadvisor simulate`: replay a published trace on a cluster under several placement policies (DESIGN §7).

Reads the files, runs `advisor.sim.run`, and prints a table (or JSON with `--json`); `--plot DIR` writes PNGs.
Bad input exits 2 with one line naming the file, row and column.
"""

from __future__ import annotations

import json
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from advisor.cli.common import err_console, fail
from advisor.placement.types import ScoringInputError
from advisor.sim.jobs import JCT_EXTENDER_WEIGHT, JctResult
from advisor.sim.loaders import (
    SimInputError,
    jobs_from_pods,
    load_cluster,
    load_throughputs,
    load_trace,
    pods_from_jobs,
)
from advisor.sim.model import Job, Pod
from advisor.sim.packing import FRAGMENTATION_EXTENDER_WEIGHT, FragmentationResult
from advisor.sim.rates import truth_table
from advisor.sim.run import (
    SimConfigError,
    advisor_table,
    fragmentation_scoring_config,
    history_lengths,
    jct_scoring_config,
    parse_policies,
    run_fragmentation_mode,
    run_jct_mode,
    scorer_setup,
    trace_lengths,
)

_PIPE_WIDTH = 140


class Mode(StrEnum):
    fragmentation = "fragmentation"
    jct = "jct"


class Knowledge(StrEnum):
    cold = "cold"
    profiled = "profiled"


class AdvisorProfile(StrEnum):
    auto = "auto"
    default = "default"
    packing = "packing"


def _as_pods(trace: list[Pod] | list[Job]) -> list[Pod]:
    if trace and isinstance(trace[0], Job):
        return pods_from_jobs([j for j in trace if isinstance(j, Job)])
    return [p for p in trace if isinstance(p, Pod)]


def _as_jobs(trace: list[Pod] | list[Job], path: Path) -> list[Job]:
    if trace and isinstance(trace[0], Pod):
        return jobs_from_pods([p for p in trace if isinstance(p, Pod)], path)
    return [j for j in trace if isinstance(j, Job)]


def _fragmentation_table(results: list[FragmentationResult]) -> Table:
    table = Table(title="fragmentation: at 100% arrived GPU demand")
    for column in ("policy", "gpu_allocation_ratio", "failed_pods", "fragmentation_ratio", "seconds"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for r in results:
        table.add_row(
            r.policy,
            f"{r.gpu_allocation_ratio:.4f}",
            str(r.failed_pods),
            f"{r.fragmentation_ratio:.4f}",
            f"{r.seconds:.1f}",
        )
    return table


def _jct_table(results: list[JctResult]) -> Table:
    table = Table(title="jct")
    columns = ("policy", "avg_jct_s", "p95_jct_s", "makespan_s", "avg_queue_s", "gpu_utilization", "jobs", "seconds")
    for column in columns:
        table.add_column(column, justify="left" if column == "policy" else "right")
    for r in results:
        table.add_row(
            r.policy,
            f"{r.avg_jct_s:,.0f}",
            f"{r.p95_jct_s:,.0f}",
            f"{r.makespan_s:,.0f}",
            f"{r.avg_queue_s:,.0f}",
            f"{r.gpu_utilization:.4f}",
            str(r.jobs),
            f"{r.seconds:.1f}",
        )
    return table


def simulate(
    *,
    cluster: Annotated[Path, typer.Option(help="Cluster CSV (node,gpu_model,gpus[,links]) or openb node list.")],
    trace: Annotated[Path, typer.Option(help="openb pod list, Philly CSV, Gavel trace or executions CSV.")],
    policies: Annotated[str, typer.Option(help="Comma-separated: random,spread,binpack,fgd,advisor,oracle.")],
    mode: Annotated[Mode, typer.Option(help="fragmentation (pods never leave) or jct (jobs run and leave).")],
    throughputs: Annotated[
        Path | None, typer.Option(help="True throughputs: Gavel JSON, or colocations/throughputs CSV.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the pod sampling, the random policy and placement ties.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    plot: Annotated[Path | None, typer.Option(help="Write PNG plots into this directory.")] = None,
    advisor_profile: Annotated[
        AdvisorProfile,
        typer.Option(
            help="The advisor's scoring profile (docs/advisor.md): auto = packing in fragmentation mode, default in"
            " jct mode."
        ),
    ] = AdvisorProfile.auto,
    advisor_knowledge: Annotated[
        Knowledge,
        typer.Option(
            help="With a Gavel JSON in jct mode, what the advisor's held-out models know of each job: cold = a trial"
            " run on the cheapest GPU type, profiled = 1-GPU trial runs on every GPU type."
        ),
    ] = Knowledge.cold,
    hold_for_blocked: Annotated[
        bool,
        typer.Option(
            help="In jct mode, the advisor and oracle hold nodes for the first blocked job as the service does with"
            " GPUADVISOR_HOLD_FOR_BLOCKED=true (docs/advisor.md)."
        ),
    ] = False,
    shortest_first: Annotated[
        bool,
        typer.Option(
            help="In jct mode, the advisor and oracle serve the queue by response ratio, (waited + predicted run) /"
            " predicted run, as the service does with GPUADVISOR_SHORTEST_FIRST=true (docs/advisor.md)."
        ),
    ] = False,
    advisor_history: Annotated[
        Path | None,
        typer.Option(
            help="In jct mode, a trace of past jobs (any trace format): the advisor and the oracle believe each job as"
            " long as the median of its job type there, as the service's JCT model knows a workload from its history."
            " Without it, the median of the trace's other jobs of its type."
        ),
    ] = None,
    clairvoyant_lengths: Annotated[
        bool,
        typer.Option(
            help="In jct mode, the advisor and the oracle know each job's own length, which no service can (runs"
            " before 2026-11-22 did)."
        ),
    ] = False,
) -> None:
    """Compare placement policies on a trace: GPU allocation under fragmentation, or job completion times."""
    try:
        names = parse_policies(policies, mode.value)
        nodes = load_cluster(cluster)
        loaded = load_trace(trace)
        truth = truth_table(load_throughputs(throughputs)) if throughputs is not None else None
    except (SimInputError, SimConfigError) as e:
        fail(str(e))
    progress = None if as_json else (lambda name: err_console.print(f"running {name} …"))
    report: dict[str, object] = {
        "mode": mode.value,
        "cluster": {"file": str(cluster), "nodes": len(nodes.nodes), "gpus": nodes.total_gpus},
        "trace": {"file": str(trace), "entries": len(loaded)},
        "seed": seed,
    }
    frag: list[FragmentationResult] = []
    jct: list[JctResult] = []
    try:
        if mode is Mode.fragmentation:
            pods = _as_pods(loaded)
            profile = "packing" if advisor_profile is AdvisorProfile.auto else advisor_profile.value
            frag_config = fragmentation_scoring_config(pods, profile)
            if "advisor" in names:
                report["advisor"] = {"profile": profile, **scorer_setup(frag_config, FRAGMENTATION_EXTENDER_WEIGHT)}
            frag = run_fragmentation_mode(nodes, pods, names, seed, progress, config=frag_config)
            report["policies"] = {r.policy: r.to_json() for r in frag}
            table = _fragmentation_table(frag)
        else:
            jobs = _as_jobs(loaded, trace)
            believed, how = advisor_table(throughputs, advisor_knowledge.value) if "advisor" in names else (None, "")
            if how:
                report["advisor_predictors"] = how
            lengths, told = _lengths(jobs, advisor_history, clairvoyant_lengths)
            if {"advisor", "oracle"} & set(names):
                report["advisor_lengths"] = told  # the oracle's too
            profile = "default" if advisor_profile is AdvisorProfile.auto else advisor_profile.value
            config = jct_scoring_config(nodes, jobs, truth, profile)
            config = replace(
                config,
                hold_for_blocked=config.hold_for_blocked or hold_for_blocked,
                shortest_first=config.shortest_first or shortest_first,
            )
            if {"advisor", "oracle"} & set(names):
                report["advisor"] = {"profile": profile, **scorer_setup(config, JCT_EXTENDER_WEIGHT)}
            jct = run_jct_mode(
                nodes,
                jobs,
                names,
                truth=truth,
                believed=believed,
                config=config,
                seed=seed,
                progress=progress,
                lengths=lengths,
            )
            report["policies"] = {r.policy: r.to_json() for r in jct}
            table = _jct_table(jct)
    except (SimInputError, SimConfigError, ScoringInputError) as e:
        fail(str(e))
    plots: list[str] = []
    if plot is not None:
        from advisor.sim.plots import plot_allocation, plot_jct_cdf  # matplotlib: imported only when plotting

        try:
            plot.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            fail(f"--plot: cannot create {plot} ({e.strerror})")
        if frag:
            plots.append(str(plot_allocation(frag, plot / "allocation.png")))
        if jct:
            plots.append(str(plot_jct_cdf(jct, plot / "jct_cdf.png")))
        report["plots"] = plots
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    console = Console()
    if not console.is_terminal:
        console = Console(width=_PIPE_WIDTH)  # a pipe or file gets whole column names, not an 80-column squeeze
    console.print(table)
    setup = report.get("advisor")
    if isinstance(setup, dict):
        weights = ", ".join(f"{k} {v:g}" for k, v in setup["weights"].items())
        console.print(
            f"advisor: {setup['profile']} profile (weights {weights}; extender weight {setup['extender_weight']:g},"
            f" span {setup['extender_span_points']:g} points; {_waiting(setup.get('wait_slack'))})"
        )
    if "advisor_predictors" in report:
        console.print(f"advisor predictors: {report['advisor_predictors']}")
    if "advisor_lengths" in report:
        console.print(f"advisor's and oracle's job lengths: {report['advisor_lengths']}")
    for path in plots:
        console.print(f"plot: {path}")


def _lengths(jobs: list[Job], history: Path | None, clairvoyant: bool) -> tuple[dict[str, float] | None, str]:
    """What the advisor believes of each job's length, and how the report says it."""
    if clairvoyant:
        if history is not None:
            raise SimConfigError("--clairvoyant-lengths and --advisor-history exclude each other")
        return None, "each job's own (clairvoyant, --clairvoyant-lengths)"
    if history is not None:
        past = _as_jobs(load_trace(history), history)
        return history_lengths(past, jobs), f"the median of each job's type over the {len(past)} jobs of {history}"
    return trace_lengths(jobs), "the median of the trace's other jobs of each job's type (leave one out)"


def _waiting(slack: object) -> str:
    """How the report's `wait_slack` reads in the table's setup line."""
    if isinstance(slack, int | float):
        return f"waits for a faster GPU at slack {slack:g}"
    return "never waits for a faster GPU"
