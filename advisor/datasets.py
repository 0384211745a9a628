"""Training data: the CSV interchange formats of docs/design.md §6, importers for the public sets, and store records.

Every path into a model goes through one of three frames — colocations, throughputs, executions — whose columns are
documented in docs/formats.md and defined once in `profiler.csv_formats` (shared with `profile import`). `read_csv`
checks a file against its format before anything is trained: a missing required column, or an unknown one that
looks like a misspelling of a known column, is an `InputDataError` naming it.

Importers turn the public data sets into the same frames:
- Gavel's ``simulation_throughputs.json`` (isolated and pairwise co-located steps/s on K80, P100, V100),
- Sia's ``sia_placements_all.csv`` (samples/s per GPU type, GPU count, nodes and batch size),
- Philly's ``philly.csv`` as prepared by Pollux (submit time, duration, GPU count, virtual cluster),
- Gavel's job traces (``traces_seed0_top3.csv``), turned into executions with the Gavel throughputs.
"""

from __future__ import annotations

import ast
import difflib
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from advisor.features import FloatArray, JobQuery, SideColumns, ThroughputQuery
from advisor.gpus import normalize_gpu_model
from profiler.csv_formats import (
    COLOCATIONS,
    EXECUTIONS,
    THROUGHPUTS,
    CsvFormat,
    InputDataError,
)
from profiler.csv_table import CsvTable, is_empty, parse_flag, parse_numbers, read_csv_file
from profiler.records import ColocationRecord, ExecutionRecord, ProfileRecord

Kind = Literal["throughput", "interference", "jct"]
KINDS: tuple[Kind, ...] = ("throughput", "interference", "jct")


FORMAT_OF_KIND: dict[Kind, CsvFormat] = {"interference": COLOCATIONS, "throughput": THROUGHPUTS, "jct": EXECUTIONS}


def check_columns(columns: Iterable[str], fmt: CsvFormat, *, with_labels: bool, source: str) -> None:
    """Raise `InputDataError` listing every missing required column and every likely misspelling."""
    present = list(columns)
    required = fmt.required if with_labels else fmt.features
    missing = [c for c in required if c not in present]
    problems = []
    if missing:
        problems.append(f"missing column(s) {', '.join(missing)}")
    for column in present:
        if column in fmt.known:
            continue
        close = [c for c in difflib.get_close_matches(column, fmt.known, n=1, cutoff=0.8) if c not in present]
        if close:
            problems.append(f"unknown column {column!r} (did you mean {close[0]!r}?)")
    if problems:
        raise InputDataError(f"{source}: not a {fmt.name} CSV: {'; '.join(problems)}")


def parse_times(
    values: pd.Series, column: str, source: str, *, allow_empty: bool, rows: Sequence[int] | None = None
) -> FloatArray:
    """Unix seconds from ISO 8601 strings (without a zone: UTC) or plain numbers (already unix seconds); NaN where
    allowed to be empty. Errors name the row: `rows[i]`, else the file line of data row i (i + 2)."""
    text = values.astype("string").str.strip()
    empty = (text.isna() | (text == "")).to_numpy(dtype=bool)
    if empty.any() and not allow_empty:
        raise InputDataError(
            f"{source}: row {_row(rows, int(np.flatnonzero(empty)[0]))}, column {column!r}: empty time"
        )
    given = text.where(~empty)
    numeric = pd.to_numeric(given, errors="coerce")
    if (numeric.notna().to_numpy(dtype=bool) | empty).all():
        return numeric.to_numpy(dtype=np.float64, na_value=np.nan)
    parsed = pd.to_datetime(given, utc=True, format="ISO8601", errors="coerce")
    bad = parsed.isna().to_numpy(dtype=bool) & ~empty
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputDataError(
            f"{source}: row {_row(rows, row)}, column {column!r}: "
            f"expected an ISO 8601 time or unix seconds, got {values.iloc[row]!r}"
        )
    return np.asarray((parsed - pd.Timestamp(0, tz="UTC")).dt.total_seconds(), dtype=np.float64)


def _row(rows: Sequence[int] | None, index: int) -> int:
    return rows[index] if rows is not None else index + 2


def _flags(values: pd.Series, column: str, source: str, rows: Sequence[int] | None) -> FloatArray:
    """A true/false column as 1.0 / 0.0, NaN where empty (unknown)."""
    out = np.full(len(values), np.nan)
    for i, raw in enumerate(values.tolist()):
        if is_empty(raw):
            continue
        try:
            flag = parse_flag(str(raw))
        except ValueError as e:
            raise InputDataError(f"{source}: row {_row(rows, i)}, column {column!r}: {e}") from None
        if flag is not None:
            out[i] = 1.0 if flag else 0.0
    return out


def normalize_frame(
    frame: pd.DataFrame, fmt: CsvFormat, *, with_labels: bool, source: str, rows: Sequence[int] | None = None
) -> pd.DataFrame:
    """Check `frame` against `fmt` and return a copy with typed columns; absent optional columns become NaN/empty.

    Times become float unix seconds in `<name>_s` columns (`submit_time_s`, ...).
    """
    check_columns(frame.columns, fmt, with_labels=with_labels, source=source)
    out = frame.copy()
    for column in fmt.known:
        if column not in out.columns:
            if column in fmt.times:
                continue
            out[column] = np.nan if column in fmt.numbers or column in fmt.flags else ""
        if column in fmt.numbers:
            cells = out[column].astype(object).where(out[column].notna(), None)
            out[column] = parse_numbers(
                cells, source=source, column=column, rows=rows, optional=True, ratio=column in fmt.ratios
            )
            out[column] = out[column].astype(np.float64)
        elif column in fmt.flags:
            out[column] = _flags(out[column], column, source, rows)
        elif column in fmt.times:
            out[f"{column}_s"] = parse_times(out[column], column, source, allow_empty=column == "start_time", rows=rows)
        else:
            out[column] = out[column].astype(object).fillna("").astype(str)
    return out


def table_frame(table: CsvTable) -> pd.DataFrame:
    """A table's cells as a frame of text, None where a cell is empty (`normalize_frame` types it)."""
    return pd.DataFrame({c: [v or None for v in table.column(c)] for c in table.columns}, columns=list(table.columns))


def read_csv(path: Path, fmt: CsvFormat, *, with_labels: bool) -> pd.DataFrame:
    """Read (`profiler.csv_table`) and check a CSV of format `fmt` (see `normalize_frame`)."""
    table = read_csv_file(path)
    return normalize_frame(table_frame(table), fmt, with_labels=with_labels, source=str(path), rows=table.lines)


def _public_table(path: Path, columns: Sequence[str], what: str) -> CsvTable:
    """A public data set's CSV, with the columns its importer reads."""
    try:
        table = read_csv_file(path)
    except InputDataError as e:
        raise InputDataError(f"{e} (not a readable {what})") from e
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise InputDataError(f"{path}: not a {what}: missing column(s) {', '.join(missing)}")
    return table


# ------------------------------------------------------------------------------- frames → model inputs


def side_columns_from_frame(frame: pd.DataFrame, side: Literal["a", "b"]) -> SideColumns:
    """One side of a colocations frame as the interference features want it."""

    def col(name: str) -> FloatArray:
        return frame[f"{name}_{side}"].to_numpy(dtype=np.float64)

    return SideColumns(
        solo_throughput=col("solo_throughput"),
        batch_size=np.nan_to_num(col("batch_size"), nan=0.0),
        sm_util=col("sm_util"),
        mem_bw_util=col("mem_bw_util"),
        mem_bytes=col("mem_bytes"),
        amp=col("amp"),
    )


def throughput_query_from_frame(frame: pd.DataFrame) -> ThroughputQuery:
    return ThroughputQuery(
        workloads=frame["workload"].tolist(),
        gpu_models=[normalize_gpu_model(g) for g in frame["gpu_model"]],
        gpu_count=frame["gpu_count"].fillna(1.0).to_numpy(dtype=np.float64),
        nodes=frame["nodes"].fillna(1.0).to_numpy(dtype=np.float64),
        batch_size=frame["batch_size"].fillna(0.0).to_numpy(dtype=np.float64),
    )


def job_query_from_frame(frame: pd.DataFrame) -> JobQuery:
    queues = frame["queue"].tolist() if "queue" in frame.columns else [""] * len(frame)
    return JobQuery(
        workloads=frame["workload"].tolist(),
        users=frame["user"].tolist(),
        queues=queues,
        gpu_models=[normalize_gpu_model(g) if g else "" for g in frame["gpu_model"]],
        gpu_count=frame["gpu_count"].fillna(1.0).to_numpy(dtype=np.float64),
        submit_time_seconds=frame["submit_time_s"].to_numpy(dtype=np.float64),
    )


def run_seconds(frame: pd.DataFrame) -> FloatArray:
    """Each job's run time: end - start (end - submit where the start is unknown)."""
    start = frame["start_time_s"].to_numpy(dtype=np.float64)
    submit = frame["submit_time_s"].to_numpy(dtype=np.float64)
    end = frame["end_time_s"].to_numpy(dtype=np.float64)
    result: FloatArray = end - np.where(np.isnan(start), submit, start)
    return result


# Tokens of a workload name that say how it runs, not what it is: a batch size (``bs64``, ``bs=64``, ``batch64``,
# ``b64``, Gavel's ``(batch size 64)``) and mixed precision (``amp``, ``fp16``, ``bf16``, ``mixed``).
_RUN_TOKENS = re.compile(
    r"\(batch size \d+\)|(?<![a-z0-9])(?:bs|batch|batch_size|batchsize|b)[=_]?\d+(?![a-z0-9])"
    r"|(?<![a-z0-9])(?:amp|fp16|bf16|mixed|mp)(?![a-z0-9])",
    re.IGNORECASE,
)
_SEPARATORS = re.compile(r"[\s_\-.:/]+")


def workload_family(name: str) -> str:
    """The job family of a workload name, lower case: batch-size and AMP tokens stripped
    (``resnet50-bs64-amp`` → ``resnet50``, ``ResNet-18 (batch size 16)`` → ``resnet-18``)."""
    stripped = _RUN_TOKENS.sub(" ", name)
    family = _SEPARATORS.sub("-", stripped.strip().lower()).strip("-")
    return family or name.strip().lower()


def pair_families(frame: pd.DataFrame) -> tuple[npt.NDArray[np.str_], npt.NDArray[np.str_]]:
    """Each side's family of a colocations frame: the ``family_a``/``family_b`` columns where every row names one,
    else derived from the workload names (`workload_family`)."""
    out = []
    for side in ("a", "b"):
        column = f"family_{side}"
        given = frame[column].fillna("").astype(str) if column in frame.columns else None
        if given is not None and (given.str.len() > 0).all():
            out.append(given.str.lower().to_numpy(dtype=str))
        else:
            out.append(np.array([workload_family(str(w)) for w in frame[f"workload_{side}"]], dtype=str))
    return out[0], out[1]


# ------------------------------------------------------------------------------- public data sets

_BATCH = re.compile(r"\s*\(batch size (\d+)\)\s*$")


def gavel_job(name: str) -> tuple[str, int]:
    """(family, batch size) of a Gavel job type: ``ResNet-18 (batch size 16)`` → (``ResNet-18``, 16); 0 = unknown."""
    match = _BATCH.search(name)
    if match is None:
        return name.strip(), 0
    return name[: match.start()].strip(), int(match.group(1))


def _samples(steps_per_s: float, batch_size: int) -> float:
    return steps_per_s * batch_size if batch_size > 0 else steps_per_s


@dataclass(frozen=True, slots=True)
class GavelData:
    throughputs: pd.DataFrame
    colocations: pd.DataFrame
    infeasible_pairs: int


@dataclass(frozen=True, slots=True)
class GavelEntry:
    """One job of Gavel's ``simulation_throughputs.json`` on one worker type: its isolated steps/s (the ``null``
    entry) and, per co-located partner (job type, scale factor), the (own, partner's) steps/s measured sharing a GPU
    (``[0, 0]``: the pair could not share)."""

    worker: str
    gpu_model: str
    consolidated: bool
    job_type: str
    scale: int
    steps_per_s: float
    pairs: tuple[tuple[str, int, float, float], ...]


def _gavel_key(key: str, where: str) -> tuple[str, int]:
    try:
        parsed = ast.literal_eval(key)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as e:
        raise InputDataError(f"{where}: job key {key!r} is not a (job type, scale factor) tuple") from e
    if not (
        isinstance(parsed, tuple)
        and len(parsed) == 2
        and isinstance(parsed[0], str)
        and isinstance(parsed[1], int)
        and not isinstance(parsed[1], bool)
    ):
        raise InputDataError(f"{where}: job key {key!r} is not a (job type, scale factor) tuple")
    return parsed[0], parsed[1]


def _steps(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InputDataError(f"{where}: expected a non-negative number of steps/s, got {value!r}")
    return float(value)


def read_gavel_json(path: Path) -> list[GavelEntry]:
    """Gavel's ``simulation_throughputs.json`` (../shared/data/README.md), checked: an object keyed by worker type
    (``<gpu>`` or ``<gpu>_unconsolidated``), each an object keyed by job ``(job type, scale factor)``, each an object
    with the isolated steps/s under ``null`` and ``[own, partner]`` steps/s per co-located partner. The one reader of
    the format: the models' frames (`load_gavel`) and the simulator's tables (`advisor.sim.loaders`) are built from
    its entries, in the file's order."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise InputDataError(f"{path}: no such file") from e
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputDataError(f"{path}: not a readable Gavel throughputs JSON ({e})") from e
    if not isinstance(raw, dict) or not raw:
        raise InputDataError(f"{path}: expected an object keyed by GPU type")
    out: list[GavelEntry] = []
    for worker, jobs in raw.items():
        if not isinstance(jobs, dict):
            raise InputDataError(f"{path}: {worker!r}: expected an object keyed by job")
        consolidated = not worker.endswith("_unconsolidated")
        model = normalize_gpu_model(worker.removesuffix("_unconsolidated"))
        for key, entry in jobs.items():
            where = f"{path}: {worker!r} / {key!r}"
            job_type, scale = _gavel_key(key, f"{path}: {worker!r}")
            if not isinstance(entry, dict):
                raise InputDataError(f"{where}: expected an object")
            if "null" not in entry:
                raise InputDataError(f"{where}: no isolated throughput ('null' entry)")
            pairs: list[tuple[str, int, float, float]] = []
            for other, pair in entry.items():
                if other == "null":
                    continue
                other_type, other_scale = _gavel_key(other, where)
                if not isinstance(pair, list) or len(pair) != 2:
                    raise InputDataError(f"{where} / {other!r}: expected [own, partner] steps/s, got {pair!r}")
                pairs.append(
                    (
                        other_type,
                        other_scale,
                        _steps(pair[0], f"{where} / {other!r}"),
                        _steps(pair[1], f"{where} / {other!r}"),
                    )
                )
            steps = _steps(entry["null"], f"{where} / 'null'")
            out.append(GavelEntry(worker, model, consolidated, job_type, scale, steps, tuple(pairs)))
    return out


def load_gavel(path: Path) -> GavelData:
    """Throughputs and 1-GPU co-locations from Gavel's ``simulation_throughputs.json`` (`read_gavel_json`).

    Throughputs are samples/s = steps/s × batch size (steps/s for A3C and CycleGAN, whose batch size Gavel does not
    name). A multi-GPU job's batch size is taken per GPU, so its global batch is batch × GPUs. ``<gpu>_unconsolidated``
    entries are the same job spread over one server per GPU (``nodes`` = GPU count). Pairs measured as ``[0, 0]``
    could not share a GPU; they are counted in `infeasible_pairs` and left out.
    """
    entries = read_gavel_json(path)
    thr_rows: list[dict[str, object]] = []
    pair_rows: list[dict[str, object]] = []
    infeasible = 0
    solo: dict[tuple[str, str], float] = {}  # (worker, job type) → 1-GPU steps/s
    for e in entries:
        if e.scale > 1 or e.consolidated:
            _, batch = gavel_job(e.job_type)
            thr_rows.append(
                {
                    "workload": e.job_type,
                    "gpu_model": e.gpu_model,
                    "gpu_count": e.scale,
                    "nodes": 1 if e.consolidated else e.scale,
                    "batch_size": batch * e.scale,
                    "throughput": _samples(e.steps_per_s, batch) * e.scale,
                }
            )
        if e.scale == 1:
            solo[(e.worker, e.job_type)] = e.steps_per_s
    for e in entries:
        if not e.consolidated or e.scale != 1:
            continue
        for job_b, scale_b, coloc_a, coloc_b in e.pairs:
            if scale_b != 1:
                continue
            if coloc_a <= 0.0 or coloc_b <= 0.0:
                infeasible += 1
                continue
            if (e.worker, job_b) not in solo:
                raise InputDataError(f"{path}: {e.worker!r}: co-location partner {job_b!r} has no 1-GPU throughput")
            fam_a, bs_a = gavel_job(e.job_type)
            fam_b, bs_b = gavel_job(job_b)
            pair_rows.append(
                {
                    "gpu_model": e.gpu_model,
                    "workload_a": e.job_type,
                    "workload_b": job_b,
                    "solo_throughput_a": _samples(e.steps_per_s, bs_a),
                    "solo_throughput_b": _samples(solo[(e.worker, job_b)], bs_b),
                    "coloc_throughput_a": _samples(coloc_a, bs_a),
                    "coloc_throughput_b": _samples(coloc_b, bs_b),
                    "batch_size_a": bs_a,
                    "batch_size_b": bs_b,
                    "family_a": fam_a,
                    "family_b": fam_b,
                }
            )
    throughputs = normalize_frame(pd.DataFrame(thr_rows), THROUGHPUTS, with_labels=True, source=str(path))
    colocations = normalize_frame(pd.DataFrame(pair_rows), COLOCATIONS, with_labels=True, source=str(path))
    return GavelData(throughputs, colocations, infeasible)


_SIA_COLUMNS = ("app", "gpu_desc", "num_nodes", "num_gpus", "global_bsz", "samples_per_s")


def load_sia(path: Path) -> pd.DataFrame:
    """Sia's placements CSV as a throughputs frame (workload = app, batch size = global batch, GPU from gpu_desc)."""
    table = _public_table(path, _SIA_COLUMNS, "Sia placements CSV")
    frame = pd.DataFrame(
        {
            "workload": table.column("app"),
            "gpu_model": [normalize_gpu_model(d.split("(")[0]) for d in table.column("gpu_desc")],
            "gpu_count": table.column("num_gpus"),
            "nodes": table.column("num_nodes"),
            "batch_size": table.column("global_bsz"),
            "throughput": table.column("samples_per_s"),
        }
    )
    return normalize_frame(frame, THROUGHPUTS, with_labels=True, source=str(path))


_PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")


def load_philly(path: Path) -> pd.DataFrame:
    """Philly jobs as an executions frame.

    The trace has no user, workload or GPU model: the virtual cluster is both the user and the queue, the workload is
    empty and the GPU model unknown. Start = submit time (the trace's ``duration`` is the run time).
    """
    table = _public_table(path, _PHILLY_COLUMNS, "Philly CSV")
    submit = pd.Series(pd.to_datetime(table.texts("timestamp"), utc=True))
    end = submit + pd.to_timedelta(table.numbers("duration"), unit="s")
    iso = "%Y-%m-%dT%H:%M:%SZ"
    frame = pd.DataFrame(
        {
            "job_id": [f"philly-{i}" for i in range(len(table))],
            "workload": "",
            "user": table.column("cluster"),
            "queue": table.column("cluster"),
            "gpu_model": "",
            "gpu_count": table.column("num_gpus"),
            "submit_time": submit.dt.strftime(iso),
            "start_time": submit.dt.strftime(iso),
            "end_time": end.dt.strftime(iso),
        }
    )
    return normalize_frame(frame, EXECUTIONS, with_labels=True, source=str(path))


_TRACE_COLUMNS = ("trace", "job_idx", "job_type", "total_steps", "scale_factor", "arrival_time_s")


def gavel_trace_executions(
    trace_path: Path, throughputs: pd.DataFrame, *, start_unix_seconds: float = 1.7e9
) -> pd.DataFrame:
    """Executions derived from Gavel's job traces: run time = total steps / the job's steps/s on its GPU type.

    Gavel's traces say which job arrives when and how many steps it runs, not where it ran; each job is assigned a
    GPU type round-robin over the types with a measurement for it, and runs alone (start = arrival). The trace name
    (a Philly virtual cluster) is the user and the queue. These are labels derived from real measurements, not
    observed completion times.
    """
    table = _public_table(trace_path, _TRACE_COLUMNS, "Gavel trace CSV")
    steps_per_s: dict[tuple[str, int], dict[str, float]] = {}
    single_node = throughputs[throughputs["nodes"] == 1]
    for workload, gpu_model, gpu_count, throughput in zip(
        single_node["workload"].tolist(),
        single_node["gpu_model"].tolist(),
        single_node["gpu_count"].tolist(),
        single_node["throughput"].tolist(),
        strict=True,
    ):
        _, batch = gavel_job(str(workload))
        steps = float(throughput) / (max(batch, 1) * float(gpu_count))
        if steps > 0:
            steps_per_s.setdefault((str(workload), int(gpu_count)), {})[str(gpu_model)] = steps
    rows: list[dict[str, object]] = []
    columns = (
        table.column("trace"),
        table.texts("job_idx"),
        table.texts("job_type"),
        table.numbers("total_steps", minimum=0),
        table.numbers("scale_factor", minimum=1, integer=True),
        table.numbers("arrival_time_s", minimum=0),
    )
    for i, (trace, job_idx, job_type, total_steps, scale, arrival) in enumerate(zip(*columns, strict=True)):
        options = steps_per_s.get((str(job_type), int(scale)))
        if not options:
            continue
        gpu = sorted(options)[i % len(options)]
        submit = start_unix_seconds + float(arrival)
        rows.append(
            {
                "job_id": f"{trace}-{job_idx}",
                "workload": str(job_type),
                "user": str(trace),
                "queue": str(trace),
                "gpu_model": gpu,
                "gpu_count": int(scale),
                "submit_time": submit,
                "start_time": submit,
                "end_time": submit + float(total_steps) / options[gpu],
            }
        )
    return normalize_frame(pd.DataFrame(rows), EXECUTIONS, with_labels=True, source=str(trace_path))


# ------------------------------------------------------------------------------- store records → frames


def colocations_frame(records: Sequence[ColocationRecord], *, include_flagged: bool = False) -> pd.DataFrame:
    """Store co-locations as a frame; rows whose repeats spread too far (`flagged`) are left out unless asked for."""
    rows = [
        {
            "gpu_model": r.gpu_model,
            "workload_a": r.workload_a,
            "workload_b": r.workload_b,
            "solo_throughput_a": r.solo_throughput_a,
            "solo_throughput_b": r.solo_throughput_b,
            "coloc_throughput_a": r.coloc_throughput_a,
            "coloc_throughput_b": r.coloc_throughput_b,
            "sm_util_a": r.sm_util_a,
            "mem_bw_util_a": r.mem_bw_util_a,
            "mem_bytes_a": r.mem_bytes_a,
            "sm_util_b": r.sm_util_b,
            "mem_bw_util_b": r.mem_bw_util_b,
            "mem_bytes_b": r.mem_bytes_b,
            "batch_size_a": r.batch_size_a,
            "batch_size_b": r.batch_size_b,
            "amp_a": int(r.amp_a),
            "amp_b": int(r.amp_b),
            "sharing": r.sharing,
        }
        for r in records
        if include_flagged or not r.flagged
    ]
    # every known column: the sides' utilisation and the sharing mode are what the interference model's prior reads
    frame = pd.DataFrame(rows, columns=list(COLOCATIONS.known))
    return normalize_frame(frame, COLOCATIONS, with_labels=True, source="store colocations")


def throughputs_frame(records: Sequence[ProfileRecord], *, include_flagged: bool = False) -> pd.DataFrame:
    """Store profiles as a frame; trial profiles whose repeats spread too far are left out unless asked for."""
    rows = [
        {
            "workload": r.workload,
            "gpu_model": r.gpu_model,
            "gpu_count": r.gpu_count,
            "nodes": r.node_count,
            "batch_size": r.batch_size,
            "throughput": r.throughput_samples_per_s,
            "sm_util": r.sm_util_mean_ratio,
            "mem_bw_util": r.mem_bw_util_ratio,
            "mem_bytes": r.peak_memory_bytes,
        }
        for r in records
        if include_flagged or not r.extra.get("flagged")
    ]
    frame = pd.DataFrame(rows, columns=[*THROUGHPUTS.features, *THROUGHPUTS.labels])
    return normalize_frame(frame, THROUGHPUTS, with_labels=True, source="store profiles")


def executions_frame(records: Sequence[ExecutionRecord]) -> pd.DataFrame:
    rows = [
        {
            "job_id": r.job_id,
            "workload": r.workload or "",
            "user": r.user or r.namespace,
            "queue": r.queue,
            "node": r.node or "",
            "gpu_model": r.gpu_model or "",
            "gpu_count": r.gpu_count,
            "submit_time": r.submit_time.timestamp(),
            "start_time": r.start_time.timestamp() if r.start_time is not None else math.nan,
            "end_time": r.end_time.timestamp(),
            "mean_utilization": r.mean_utilization_ratio,
        }
        for r in records
    ]
    frame = pd.DataFrame(rows, columns=[*EXECUTIONS.features, *EXECUTIONS.labels])
    return normalize_frame(frame, EXECUTIONS, with_labels=True, source="store executions")
