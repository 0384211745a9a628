"""`gpuadvisor models ...`: train, predict, evaluate, list, roll back and import (docs/models.md, docs/formats.md).

The command lines are fixed (evaluation scripts rely on them). Bad input — a CSV with missing or misspelled
columns, too few rows, a directory that is not a model — ends with exit code 2 and one line naming the problem.
Tables keep every column whole (no 80-column truncation when piped); `--json` is the machine-readable output.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer
from rich.table import Table

from advisor.cli.common import Stages, fail, table_console
from advisor.cli.db import open_store
from advisor.datasets import FORMAT_OF_KIND, Kind, gavel_trace_executions, load_gavel, load_philly, load_sia, read_csv
from advisor.models.artifact import ArtifactError
from advisor.models.kinds import MODEL_KINDS
from advisor.models.registry import load_model, rollback, save_and_register, save_trained, version_path
from advisor.models.training import evaluate, train
from advisor.settings import AdvisorSettings
from profiler.csv_formats import InputDataError
from profiler.store import repo
from profiler.store.db import session_factory

app = typer.Typer(help="Train, evaluate and serve the throughput, interference and JCT models.", no_args_is_help=True)
out_console = table_console()


class KindArg(StrEnum):
    throughput = "throughput"
    interference = "interference"
    jct = "jct"


class ImportSource(StrEnum):
    gavel_colocations = "gavel-colocations"
    gavel_throughputs = "gavel-throughputs"
    gavel_trace = "gavel-trace"
    sia = "sia"
    philly = "philly"


DbOption = Annotated[
    str | None, typer.Option("--db", help="Database URL (default: $GPUADVISOR_DB_URL or sqlite:///./gpuadvisor.db).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _kind(kind: KindArg) -> Kind:
    value: Kind = kind.value
    return value


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _read(kind: Kind, path: Path, *, with_labels: bool) -> pd.DataFrame:
    try:
        return read_csv(path, FORMAT_OF_KIND[kind], with_labels=with_labels)
    except InputDataError as e:
        fail(str(e))
    except OSError as e:
        fail(f"{path}: {e.strerror or e}")


def _store_frame(kind: Kind, db_url: str | None, *, include_flagged: bool = False) -> pd.DataFrame:
    sessions = session_factory(open_store(db_url))
    with sessions() as session:
        return MODEL_KINDS[kind].store_frame(session, include_flagged)


@app.command("train")
def train_command(  # noqa: PLR0912, PLR0917 - Typer maps every option to a parameter, and checks each
    kind: Annotated[KindArg, typer.Argument(help="Which model to train.")],
    from_csv: Annotated[Path | None, typer.Option("--from-csv", help="Training data in the kind's CSV format.")] = None,
    from_store: Annotated[bool, typer.Option("--from-store", help="Train on the store's profiles/executions.")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Artifact directory to write.")] = None,
    db_url: DbOption = None,
    force: Annotated[bool, typer.Option("--force", help="Promote even if it validates worse.")] = False,
    include_flagged: Annotated[
        bool,
        typer.Option(
            "--include-flagged", help="With --from-store: also train on trial results whose repeats spread too far."
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Train a model, write its artifact; with --db or --from-store also register it (and promote it if no worse)."""
    k = _kind(kind)
    if (from_csv is None) == (not from_store):
        fail("give exactly one of --from-csv FILE or --from-store")
    if from_csv is not None and out is None:
        fail("--out DIR is required with --from-csv")
    if include_flagged and not from_store:
        fail("--include-flagged applies to --from-store only")
    if out is not None and not out.parent.is_dir():
        fail(f"--out: directory {out.parent} does not exist")
    stages = Stages(quiet=as_json)  # --json: nothing but the JSON, even on stderr
    with stages.stage(f"read {'the store' if from_csv is None else from_csv}"):
        if from_csv is not None:
            frame = _read(k, from_csv, with_labels=True)
            source = str(from_csv)
        else:
            frame = _store_frame(k, db_url, include_flagged=include_flagged)
            source = "store"
    if out is None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        out = version_path(AdvisorSettings().model_dir, k, stamp)
    try:
        with stages.stage(f"trained the {k} model", f"training the {k} model"):
            trained = train(k, frame, source=source)
    except ValueError as e:  # InputDataError, or data a model cannot learn from (e.g. one configuration per workload)
        # one prefix: an InputDataError already names its source
        fail(f"{source}: cannot train the {k} model: {str(e).removeprefix(f'{source}: ')}")
    result: dict[str, Any] = {"kind": k, "artifact": str(out), "metrics": trained.metrics, **trained.training_summary}
    try:
        if db_url is not None or from_store:
            with stages.stage(f"registered in {'the store' if db_url is None else db_url}"):
                # A registration that fails removes the artifact directory it wrote.
                registration = save_and_register(trained, out, session_factory(open_store(db_url)), k, force=force)
            result.update(version=registration.version, promoted=registration.promoted, reason=registration.reason)
        else:
            save_trained(trained, out)
    except OSError as e:
        fail(f"--out: cannot write {out}: {e.strerror or e}")
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    metric = trained.metrics["metric"]
    typer.echo(f"trained {k} model on {trained.training_summary['rows']} rows → {out}")
    typer.echo(f"validation {metric}: {trained.metrics[metric]:.4g}")
    if "version" in result:
        state = "promoted" if result["promoted"] else "registered"
        typer.echo(f"{state} as {k} v{result['version']}: {result['reason']}")


@app.command("predict")
def predict_command(
    kind: Annotated[KindArg, typer.Argument(help="Which model.")],
    model_dir: Annotated[Path, typer.Option("--model", help="Artifact directory written by `models train`.")],
    from_csv: Annotated[Path, typer.Option("--from-csv", help="Rows to predict, in the kind's CSV format.")],
    as_json: JsonOption = False,
) -> None:
    """Predict every row of a CSV; --json prints an array with one object per row, in input order."""
    k = _kind(kind)
    try:
        with _native_stderr_silenced():
            model = load_model(model_dir, kind=k)
    except ArtifactError as e:
        fail(str(e))
    except Exception as e:  # a damaged model file: LightGBM, JSON and NumPy each raise their own kind
        fail(f"{model_dir}: cannot load the {k} model ({type(e).__name__}: {str(e).strip() or 'unreadable'})")
    frame = _read(k, from_csv, with_labels=False)
    rows = MODEL_KINDS[k].prediction_rows(model, frame)
    if as_json:
        typer.echo(json.dumps(rows))
        return
    keys = [c for c in _ROW_KEYS[k] if c in frame.columns]
    table = Table(*keys)
    for key in rows[0] if rows else _PREDICTION_HEADERS[k]:
        table.add_column(_PREDICTION_HEADERS[k][key], justify="right")
    for (_, inputs), row in zip(frame.iterrows(), rows, strict=True):
        cells = [_key_cell(inputs[c]) for c in keys]
        table.add_row(*cells, *(_prediction_cell(k, v) for v in row.values()))
    out_console.print(table)


@contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    """LightGBM's C++ side prints a "[LightGBM] [Fatal] …" line on file descriptor 2 for a damaged model file before
    raising; the command's own `error:` line is the one the user should see."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# What says which input row a prediction belongs to (in input order), and each prediction's header with its unit.
_ROW_KEYS: dict[Kind, tuple[str, ...]] = {
    "interference": ("gpu_model", "workload_a", "workload_b"),
    "throughput": ("workload", "gpu_model", "gpu_count", "nodes", "batch_size"),
    "jct": ("job_id", "workload", "gpu_model", "gpu_count"),
}
_PREDICTION_HEADERS: dict[Kind, dict[str, str]] = {
    "interference": {"norm_a": "norm_a (ratio of solo)", "norm_b": "norm_b (ratio of solo)"},
    "throughput": {"throughput": "throughput (samples/s)"},
    "jct": {"p10": "p10 (s)", "p50": "p50 (s)", "p90": "p90 (s)"},
}


def _key_cell(value: object) -> str:
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:g}"
    return str(value)


def _prediction_cell(k: Kind, value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.3f}" if k == "interference" else f"{value:,.1f}" if k == "throughput" else f"{value:,.0f}"


@app.command("evaluate")
def evaluate_command(
    kind: Annotated[KindArg, typer.Argument(help="Which model.")],
    from_csv: Annotated[Path, typer.Option("--from-csv", help="Labelled data in the kind's CSV format.")],
    holdout_by: Annotated[
        str,
        typer.Option(
            "--holdout-by",
            help="Grouping of the cross-validation: pair, row, a time column (chronological 80/20), "
            "a side name like workload or family (leave one out), or any column.",
        ),
    ],
    probes: Annotated[
        int,
        typer.Option(
            "--probes",
            help="Interference, held out by family or workload: each held-out workload's co-runs with K fixed "
            "reference workloads move into training (what the profiler measures for a new workload).",
        ),
    ] = 0,
    as_json: JsonOption = False,
) -> None:
    """Grouped cross-validation of the model and its baselines on the same folds."""
    k = _kind(kind)
    frame = _read(k, from_csv, with_labels=True)
    try:
        with Stages(quiet=as_json).stage(f"evaluated the {k} model", f"cross-validating the {k} model"):
            result = evaluate(k, frame, holdout_by, probes=probes).to_json()
    except InputDataError as e:
        fail(str(e))
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    metrics = list(result["model"])
    scored = f", {result['scored']}" if "scored" in result else ""
    probed = f", {probes} probe co-runs per held-out workload" if probes else ""
    table = Table("predictor", *metrics, title=f"{k}, holdout by {holdout_by}{scored}{probed}, {result['rows']} rows")
    for name, values in [("model", result["model"]), *result["baselines"].items()]:
        table.add_row(name, *(f"{values[m]:.4g}" for m in metrics))
    out_console.print(table)
    metric = result["metric"]
    names = ["model", *result["baselines"]]
    per_fold = Table("fold", "test rows", *names, title=f"{metric} per fold")
    for fold in result["folds"]:
        per_fold.add_row(fold["fold"], str(fold["test_rows"]), *(f"{fold[n][metric]:.4g}" for n in names))
    out_console.print(per_fold)
    typer.echo(f"model beats every baseline on {result['metric']}: {result['model_beats_every_baseline']}")


@app.command("list")
def list_command(
    kind: Annotated[KindArg | None, typer.Option("--kind", help="Only this kind.")] = None,
    db_url: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """The registered model versions, with their validation metric and which one is promoted."""
    sessions = session_factory(open_store(db_url, read_only=True))
    with sessions() as session:
        rows = repo.list_model_versions(session=session, kind=_kind(kind) if kind is not None else None)
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "kind": r.kind,
                        "version": r.version,
                        "promoted": r.promoted,
                        "metrics": r.metrics,
                        "training_summary": r.training_summary,
                        "artifact_path": r.artifact_path,
                        "created_at": r.created_at.isoformat(),
                    }
                    for r in rows
                ],
                indent=2,
            )
        )
        return
    table = Table("kind", "version", "promoted", "metric", "rows", "created")
    table.add_column("artifact", overflow="fold")  # a path is never cut short, even in a narrow terminal
    for r in rows:
        name = str(r.metrics.get("metric", ""))
        value = r.metrics.get(name)
        table.add_row(
            r.kind,
            str(r.version),
            "yes" if r.promoted else "",
            f"{name} {value:.4g}" if isinstance(value, int | float) else "-",
            str(r.training_summary.get("rows", "-")),
            r.created_at.strftime("%Y-%m-%d %H:%M:%S %Z"),
            r.artifact_path,
        )
    out_console.print(table)


@app.command("rollback")
def rollback_command(
    kind: Annotated[KindArg, typer.Argument(help="Which model.")],
    to: Annotated[int | None, typer.Option("--to", help="Version to promote (default: the previous one).")] = None,
    db_url: DbOption = None,
) -> None:
    """Promote an earlier version again."""
    k = _kind(kind)
    try:
        version = rollback(session_factory(open_store(db_url)), k, to_version=to)
    except LookupError as e:
        fail(str(e))
    typer.echo(f"{k} v{version} is now promoted")


@app.command("import")
def import_command(
    source: Annotated[ImportSource, typer.Argument(help="Which public data set SRC is.")],
    src: Annotated[Path, typer.Argument(help="The public data file.")],
    out: Annotated[Path, typer.Option("--out", help="CSV to write (docs/formats.md).")],
    gavel_json: Annotated[
        Path | None, typer.Option("--gavel-json", help="gavel-trace only: Gavel's simulation_throughputs.json.")
    ] = None,
) -> None:
    """Convert a public data set (Gavel JSON or trace, Sia CSV, Philly CSV) to one of our CSV formats."""
    if not src.is_file():
        fail(f"{src}: no such file")
    if not out.parent.is_dir():
        fail(f"--out: directory {out.parent} does not exist")
    try:
        if source in (ImportSource.gavel_colocations, ImportSource.gavel_throughputs):
            data = load_gavel(src)
            frame = data.colocations if source is ImportSource.gavel_colocations else data.throughputs
            fmt = FORMAT_OF_KIND["interference" if source is ImportSource.gavel_colocations else "throughput"]
        elif source is ImportSource.gavel_trace:
            if gavel_json is None:
                fail("gavel-trace needs --gavel-json FILE (the throughputs that turn steps into run times)")
            frame = gavel_trace_executions(src, load_gavel(gavel_json).throughputs)
            fmt = FORMAT_OF_KIND["jct"]
        elif source is ImportSource.sia:
            frame, fmt = load_sia(src), FORMAT_OF_KIND["throughput"]
        else:
            frame, fmt = load_philly(src), FORMAT_OF_KIND["jct"]
    except InputDataError as e:
        fail(str(e))
    columns = [c for c in fmt.known if c in frame.columns]
    try:
        frame[columns].to_csv(out, index=False)
    except OSError as e:
        fail(f"--out: cannot write {out}: {e.strerror or e}")
    typer.echo(f"wrote {len(frame)} {fmt.name} rows to {out}")
