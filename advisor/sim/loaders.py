"""Readers for the simulator's inputs: cluster files, job/pod traces and true-throughput tables.

Formats are recognised by their header, so one `--cluster`/`--trace`/`--throughputs` flag takes any of them:

* cluster: `node,gpu_model,gpus[,links][,cpu_milli][,memory_mib]` (links: NVLink groups such as `0-3/4-7`), or the
  openb node list `sn,cpu_milli,memory_mib,gpu,model`;
* trace: the openb pod list, the Philly CSV (`timestamp,duration,num_gpus,…`), a Gavel trace (`job_type,total_steps,
  scale_factor,arrival_time_s`), or docs/design.md §6 executions (`job_id,workload,user,gpu_model,gpu_count,submit_time,
  start_time,end_time`);
* throughputs: Gavel's `simulation_throughputs.json`, or docs/design.md §6 colocations / throughputs CSV.

Every problem raises `SimInputError` naming the file, the row (1 = first data row) and the column.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pandas as pd

from advisor.datasets import read_gavel_json
from advisor.gpus import normalize_gpu_model
from advisor.sim.model import GPU_MILLI, Cluster, Job, Pod, SimNode, Throughputs
from profiler.csv_formats import MAX_COUNT, InputDataError

SimInputError = InputDataError
"""An input file the simulator cannot use (the readers' one error class, under its older name here)."""


# The simulator holds a few arrays per GPU: a node of more GPUs than any machine has is a typo (a cluster file with
# 100000000000 GPUs on one node asked for 93 GiB before this bound).
MAX_NODE_GPUS = 1024
CLUSTER_COLUMNS = ("node", "gpu_model", "gpus")
OPENB_NODE_COLUMNS = ("sn", "gpu", "model")
OPENB_POD_COLUMNS = ("name", "num_gpu", "gpu_milli")
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus")
GAVEL_TRACE_COLUMNS = ("job_type", "total_steps", "scale_factor", "arrival_time_s")
EXECUTION_COLUMNS = ("job_id", "workload", "gpu_count", "submit_time", "start_time", "end_time")
COLOCATION_COLUMNS = ("gpu_model", "workload_a", "workload_b", "solo_throughput_a", "solo_throughput_b")
THROUGHPUT_COLUMNS = ("workload", "gpu_model", "gpu_count", "throughput")


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, skipinitialspace=True)
    except FileNotFoundError as e:
        raise SimInputError(f"{path}: no such file") from e
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise SimInputError(f"{path}: not a readable CSV file ({e})") from e
    frame.columns = [str(c).strip() for c in frame.columns]
    if frame.empty:
        raise SimInputError(f"{path}: no data rows")
    return frame


def _has(frame: pd.DataFrame, columns: Sequence[str]) -> bool:
    return all(c in frame.columns for c in columns)


def _numbers(
    frame: pd.DataFrame,
    column: str,
    path: Path,
    *,
    minimum: float | None = None,
    integer: bool = False,
    maximum: float | None = None,
) -> list[float]:
    """The column as floats; the first empty/non-numeric/out-of-range value raises with its row number. A whole-number
    column is at most `MAX_COUNT` unless `maximum` says less."""
    values = pd.to_numeric(frame[column], errors="coerce")
    if maximum is None and integer:
        maximum = MAX_COUNT
    for row, (raw, value) in enumerate(zip(frame[column], values, strict=True), start=1):
        if value is None or math.isnan(value) or math.isinf(value):
            raise SimInputError(f"{path}: row {row}: column {column!r}: expected a number, got {raw!r}")
        if minimum is not None and value < minimum:
            raise SimInputError(f"{path}: row {row}: column {column!r}: must be >= {minimum:g}, got {raw!r}")
        if maximum is not None and value > maximum:
            raise SimInputError(f"{path}: row {row}: column {column!r}: must be <= {maximum:g}, got {raw!r}")
        if integer and value != int(value):
            raise SimInputError(f"{path}: row {row}: column {column!r}: expected a whole number, got {raw!r}")
    return [float(v) for v in values]


def _texts(frame: pd.DataFrame, column: str, path: Path) -> list[str]:
    out: list[str] = []
    for row, raw in enumerate(frame[column], start=1):
        text = "" if raw is None or (isinstance(raw, float) and math.isnan(raw)) else str(raw).strip()
        if not text:
            raise SimInputError(f"{path}: row {row}: column {column!r}: empty")
        out.append(text)
    return out


def _missing(path: Path, frame: pd.DataFrame, kinds: dict[str, Sequence[str]]) -> SimInputError:
    expected = "; ".join(f"{name}: {', '.join(cols)}" for name, cols in kinds.items())
    return SimInputError(f"{path}: unrecognised columns {list(frame.columns)}; expected one of — {expected}")


# --------------------------------------------------------------------------------------------------------------------
# Cluster


def parse_nvlink_groups(text: str, gpus: int) -> tuple[tuple[int, ...], ...]:
    """`0-3/4-7` → ((0, 1, 2, 3), (4, 5, 6, 7)); `0,1/2,3` works too; raises ValueError on a bad spec."""
    groups: list[tuple[int, ...]] = []
    seen: set[int] = set()
    for part in text.split("/"):
        members: list[int] = []
        for raw in part.split(","):
            item = raw.strip()
            if not item:
                continue
            if "-" in item:
                lo, hi = (int(x) for x in item.split("-", 1))
                members.extend(range(lo, hi + 1))
            else:
                members.append(int(item))
        if not members:
            raise ValueError(f"empty group in {text!r}")
        for m in members:
            if not 0 <= m < gpus or m in seen:
                raise ValueError(f"GPU {m} is outside 0..{gpus - 1} or listed twice in {text!r}")
            seen.add(m)
        groups.append(tuple(sorted(members)))
    return tuple(groups)


def load_cluster(path: Path) -> Cluster:
    """A cluster file or an openb node list."""
    frame = _read_csv(path)
    if _has(frame, CLUSTER_COLUMNS):
        name_col, model_col, gpu_col = "node", "gpu_model", "gpus"
    elif _has(frame, OPENB_NODE_COLUMNS):
        name_col, model_col, gpu_col = "sn", "model", "gpu"
    else:
        raise _missing(path, frame, {"cluster file": CLUSTER_COLUMNS, "openb node list": OPENB_NODE_COLUMNS})
    name_list = _texts(frame, name_col, path)
    models = _texts(frame, model_col, path)
    gpus = _numbers(frame, gpu_col, path, minimum=0, integer=True, maximum=MAX_NODE_GPUS)
    cpus = _numbers(frame, "cpu_milli", path, minimum=0) if "cpu_milli" in frame.columns else None
    mems = _numbers(frame, "memory_mib", path, minimum=0) if "memory_mib" in frame.columns else None
    links = list(frame["links"]) if "links" in frame.columns else None
    nodes: list[SimNode] = []
    seen: set[str] = set()
    for i, name in enumerate(name_list):
        if name in seen:
            raise SimInputError(f"{path}: row {i + 1}: node {name!r} listed twice")
        seen.add(name)
        groups: tuple[tuple[int, ...], ...] = ()
        raw_links = links[i] if links is not None else None
        if isinstance(raw_links, str) and raw_links.strip():
            try:
                groups = parse_nvlink_groups(raw_links, int(gpus[i]))
            except ValueError as e:
                raise SimInputError(f"{path}: row {i + 1}: column 'links': {e}") from e
        nodes.append(
            SimNode(
                name=name,
                gpu_model=models[i],
                gpus=int(gpus[i]),
                cpu_milli=cpus[i] if cpus is not None else None,
                memory_mib=mems[i] if mems is not None else None,
                nvlink_groups=groups,
            )
        )
    if not any(n.gpus for n in nodes):
        raise SimInputError(f"{path}: the cluster has no GPU")
    return Cluster(tuple(nodes))


# --------------------------------------------------------------------------------------------------------------------
# Traces


def load_trace(path: Path) -> list[Pod] | list[Job]:
    """Pods (openb pod list) or jobs (Philly, Gavel, executions), recognised by the header."""
    frame = _read_csv(path)
    if _has(frame, OPENB_POD_COLUMNS):
        return _openb_pods(frame, path)
    if _has(frame, GAVEL_TRACE_COLUMNS):
        return _gavel_jobs(frame, path)
    if _has(frame, PHILLY_COLUMNS):
        return _philly_jobs(frame, path)
    if _has(frame, EXECUTION_COLUMNS):
        return _execution_jobs(frame, path)
    raise _missing(
        path,
        frame,
        {
            "openb pod list": OPENB_POD_COLUMNS,
            "Gavel trace": GAVEL_TRACE_COLUMNS,
            "Philly": PHILLY_COLUMNS,
            "executions": EXECUTION_COLUMNS,
        },
    )


def _openb_pods(frame: pd.DataFrame, path: Path) -> list[Pod]:
    names = _texts(frame, "name", path)
    num_gpu = _numbers(frame, "num_gpu", path, minimum=0, integer=True)
    milli = _numbers(frame, "gpu_milli", path, minimum=0, integer=True)
    cpu = _numbers(frame, "cpu_milli", path, minimum=0) if "cpu_milli" in frame.columns else [0.0] * len(frame)
    mem = _numbers(frame, "memory_mib", path, minimum=0) if "memory_mib" in frame.columns else [0.0] * len(frame)
    specs = [_gpu_spec(raw) for raw in frame["gpu_spec"]] if "gpu_spec" in frame.columns else [()] * len(frame)
    pods: list[Pod] = []
    for row, (name, k, m, c, mm) in enumerate(zip(names, num_gpu, milli, cpu, mem, strict=True), start=1):
        if m > GPU_MILLI:
            raise SimInputError(f"{path}: row {row}: column 'gpu_milli': must be <= 1000, got {m:g}")
        if k > 0 and m == 0:
            raise SimInputError(f"{path}: row {row}: column 'gpu_milli': 0 with num_gpu {k:g}")
        if k > 1 and m < GPU_MILLI:
            raise SimInputError(f"{path}: row {row}: column 'gpu_milli': a GPU share ({m:g}) needs num_gpu 1")
        pods.append(Pod(name, int(k), int(m) if k > 0 else 0, c, mm, specs[row - 1] if k > 0 else ()))
    return pods


def _gpu_spec(raw: object) -> tuple[str, ...]:
    """openb's `gpu_spec`: the acceptable GPU models, `|`-separated (empty or missing: any)."""
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        return ()
    return tuple(part.strip() for part in str(raw).split("|") if part.strip())


def _gavel_jobs(frame: pd.DataFrame, path: Path) -> list[Job]:
    types = _texts(frame, "job_type", path)
    steps = _numbers(frame, "total_steps", path, minimum=0)
    scale = _numbers(frame, "scale_factor", path, minimum=1, integer=True)
    arrival = _numbers(frame, "arrival_time_s", path, minimum=0)
    traces = [str(t) for t in frame["trace"]] if "trace" in frame.columns else [""] * len(frame)
    idx = [str(int(x)) for x in _numbers(frame, "job_idx", path)] if "job_idx" in frame.columns else None
    jobs = [
        Job(
            job_id=f"{tr}/{idx[i] if idx else i}" if tr else (idx[i] if idx else str(i)),
            job_type=types[i],
            arrival_s=arrival[i],
            num_gpus=int(scale[i]),
            work=steps[i],
        )
        for i, tr in enumerate(traces)
    ]
    return sorted(jobs, key=lambda j: j.arrival_s)


def _seconds(frame: pd.DataFrame, column: str, path: Path) -> list[float]:
    """Unix seconds from numbers or ISO/`YYYY-mm-dd HH:MM:SS` timestamps."""
    numeric = pd.to_numeric(frame[column], errors="coerce")
    if not numeric.isna().any():
        return [float(v) for v in numeric]
    out: list[float] = []
    for row, raw in enumerate(frame[column], start=1):
        try:
            out.append(float(raw) if not isinstance(raw, str) else datetime.fromisoformat(raw.strip()).timestamp())
        except (TypeError, ValueError) as e:
            raise SimInputError(f"{path}: row {row}: column {column!r}: expected a time, got {raw!r}") from e
        if math.isnan(out[-1]):
            raise SimInputError(f"{path}: row {row}: column {column!r}: expected a time, got {raw!r}")
    return out


def _philly_jobs(frame: pd.DataFrame, path: Path) -> list[Job]:
    times = _seconds(frame, "timestamp", path)
    duration = _numbers(frame, "duration", path, minimum=0)
    gpus = _numbers(frame, "num_gpus", path, minimum=1, integer=True)
    clusters = [str(c) for c in frame["cluster"]] if "cluster" in frame.columns else ["philly"] * len(frame)
    start = min(times)
    jobs = [
        Job(str(i), f"philly/{clusters[i]}", times[i] - start, int(gpus[i]), duration[i]) for i in range(len(frame))
    ]
    return sorted(jobs, key=lambda j: j.arrival_s)


def _execution_jobs(frame: pd.DataFrame, path: Path) -> list[Job]:
    ids = _texts(frame, "job_id", path)
    workloads = _texts(frame, "workload", path)
    gpus = _numbers(frame, "gpu_count", path, minimum=1, integer=True)
    submit = _seconds(frame, "submit_time", path)
    start = _seconds(frame, "start_time", path)
    end = _seconds(frame, "end_time", path)
    jobs: list[Job] = []
    origin = min(submit)
    for row in range(len(frame)):
        if end[row] < start[row]:
            raise SimInputError(f"{path}: row {row + 1}: column 'end_time': before start_time")
        jobs.append(Job(ids[row], workloads[row], submit[row] - origin, int(gpus[row]), end[row] - start[row]))
    return sorted(jobs, key=lambda j: j.arrival_s)


def pods_from_jobs(jobs: Sequence[Job]) -> list[Pod]:
    """A job trace as fragmentation-run pods: whole GPUs, no CPU/memory request."""
    return [Pod(j.job_id, j.num_gpus, GPU_MILLI) for j in jobs]


def jobs_from_pods(pods: Sequence[Pod], path: Path) -> list[Job]:
    """The openb pod list as a JCT trace: arrival = creation, work = seconds from scheduling to deletion."""
    frame = _read_csv(path)
    if not _has(frame, ("creation_time", "deletion_time")):
        raise SimInputError(f"{path}: a JCT run needs columns 'creation_time' and 'deletion_time'")
    created = _numbers(frame, "creation_time", path, minimum=0)
    deleted = _numbers(frame, "deletion_time", path, minimum=0)
    jobs = [
        Job(p.name, f"openb/{p.num_gpu}x{p.gpu_milli}", created[i], p.num_gpu, max(0.0, deleted[i] - created[i]))
        for i, p in enumerate(pods)
        if p.num_gpu > 0
    ]
    return sorted(jobs, key=lambda j: j.arrival_s)


# --------------------------------------------------------------------------------------------------------------------
# Throughputs


def _positive(value: float) -> float | None:
    return value if value > 0 else None


def load_gavel_throughputs(path: Path) -> Throughputs:
    """Gavel's `simulation_throughputs.json` (`advisor.datasets.read_gavel_json`, the format's one reader): positive
    isolated steps/s per (GPU model, job type, GPUs, consolidated), and the pairs of 1-GPU jobs that shared a GPU."""
    out = Throughputs()
    for entry in read_gavel_json(path):
        solo = _positive(entry.steps_per_s)
        if solo is not None:
            out.isolated[(entry.gpu_model, entry.job_type, entry.scale, entry.consolidated)] = solo
        if entry.scale != 1 or not entry.consolidated:
            continue
        for other_type, other_scale, own, partner in entry.pairs:
            a, b = _positive(own), _positive(partner)
            if other_scale == 1 and a is not None and b is not None:
                out.colocated[(entry.gpu_model, entry.job_type, other_type)] = (a, b)
    if not out.isolated:
        raise InputDataError(f"{path}: no isolated throughput ('null' entry) found")
    return out


def load_throughputs(path: Path) -> Throughputs:
    """Gavel JSON, or a docs/design.md §6 colocations / throughputs CSV."""
    if path.suffix.lower() == ".json":
        return load_gavel_throughputs(path)
    frame = _read_csv(path)
    out = Throughputs()
    if _has(frame, COLOCATION_COLUMNS):
        models = [normalize_gpu_model(m) for m in _texts(frame, "gpu_model", path)]
        a_types, b_types = _texts(frame, "workload_a", path), _texts(frame, "workload_b", path)
        solo_a = _numbers(frame, "solo_throughput_a", path, minimum=0)
        solo_b = _numbers(frame, "solo_throughput_b", path, minimum=0)
        if not _has(frame, ("coloc_throughput_a", "coloc_throughput_b")):
            raise SimInputError(f"{path}: missing columns coloc_throughput_a, coloc_throughput_b")
        co_a = _numbers(frame, "coloc_throughput_a", path, minimum=0)
        co_b = _numbers(frame, "coloc_throughput_b", path, minimum=0)
        for i, model in enumerate(models):
            for job, solo in ((a_types[i], solo_a[i]), (b_types[i], solo_b[i])):
                if solo > 0:
                    out.isolated[(model, job, 1, True)] = solo
            if co_a[i] > 0 and co_b[i] > 0:
                out.colocated[(model, a_types[i], b_types[i])] = (co_a[i], co_b[i])
                out.colocated[(model, b_types[i], a_types[i])] = (co_b[i], co_a[i])
    elif _has(frame, THROUGHPUT_COLUMNS):
        models = [normalize_gpu_model(m) for m in _texts(frame, "gpu_model", path)]
        types = _texts(frame, "workload", path)
        counts = _numbers(frame, "gpu_count", path, minimum=1, integer=True)
        nodes = _numbers(frame, "nodes", path, minimum=1, integer=True) if "nodes" in frame.columns else None
        tput = _numbers(frame, "throughput", path, minimum=0)
        for i, model in enumerate(models):
            if tput[i] > 0:
                out.isolated[(model, types[i], int(counts[i]), nodes is None or nodes[i] == 1)] = tput[i]
    else:
        raise _missing(path, frame, {"colocations": COLOCATION_COLUMNS, "throughputs": THROUGHPUT_COLUMNS})
    if not out.isolated:
        raise SimInputError(f"{path}: no positive throughput")
    return out
