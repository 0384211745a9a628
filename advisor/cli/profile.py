"""`gpuadvisor profile request|list|show|import` (trial-run profiles for users) and `gpuadvisor profiler run`.

Exit codes follow `advisor.cli.common`: 2 for bad input (invalid TrialRun, bad CSV, unknown name), 3 when a
needed resource (the Kubernetes API) is missing, 1 when a local run finished with failed trials.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from advisor.cli.common import EXIT_UNAVAILABLE, EXIT_USAGE, fail
from advisor.cli.db import DbUrlOption, open_store
from collector.backend import BackendUnavailableError, GpuBackend
from profiler import views
from profiler.importers import CsvFormatError, ImportKind, parse_colocations, parse_throughputs
from profiler.local import LocalRunner
from profiler.results import Phase, save_results
from profiler.settings import ProfilerSettings
from profiler.spec import SpecError, TrialRun, load_trialrun
from profiler.store import db, repo

app = typer.Typer(help="Request and read trial-run profiles.", no_args_is_help=True)
profiler_app = typer.Typer(help="The TrialRun controller and job-history recorder.", no_args_is_help=True)
# Tables piped to a file or another program keep every column readable instead of 80-column truncation.
console = Console(highlight=False, width=None if Console().is_terminal else 160)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _echo_json(data: object) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def _load(path: Path, settings: ProfilerSettings) -> TrialRun:
    try:
        return load_trialrun(path, max_duration_seconds=settings.max_trial_duration_seconds)
    except SpecError as e:
        fail(f"invalid TrialRun {path}: {e}")


def _open_backend() -> tuple[GpuBackend | None, str]:
    """This machine's NVML backend, or None with the reason when there is no GPU to read."""
    try:
        from collector.nvml import NvmlBackend

        return NvmlBackend(), ""
    except BackendUnavailableError as e:
        return None, str(e)


@app.command()
def request(
    file: Annotated[Path, typer.Argument(help="TrialRun YAML or JSON.")],
    local: Annotated[bool, typer.Option("--local", help="Run the trials here as subprocesses (no cluster).")] = False,
    db_url: DbUrlOption = None,
) -> None:
    """Validate a TrialRun and run it locally, or submit it to the cluster's profiler."""
    settings = ProfilerSettings()
    run = _load(file, settings)
    if not local:
        _submit(run)
        return
    engine = open_store(db_url or settings.db_url)
    backend, why = _open_backend()
    if backend is None:
        typer.echo(f"warning: GPU telemetry unavailable ({why}); measuring throughput only", err=True)
    runner = LocalRunner(
        backend=backend,
        sample_interval_seconds=settings.sample_interval_seconds,
        warmup_fraction=settings.warmup_fraction,
        on_event=lambda message: typer.echo(message, err=True),
    )
    try:
        outcomes = runner.run(run)
    finally:
        if backend is not None:
            backend.close()
    with db.transaction(db.session_factory(engine)) as session:
        status = save_results(session=session, run=run, trials=runner.trials(run), outcomes=outcomes)
    _print_trials(status["trials"])
    typer.echo(
        f"trialrun {run.metadata.namespace}/{run.metadata.name}: {status['phase']} — {status['message']} "
        f"(store {engine.url.render_as_string(hide_password=True)})"
    )
    if status["phase"] != Phase.SUCCEEDED:
        raise typer.Exit(1)


def _submit(run: TrialRun) -> None:
    from collector.kube import KubeError, make_api_client
    from profiler.kube import KubeCluster

    try:
        cluster = KubeCluster(make_api_client())
    except KubeError as e:
        fail(f"{e} (run it here instead with --local)", EXIT_UNAVAILABLE)
    try:
        cluster.submit_trialrun(run)
    except KubeError as e:
        fail(str(e), EXIT_UNAVAILABLE if e.temporary else EXIT_USAGE)
    typer.echo(
        f"trialrun {run.metadata.namespace}/{run.metadata.name} submitted; "
        f"follow it with `kubectl get trialrun -n {run.metadata.namespace} {run.metadata.name}`"
    )


def _fmt(value: Any, scale: float = 1.0, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return " / ".join(_fmt(v, scale, digits) for v in value)
    return f"{float(value) * scale:.{digits}f}"


def _print_trials(trials: list[dict[str, Any]]) -> None:
    table = Table("trial", "kind", "workload", "GPU", "GPUs", "batch", "phase", "samples/s", "SM util", "mem GiB")
    for t in trials:
        workload = t["workload"] + (f" + {t['partner']}" if t.get("partner") else "")
        table.add_row(
            t["trial"],
            t["kind"],
            workload,
            t.get("measuredGpuModel") or t.get("gpuModel") or "any",
            str(t["gpuCount"]),
            str(t.get("batchSize") or "—"),
            t["phase"],
            _fmt(t.get("throughputs")),
            _fmt(t.get("smUtilMeanRatios"), 1.0, 2),
            _fmt(t.get("peakMemoryBytes"), 1 / 2**30, 2),
        )
    console.print(table)
    for t in trials:
        if t.get("message"):
            typer.echo(f"{t['trial']}: {t['message']}")


@app.command("list")
def list_(
    json_output: JsonOption = False,
    namespace: Annotated[str | None, typer.Option(help="Only runs of this namespace.")] = None,
    db_url: DbUrlOption = None,
) -> None:
    """List trial runs with their phase and how many trials succeeded."""
    engine = open_store(db_url)
    with db.session_factory(engine)() as session:
        runs = views.list_runs(session, namespace)
    if json_output:
        _echo_json(runs)
        return
    table = Table("namespace", "name", "workload", "phase", "trials", "succeeded", "updated")
    for r in runs:
        table.add_row(
            r["namespace"], r["name"], r["workload"], r["phase"], str(r["trials"]), str(r["succeeded"]), r["updated_at"]
        )
    console.print(table)


@app.command()
def show(
    name: Annotated[str, typer.Argument(help="Trial run name (or a workload name for all its profiles).")],
    namespace: Annotated[str, typer.Option(help="Namespace of the trial run.")] = "default",
    json_output: JsonOption = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a throughput chart to this PNG file.")] = None,
    db_url: DbUrlOption = None,
) -> None:
    """Show a trial run's trials (throughput, utilisation, memory), or every profile of a workload."""
    engine = open_store(db_url)
    with db.session_factory(engine)() as session:
        detail = views.run_detail(session, namespace, name) or views.workload_detail(session, name)
    if detail is None:
        fail(f"no trial run {namespace}/{name} and no profiles of a workload named {name!r}")
    if plot is not None:
        from profiler.plots import plot_throughputs

        title = f"trialrun {namespace}/{name}" if "trials" in detail else f"workload {name}"
        try:
            plot_throughputs(detail["profiles"], detail["colocations"], plot, title)
        except OSError as e:
            fail(f"cannot write plot {plot}: {e.strerror}")
    if json_output:
        _echo_json(detail)
        return
    if "trials" in detail:
        typer.echo(f"trialrun {namespace}/{name} ({detail['workload']}): {detail['phase']} — {detail['message']}")
        _print_trials(detail["trials"])
    else:
        _print_profiles(detail["profiles"])
    if plot is not None:
        typer.echo(f"plot written to {plot}")


def _print_profiles(profiles: list[dict[str, Any]]) -> None:
    table = Table("source", "GPU", "GPUs", "batch", "samples/s", "step s", "SM util", "mem GiB", "power W")
    for p in profiles:
        table.add_row(
            p["source"],
            p["gpu_model"],
            str(p["gpu_count"]),
            str(p["batch_size"] or "—"),
            _fmt(p["throughput_samples_per_s"]),
            _fmt(p["step_time_seconds"], digits=3),
            _fmt(p["sm_util_mean_ratio"], 1.0, 2),
            _fmt(p["peak_memory_bytes"], 1 / 2**30, 2),
            _fmt(p["power_watts"]),
        )
    console.print(table)


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="CSV file in the DESIGN §6 format of --kind.")],
    kind: Annotated[ImportKind, typer.Option("--kind", help="Which CSV format the file has.")],
    source: Annotated[str | None, typer.Option(help="Source tag of the rows (default: import:<file name>).")] = None,
    db_url: DbUrlOption = None,
) -> None:
    """Import measured co-locations or throughputs (re-importing the same file updates the same rows)."""
    tag = source or f"import:{file.name}"
    try:
        with file.open(newline="") as handle:
            if kind is ImportKind.COLOCATIONS:
                colocations, profiles = parse_colocations(handle, source=tag), []
            else:
                colocations, profiles = [], parse_throughputs(handle, source=tag)
    except OSError as e:
        fail(f"cannot read {file}: {e.strerror}")
    except CsvFormatError as e:
        fail(f"{file}: {e}")
    engine = open_store(db_url)
    with db.transaction(db.session_factory(engine)) as session:
        for c in colocations:
            repo.save_colocation(session=session, colocation=c)
        for p in profiles:
            repo.save_profile(session=session, profile=p)
    typer.echo(f"imported {len(colocations) + len(profiles)} {kind.value} rows from {file} (source {tag})")


@profiler_app.command("run")
def run_controller(
    namespace: Annotated[
        str | None, typer.Option(help="Watch TrialRuns of this namespace only (default: the whole cluster).")
    ] = None,
    no_recorder: Annotated[bool, typer.Option("--no-recorder", help="Do not record finished GPU pods.")] = False,
    db_url: DbUrlOption = None,
) -> None:
    """Run the TrialRun controller and the job-history recorder until interrupted."""
    from collector.kube import KubeError, make_api_client
    from profiler.controller import Controller
    from profiler.kube import KubeCluster, run_operator
    from profiler.recorder import Recorder

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = ProfilerSettings()
    engine = open_store(db_url or settings.db_url)
    sessions = db.session_factory(engine)
    try:
        cluster = KubeCluster(make_api_client())
    except KubeError as e:
        fail(str(e), EXIT_UNAVAILABLE)
    controller = Controller(
        cluster=cluster,
        sessions=sessions,
        max_duration_seconds=settings.max_trial_duration_seconds,
        warmup_fraction=settings.warmup_fraction,
    )
    recorder = (
        None
        if no_recorder
        else Recorder(sessions=sessions, node_labels=cluster.node_labels, source=settings.history_source)
    )
    run_operator(
        controller=controller,
        recorder=recorder,
        sessions=sessions,
        namespace=namespace,
        interval_seconds=settings.reconcile_interval_seconds,
        liveness_endpoint=settings.liveness_endpoint,
    )
