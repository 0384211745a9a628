"""`gpuadvisor profile request|list|show|import` (trial-run profiles for users) and `gpuadvisor profiler run`.

Exit codes follow `advisor.cli.common`: 2 for bad input (invalid TrialRun, bad CSV, unknown name), 3 when a
needed resource (the Kubernetes API) is missing, 1 when a local run finished with failed trials.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from sqlalchemy.orm import Session

from advisor.cli.common import EXIT_UNAVAILABLE, EXIT_USAGE, Stages, fail, table_console
from advisor.cli.db import DbUrlOption, open_store
from collector.backend import BackendUnavailableError
from collector.logs import configure_logging
from profiler import views
from profiler.csv_formats import InputDataError
from profiler.csv_table import read_csv_file
from profiler.importers import ImportKind, parse_colocations, parse_throughputs
from profiler.local import LocalRunner, UnresolvedSecretError, check_local_env
from profiler.records import ProfileRecord
from profiler.results import Phase, save_results
from profiler.settings import ProfilerSettings
from profiler.spec import SpecError, TrialRun, load_trialrun, with_reference_partners
from profiler.store import db, repo

if TYPE_CHECKING:
    from collector.nvml import NvmlBackend

app = typer.Typer(help="Request and read trial-run profiles.", no_args_is_help=True)
profiler_app = typer.Typer(help="The TrialRun controller and job-history recorder.", no_args_is_help=True)
console = table_console()

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _echo_json(data: object) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def _load(path: Path, settings: ProfilerSettings) -> TrialRun:
    try:
        return load_trialrun(path, max_duration_seconds=settings.max_trial_duration_seconds)
    except SpecError as e:
        fail(f"invalid TrialRun {path}: {e}")


def _open_backend() -> tuple[NvmlBackend | None, str]:
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
    references: Annotated[
        bool,
        typer.Option(
            "--reference-partners/--no-reference-partners",
            help="Without colocateWith in the file, co-run the workload with the bundled reference workloads "
            "(cnn-bs64, transformer-bs32, recommender-bs256), which the interference model uses for a new workload.",
        ),
    ] = True,
    db_url: DbUrlOption = None,
) -> None:
    """Validate a TrialRun and run it locally, or submit it to the cluster's profiler."""
    settings = ProfilerSettings()
    run = _load(file, settings)
    if references and local and importlib.util.find_spec("torch") is None:
        _note_reference_partners_skipped(run)
    elif references:
        run = with_reference_partners(run, settings.reference_image, settings.reference_scale)
    if not local:
        _submit(run)
        return
    try:
        check_local_env(run, os.environ)
    except UnresolvedSecretError as e:
        fail(str(e))
    engine = open_store(settings.db_url if db_url is None else db_url)
    backend, why = _open_backend()
    if backend is None:
        typer.echo(f"warning: GPU telemetry unavailable ({why}); measuring throughput only", err=True)
    runner = LocalRunner(
        backend=backend,
        sample_interval_seconds=settings.sample_interval_seconds,
        warmup_fraction=settings.warmup_fraction,
        steady_seconds=settings.steady_seconds,
        overlap=settings.overlap_rule(),
        sharing_facts=backend.sharing_facts if backend is not None else None,
        on_event=lambda message: typer.echo(message, err=True),
    )
    try:
        outcomes = runner.run(run)
    finally:
        if backend is not None:
            backend.close()
    with db.transaction(db.session_factory(engine)) as session:
        status = save_results(
            session=session,
            run=run,
            trials=runner.trials(run),
            outcomes=outcomes,
            max_spread_ratio=settings.max_spread_ratio,
        )
    _print_trials(status["trials"])
    typer.echo(
        f"trialrun {run.metadata.namespace}/{run.metadata.name}: {status['phase']} — {status['message']} "
        f"(store {engine.url.render_as_string(hide_password=True)})"
    )
    if status["phase"] != Phase.SUCCEEDED:
        raise typer.Exit(1)


def _note_reference_partners_skipped(run: TrialRun) -> None:
    """The one note for a local run whose default reference partners cannot run here (they need PyTorch)."""
    partners = [p.workload for p in with_reference_partners(run, None).spec.colocate_with]
    if "colocate_with" in run.spec.model_fields_set or not partners:
        return
    typer.echo(
        f"note: reference partners {', '.join(partners)} skipped: they need PyTorch, which {sys.executable} lacks; "
        "install it with `pip install 'gpuadvisor[workloads]'` (or pass --no-reference-partners)",
        err=True,
    )


def _submit(run: TrialRun) -> None:
    from collector.kube import make_api_client
    from collector.kube_errors import KubeError
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
    engine = open_store(db_url, read_only=True)
    with db.session_factory(engine)() as session:
        runs = views.list_runs(session, namespace)
        imported = [] if json_output else _imported_workloads(session)
    if json_output:
        _echo_json(runs)
        return
    if runs:
        table = Table("namespace", "name", "workload", "phase", "trials", "succeeded", "updated")
        for r in runs:
            table.add_row(
                r["namespace"],
                r["name"],
                r["workload"],
                r["phase"],
                str(r["trials"]),
                str(r["succeeded"]),
                r["updated_at"],
            )
        console.print(table)
    else:
        where = f" in namespace {namespace}" if namespace else ""
        typer.echo(f"no trial runs{where} (start one with `gpuadvisor profile request FILE`)")
    if imported:
        table = Table("workload", "profiles", "GPU models", "source", title="profiles without a trial run (imported)")
        for workload, count, models, sources in imported:
            table.add_row(workload, str(count), models, sources)
        console.print(table)
        typer.echo("show a workload's profiles with `gpuadvisor profile show WORKLOAD`")


def _imported_workloads(session: Session) -> list[tuple[str, int, str, str]]:
    """(workload, profiles, GPU models, sources) of the profiles that no trial run measured: imports."""
    by_workload: dict[str, list[ProfileRecord]] = {}
    for p in repo.list_profiles(session=session):
        if p.trial_run is None:
            by_workload.setdefault(p.workload, []).append(p)
    return [
        (
            workload,
            len(profiles),
            ", ".join(sorted({p.gpu_model for p in profiles})),
            ", ".join(sorted({p.source for p in profiles})),
        )
        for workload, profiles in sorted(by_workload.items())
    ]


@app.command()
def show(
    name: Annotated[str, typer.Argument(help="Trial run name (or a workload name for all its profiles).")],
    namespace: Annotated[
        str | None, typer.Option(help="Namespace of the trial run (default: whichever namespace has one so named).")
    ] = None,
    json_output: JsonOption = False,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Write a throughput chart: a FILE.png, or a directory (created if missing) to write NAME.png into.",
        ),
    ] = None,
    db_url: DbUrlOption = None,
) -> None:
    """Show a trial run's trials (throughput, utilisation, memory), or every profile of a workload."""
    target = _plot_path(plot, name) if plot is not None else None
    engine = open_store(db_url, read_only=True)
    with db.session_factory(engine)() as session:
        namespace = _namespace_of(session, name, namespace)
        detail = views.run_detail(session, namespace, name) or views.workload_detail(session, name)
    if detail is None:
        fail(f"no trial run {namespace}/{name} and no profiles of a workload named {name!r}")
    workload = detail["workload"]
    if target is not None:
        from profiler.throughput_plot import plot_throughputs

        title = f"trialrun {namespace}/{name} ({workload})" if "trials" in detail else f"workload {name}"
        try:
            target.parent.mkdir(exist_ok=True)  # --plot DIR: the directory named, never its missing parents
            plot_throughputs(detail["profiles"], detail["colocations"], target, title, workload)
        except OSError as e:
            fail(f"--plot: cannot write {target}: {e.strerror or e}")
    if json_output:
        _echo_json(detail)
        return
    if "trials" in detail:
        typer.echo(f"trialrun {namespace}/{name} ({workload}): {detail['phase']} — {detail['message']}")
        _print_trials(detail["trials"])
    _print_profiles(detail["profiles"])
    _print_colocations(detail["colocations"])
    if target is not None:
        typer.echo(f"plot written to {target}")


def _namespace_of(session: Session, name: str, namespace: str | None) -> str:
    """The namespace given, or the one namespace holding a trial run `name` (`default` when none does)."""
    if namespace is not None:
        return namespace
    found = sorted(r["namespace"] for r in views.list_runs(session) if r["name"] == name)
    if len(found) > 1:
        fail(f"trial runs named {name!r} exist in namespaces {', '.join(found)}: choose one with --namespace")
    return found[0] if found else "default"


def _plot_path(plot: Path, name: str) -> Path:
    """Where `--plot` writes: the PNG file named, or NAME.png inside the directory named (an existing directory, or
    a path without a suffix). The parent of what is named must exist, as for `simulate --plot`."""
    if plot.is_dir() or not plot.suffix:
        target = plot / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name).strip('_') or 'profile'}.png"
    elif plot.suffix.lower() == ".png":
        target = plot
    else:
        fail(f"--plot: {plot} is not a .png file name (give FILE.png or a directory)")
    named = plot if target.parent == plot else target
    if not named.parent.is_dir():
        fail(f"--plot: directory {named.parent} does not exist")
    return target


def _spread(repeats: object, spread: object, flagged: object) -> str:
    """`n× s%` for a repeated result, s = (max - min) / median of its throughputs (` flagged` when that keeps it out
    of training), `1×` for a single run."""
    if not isinstance(repeats, int) or repeats <= 1 or not isinstance(spread, int | float):
        return f"{repeats or 1}×"
    return f"{repeats}× {float(spread):.1%}" + (" flagged" if flagged else "")


def _print_profiles(profiles: list[dict[str, Any]]) -> None:
    if not profiles:
        return
    table = Table(
        "workload",
        "source",
        "GPU",
        "GPUs",
        "nodes",
        "batch",
        "samples/s (median)",
        "repeats, spread",
        "step s",
        "SM util",
        "mem GiB",
        "power W",
        title="profiles",
    )
    for p in profiles:
        extra = p.get("extra") or {}
        table.add_row(
            p["workload"],
            p["source"],
            p["gpu_model"],
            str(p["gpu_count"]),
            str(p["node_count"]),
            str(p["batch_size"] or "—"),
            _fmt(p["throughput_samples_per_s"]),
            _spread(extra.get("repeats"), extra.get("spread_ratio"), extra.get("flagged")),
            _fmt(p["step_time_seconds"], digits=3),
            _fmt(p["sm_util_mean_ratio"], 1.0, 2),
            _fmt(p["peak_memory_bytes"], 1 / 2**30, 2),
            _fmt(p["power_watts"]),
        )
    console.print(table)


def _print_colocations(colocations: list[dict[str, Any]]) -> None:
    if not colocations:
        return
    table = Table(
        "pair",
        "GPU",
        "sharing",
        "solo samples/s",
        "shared samples/s",
        "normalised",
        "repeats, spread",
        title="co-locations (each side's shared / solo throughput, medians over the repeats)",
    )
    for c in colocations:
        table.add_row(
            f"{c['workload_a']} + {c['workload_b']}",
            c["gpu_model"],
            c.get("sharing") or "unknown",
            _fmt([c["solo_throughput_a"], c["solo_throughput_b"]]),
            _fmt([c["coloc_throughput_a"], c["coloc_throughput_b"]]),
            _fmt([c["norm_a"], c["norm_b"]], digits=2),
            _spread(c.get("repeats"), c.get("spread_ratio"), c.get("flagged")),
        )
    console.print(table)


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="CSV file in the format of --kind (docs/formats.md).")],
    kind: Annotated[ImportKind, typer.Option("--kind", help="Which CSV format the file has.")],
    source: Annotated[str | None, typer.Option(help="Source tag of the rows (default: import:<file name>).")] = None,
    db_url: DbUrlOption = None,
) -> None:
    """Import measured co-locations or throughputs (re-importing the same file updates the same rows)."""
    tag = source or f"import:{file.name}"
    stages = Stages()
    try:
        with stages.stage(f"read {file}", f"reading {file}"):
            table = read_csv_file(file)
            if kind is ImportKind.COLOCATIONS:
                colocations, profiles = parse_colocations(table, source=tag), []
            else:
                colocations, profiles = [], parse_throughputs(table, source=tag)
    except InputDataError as e:
        fail(str(e))
    engine = open_store(db_url)
    rows = len(colocations) + len(profiles)
    with (
        stages.bar(f"stored {rows:,} {kind.value} rows", rows, f"storing {kind.value} rows") as advance,
        db.transaction(db.session_factory(engine)) as session,
    ):
        for c in colocations:
            repo.save_colocation(session=session, colocation=c)
            advance()
        for p in profiles:
            repo.save_profile(session=session, profile=p)
            advance()
    typer.echo(f"imported {rows} {kind.value} rows from {file} (source {tag})")
    typer.echo("see them with `gpuadvisor profile list` and `gpuadvisor profile show WORKLOAD`")


@profiler_app.command("run")
def run_controller(
    namespace: Annotated[
        str | None, typer.Option(help="Watch TrialRuns of this namespace only (default: the whole cluster).")
    ] = None,
    no_recorder: Annotated[bool, typer.Option("--no-recorder", help="Do not record finished GPU pods.")] = False,
    db_url: DbUrlOption = None,
) -> None:
    """Run the TrialRun controller and the job-history recorder until interrupted."""
    from collector.kube import make_api_client
    from collector.kube_errors import KubeError
    from profiler.controller import Controller
    from profiler.kube import KubeCluster, run_operator
    from profiler.recorder import Recorder

    configure_logging(logging.INFO)
    settings = ProfilerSettings()
    engine = open_store(settings.db_url if db_url is None else db_url)
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
        overlap=settings.overlap_rule(),
        max_spread_ratio=settings.max_spread_ratio,
        steady_seconds=settings.steady_seconds,
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
