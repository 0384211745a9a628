"""`gpuadvisor simulate`: replay a published trace on a cluster under several placement policies (docs/evaluation.md).

Reads the files, runs `advisor.sim.run`, and prints a table (or JSON with `--json`); `--plot DIR` writes PNGs.
Bad input exits 2 with one line naming the file, row and column. A file holding several traces (Gavel's, one per
virtual cluster) is replayed one trace at a time: `--trace-name` picks it, never a silent merge of all of them.
Each policy's run is a stage of the progress on stderr (a bar on a terminal, one line per policy otherwise).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from advisor.cli.common import Stages, fail
from advisor.placement.types import ScoringInputError
from advisor.sim.jobs import JCT_EXTENDER_WEIGHT, JctResult
from advisor.sim.loaders import jobs_from_pods, load_cluster, load_throughputs, load_trace, pods_from_jobs
from advisor.sim.model import Cluster, Job, Pod
from advisor.sim.packing import FRAGMENTATION_EXTENDER_WEIGHT, FragmentationResult
from advisor.sim.rates import RateTable, truth_table
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
from profiler.csv_formats import InputDataError

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


_ProfileOption = Annotated[
    AdvisorProfile,
    typer.Option(
        help="The advisor's scoring profile (docs/advisor.md): auto = packing in fragmentation mode, default in"
        " jct mode."
    ),
]

_KnowledgeOption = Annotated[
    Knowledge,
    typer.Option(
        help="With a Gavel JSON in jct mode, what the advisor's held-out models know of each job: cold = a trial"
        " run on the cheapest GPU type, profiled = 1-GPU trial runs on every GPU type."
    ),
]

_HoldOption = Annotated[
    bool,
    typer.Option(
        help="In jct mode, the advisor and oracle hold nodes for the first blocked job as the service does with"
        " GPUADVISOR_HOLD_FOR_BLOCKED=true (docs/advisor.md)."
    ),
]

_ShortestFirstOption = Annotated[
    bool,
    typer.Option(
        help="In jct mode, the advisor and oracle serve the queue by response ratio, (waited + predicted run) /"
        " predicted run, as the service does with GPUADVISOR_SHORTEST_FIRST=true (docs/advisor.md)."
    ),
]

_HistoryOption = Annotated[
    Path | None,
    typer.Option(
        help="In jct mode, a trace of past jobs (any trace format): the advisor and the oracle believe each job as"
        " long as the median of its job type there, as the service's JCT model knows a workload from its history."
        " Without it, the median of the trace's other jobs of its type."
    ),
]

_ClairvoyantOption = Annotated[
    bool,
    typer.Option(
        help="In jct mode, the advisor and the oracle know each job's own length, which no service can (an upper"
        " bound of what better length predictions could gain)."
    ),
]

_PoliciesOption = Annotated[
    str,
    typer.Option(
        help="Comma-separated. fragmentation: random,dotprod,gpuclustering,gpupacking,bestfit,fgd,spread,"
        "binpack,advisor; jct: spread,binpack,advisor,oracle."
    ),
]


def simulate(
    *,
    cluster: Annotated[Path, typer.Option(help="Cluster CSV (node,gpu_model,gpus[,links]) or openb node list.")],
    trace: Annotated[Path, typer.Option(help="openb pod list, Philly CSV, Gavel trace or executions CSV.")],
    policies: _PoliciesOption,
    mode: Annotated[Mode, typer.Option(help="fragmentation (pods never leave) or jct (jobs run and leave).")],
    throughputs: Annotated[
        Path | None, typer.Option(help="True throughputs: Gavel JSON, or colocations/throughputs CSV.")
    ] = None,
    seed: Annotated[
        int,
        typer.Option(min=0, max=2**32 - 1, help="Seed of the pod sampling, the random policy and placement ties."),
    ] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    plot: Annotated[
        Path | None,
        typer.Option(help="Write PNG plots into this directory (created if missing; its parent must exist)."),
    ] = None,
    trace_name: Annotated[
        str | None,
        typer.Option(help="Which trace of a file that holds several (a Gavel trace file's `trace` column) to replay."),
    ] = None,
    advisor_profile: _ProfileOption = AdvisorProfile.auto,
    advisor_knowledge: _KnowledgeOption = Knowledge.cold,
    hold_for_blocked: _HoldOption = False,
    shortest_first: _ShortestFirstOption = False,
    advisor_history: _HistoryOption = None,
    clairvoyant_lengths: _ClairvoyantOption = False,
) -> None:
    """Compare placement policies on a trace: GPU allocation under fragmentation, or job completion times."""
    if plot is not None and not plot.parent.is_dir():
        fail(f"--plot: directory {plot.parent} does not exist")
    try:
        names = parse_policies(policies, mode.value)
        with Stages(quiet=as_json).stage("inputs read"):
            nodes = load_cluster(cluster)
            loaded = _one_trace(load_trace(trace), trace, trace_name)
            truth = truth_table(load_throughputs(throughputs)) if throughputs is not None else None
    except (InputDataError, SimConfigError) as e:
        fail(str(e))
    except OSError as e:
        fail(f"{e.filename}: {e.strerror or e}")
    stages = Stages(quiet=as_json)
    report: dict[str, object] = {
        "mode": mode.value,
        "cluster": {"file": str(cluster), "nodes": len(nodes.nodes), "gpus": nodes.total_gpus},
        "trace": {"file": str(trace), "entries": len(loaded), **({"name": trace_name} if trace_name else {})},
        "seed": seed,
    }
    frag: list[FragmentationResult] = []
    jct: list[JctResult] = []
    try:
        if mode is Mode.fragmentation:
            frag = _fragmentation(
                nodes, loaded, names, seed=seed, stages=stages, report=report, advisor_profile=advisor_profile
            )
            table = _fragmentation_table(frag)
        else:
            options = _JctOptions(
                throughputs, advisor_profile, advisor_knowledge, hold_for_blocked, shortest_first, advisor_history,
                clairvoyant_lengths,
            )  # fmt: skip
            jobs = _as_jobs(loaded, trace)
            jct = _jct(nodes, jobs, names, seed=seed, truth=truth, stages=stages, report=report, options=options)
            table = _jct_table(jct)
    except (InputDataError, SimConfigError, ScoringInputError) as e:
        fail(str(e))
    plots: list[str] = []
    if plot is not None:
        trace_label = f"{trace.name}" + (f" ({trace_name})" if trace_name else "")
        label = f"{trace_label} on {len(nodes.nodes)} nodes, {nodes.total_gpus} GPUs, seed {seed}"
        plots = report["plots"] = _plots(plot, frag, jct, label)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    _print_report(table, report, plots)


def _fragmentation(
    nodes: Cluster,
    loaded: list[Pod] | list[Job],
    names: list[str],
    *,
    seed: int,
    stages: Stages,
    report: dict[str, object],
    advisor_profile: AdvisorProfile,
) -> list[FragmentationResult]:
    pods = _as_pods(loaded)
    profile = "packing" if advisor_profile is AdvisorProfile.auto else advisor_profile.value
    frag_config = fragmentation_scoring_config(pods, profile)
    if "advisor" in names:
        report["advisor"] = {"profile": profile, **scorer_setup(frag_config, FRAGMENTATION_EXTENDER_WEIGHT)}
    with _PolicyProgress(stages, names) as progress:
        frag = run_fragmentation_mode(nodes, pods, names, seed, progress, config=frag_config)
    report["policies"] = {r.policy: r.to_json() for r in frag}
    return frag


@dataclass(frozen=True, slots=True)
class _JctOptions:
    """`simulate`'s options that only jct mode reads."""

    throughputs: Path | None
    advisor_profile: AdvisorProfile
    advisor_knowledge: Knowledge
    hold_for_blocked: bool
    shortest_first: bool
    advisor_history: Path | None
    clairvoyant_lengths: bool


def _jct(
    nodes: Cluster,
    jobs: list[Job],
    names: list[str],
    *,
    seed: int,
    truth: RateTable | None,
    stages: Stages,
    report: dict[str, object],
    options: _JctOptions,
) -> list[JctResult]:
    believed, how = None, ""
    if "advisor" in names:
        with stages.stage(
            "the advisor's predictions ready",
            "preparing the advisor's predictions (held-out models with a Gavel JSON)",
        ):  # trains held-out models with a Gavel JSON
            believed, how = advisor_table(options.throughputs, options.advisor_knowledge.value)
    if how:
        report["advisor_predictors"] = how
    lengths, told = _lengths(jobs, options.advisor_history, options.clairvoyant_lengths)
    if {"advisor", "oracle"} & set(names):
        report["advisor_lengths"] = told  # the oracle's too
    profile = "default" if options.advisor_profile is AdvisorProfile.auto else options.advisor_profile.value
    config = jct_scoring_config(nodes, jobs, truth, profile)
    config = replace(
        config,
        hold_for_blocked=config.hold_for_blocked or options.hold_for_blocked,
        shortest_first=config.shortest_first or options.shortest_first,
    )
    if {"advisor", "oracle"} & set(names):
        report["advisor"] = {"profile": profile, **scorer_setup(config, JCT_EXTENDER_WEIGHT)}
    with _PolicyProgress(stages, names) as progress:
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
    return jct


def _plots(plot: Path, frag: list[FragmentationResult], jct: list[JctResult], label: str) -> list[str]:
    from advisor.sim.plots import plot_allocation, plot_jct_cdf  # matplotlib: imported only when plotting

    plots: list[str] = []
    try:
        plot.mkdir(exist_ok=True)
        if frag:
            plots.append(
                str(plot_allocation(frag, plot / "allocation.png", f"GPU allocation as demand grows\n{label}"))
            )
        if jct:
            plots.append(str(plot_jct_cdf(jct, plot / "jct_cdf.png", f"job completion times\n{label}")))
    except OSError as e:
        fail(f"--plot: cannot write into {plot} ({e.strerror or e})")
    return plots


def _print_report(table: Table, report: dict[str, object], plots: list[str]) -> None:
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


def _one_trace(loaded: list[Pod] | list[Job], path: Path, name: str | None) -> list[Pod] | list[Job]:
    """The jobs of trace `name` when the file holds several traces (job ids `<trace>/<index>`, as the Gavel loader
    names them); an error when it holds several and no name is given, or when the name is not one of them."""
    jobs = [j for j in loaded if isinstance(j, Job)]
    names = sorted({j.job_id.split("/", 1)[0] for j in jobs if "/" in j.job_id})
    if name is None:
        if len(names) > 1:
            raise InputDataError(
                f"{path} holds {len(names)} traces ({', '.join(names)}): choose one with --trace-name"
                " (they would otherwise be replayed as one merged trace)"
            )
        return loaded
    if name not in names:
        held = f"its traces are {', '.join(names)}" if names else "it holds one unnamed trace"
        raise InputDataError(f"--trace-name: {path} has no trace {name!r}; {held}")
    return [j for j in jobs if j.job_id.split("/", 1)[0] == name]


class _PolicyProgress:
    """The `progress` callback of the simulator's runs: a stage per policy, from its start to the next one's."""

    def __init__(self, stages: Stages, names: list[str]) -> None:
        self._stages, self._names = stages, names
        self._current: contextlib.AbstractContextManager[None] | None = None

    def __enter__(self) -> Callable[[str], None]:
        return self._start

    def _start(self, name: str) -> None:
        self.__exit__(None, None, None)
        position = f" ({self._names.index(name) + 1} of {len(self._names)})" if name in self._names else ""
        self._current = self._stages.stage(f"policy {name}{position}", f"running policy {name}{position}")
        self._current.__enter__()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        """End the running policy's stage: with its ✓ line when it finished, without when the run failed."""
        if self._current is not None:
            current, self._current = self._current, None
            current.__exit__(kind, error, trace)


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
