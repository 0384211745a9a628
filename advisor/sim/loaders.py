"""Readers for the simulator's inputs: cluster files, job/pod traces and true-throughput tables.

Formats are recognised by their header, so one `--cluster`/`--trace`/`--throughputs` flag takes any of them:

* cluster: `node,gpu_model,gpus[,links][,cpu_milli][,memory_mib]` (links: NVLink groups such as `0-3/4-7`), or the
  openb node list `sn,cpu_milli,memory_mib,gpu,model`;
* trace: the openb pod list, the Philly CSV (`timestamp,duration,num_gpus,…`), a Gavel trace (`job_type,total_steps,
  scale_factor,arrival_time_s`), or docs/design.md §6 executions (`job_id,workload,user,gpu_model,gpu_count,submit_time,
  start_time,end_time`);
* throughputs: Gavel's `simulation_throughputs.json`, or docs/design.md §6 colocations / throughputs CSV.

Every file is read by `profiler.csv_table`, the one reading path of every CSV reader; every problem raises
`InputDataError` naming the file, the row (the file's line: the header is row 1) and the column.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from advisor.datasets import parse_times, read_gavel_json
from advisor.gpus import normalize_gpu_model
from advisor.sim.model import GPU_MILLI, Cluster, Job, Pod, SimNode, Throughputs
from profiler.csv_formats import InputDataError
from profiler.csv_table import CsvTable, read_csv_file

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


def _read_csv(path: Path) -> CsvTable:
    table = read_csv_file(path)
    if not len(table):
        raise InputDataError(f"{path}: no data rows")
    return table


def _missing(path: Path, table: CsvTable, kinds: dict[str, Sequence[str]]) -> InputDataError:
    expected = "; ".join(f"{name}: {', '.join(cols)}" for name, cols in kinds.items())
    return InputDataError(f"{path}: unrecognised columns {list(table.columns)}; expected one of — {expected}")


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
    table = _read_csv(path)
    if table.has(*CLUSTER_COLUMNS):
        name_col, model_col, gpu_col = "node", "gpu_model", "gpus"
    elif table.has(*OPENB_NODE_COLUMNS):
        name_col, model_col, gpu_col = "sn", "model", "gpu"
    else:
        raise _missing(path, table, {"cluster file": CLUSTER_COLUMNS, "openb node list": OPENB_NODE_COLUMNS})
    name_list = table.texts(name_col)
    models = table.texts(model_col)
    gpus = table.numbers(gpu_col, minimum=0, integer=True, maximum=MAX_NODE_GPUS)
    cpus = table.numbers("cpu_milli", minimum=0) if table.has("cpu_milli") else None
    mems = table.numbers("memory_mib", minimum=0) if table.has("memory_mib") else None
    links = table.column("links")
    nodes: list[SimNode] = []
    seen: set[str] = set()
    for i, name in enumerate(name_list):
        if name in seen:
            raise table.row_error(i, f"node {name!r} listed twice")
        seen.add(name)
        groups: tuple[tuple[int, ...], ...] = ()
        if links[i]:
            try:
                groups = parse_nvlink_groups(links[i], int(gpus[i]))
            except ValueError as e:
                raise table.error(i, "links", str(e)) from e
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
        raise InputDataError(f"{path}: the cluster has no GPU")
    return Cluster(tuple(nodes))


# --------------------------------------------------------------------------------------------------------------------
# Traces


def load_trace(path: Path) -> list[Pod] | list[Job]:
    """Pods (openb pod list) or jobs (Philly, Gavel, executions), recognised by the header."""
    table = _read_csv(path)
    if table.has(*OPENB_POD_COLUMNS):
        return _openb_pods(table, path)
    if table.has(*GAVEL_TRACE_COLUMNS):
        return _gavel_jobs(table, path)
    if table.has(*PHILLY_COLUMNS):
        return _philly_jobs(table, path)
    if table.has(*EXECUTION_COLUMNS):
        return _execution_jobs(table, path)
    raise _missing(
        path,
        table,
        {
            "openb pod list": OPENB_POD_COLUMNS,
            "Gavel trace": GAVEL_TRACE_COLUMNS,
            "Philly": PHILLY_COLUMNS,
            "executions": EXECUTION_COLUMNS,
        },
    )


def _openb_pods(table: CsvTable, path: Path) -> list[Pod]:
    names = table.texts("name")
    num_gpu = table.numbers("num_gpu", minimum=0, integer=True)
    milli = table.numbers("gpu_milli", minimum=0, integer=True)
    cpu = table.numbers("cpu_milli", minimum=0) if table.has("cpu_milli") else [0.0] * len(table)
    mem = table.numbers("memory_mib", minimum=0) if table.has("memory_mib") else [0.0] * len(table)
    specs = [_gpu_spec(raw) for raw in table.column("gpu_spec")]
    pods: list[Pod] = []
    for row, (name, k, m, c, mm) in enumerate(zip(names, num_gpu, milli, cpu, mem, strict=True)):
        if m > GPU_MILLI:
            raise table.error(row, "gpu_milli", f"must be at most {GPU_MILLI}, got {m:g}")
        if k > 0 and m == 0:
            raise table.error(row, "gpu_milli", f"0 with num_gpu {k:g}")
        if k > 1 and m < GPU_MILLI:
            raise table.error(row, "gpu_milli", f"a GPU share ({m:g}) needs num_gpu 1")
        pods.append(Pod(name, int(k), int(m) if k > 0 else 0, c, mm, specs[row] if k > 0 else ()))
    return pods


def _gpu_spec(raw: str) -> tuple[str, ...]:
    """openb's `gpu_spec`: the acceptable GPU models, `|`-separated (empty or missing: any)."""
    return tuple(part.strip() for part in raw.split("|") if part.strip())


def _gavel_jobs(table: CsvTable, path: Path) -> list[Job]:
    types = table.texts("job_type")
    steps = table.numbers("total_steps", minimum=0)
    scale = table.numbers("scale_factor", minimum=1, integer=True)
    arrival = table.numbers("arrival_time_s", minimum=0)
    traces = table.column("trace")
    idx = [str(int(x)) for x in table.numbers("job_idx")] if table.has("job_idx") else None
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


def _seconds(table: CsvTable, column: str) -> list[float]:
    """Unix seconds from numbers or ISO 8601 / `YYYY-mm-dd HH:MM:SS` timestamps (without a zone: UTC)."""
    cells = pd.Series(table.column(column), dtype=object)
    return [float(v) for v in parse_times(cells, column, table.source, allow_empty=False, rows=table.lines)]


def _philly_jobs(table: CsvTable, path: Path) -> list[Job]:
    times = _seconds(table, "timestamp")
    duration = table.numbers("duration", minimum=0)
    gpus = table.numbers("num_gpus", minimum=1, integer=True)
    clusters = [c or "philly" for c in table.column("cluster")] if table.has("cluster") else ["philly"] * len(table)
    start = min(times)
    jobs = [
        Job(str(i), f"philly/{clusters[i]}", times[i] - start, int(gpus[i]), duration[i]) for i in range(len(table))
    ]
    return sorted(jobs, key=lambda j: j.arrival_s)


def _execution_jobs(table: CsvTable, path: Path) -> list[Job]:
    ids = table.texts("job_id")
    workloads = table.texts("workload")
    gpus = table.numbers("gpu_count", minimum=1, integer=True)
    submit = _seconds(table, "submit_time")
    start = _seconds(table, "start_time")
    end = _seconds(table, "end_time")
    jobs: list[Job] = []
    origin = min(submit)
    for row in range(len(table)):
        if end[row] < start[row]:
            raise table.error(row, "end_time", "before start_time")
        jobs.append(Job(ids[row], workloads[row], submit[row] - origin, int(gpus[row]), end[row] - start[row]))
    return sorted(jobs, key=lambda j: j.arrival_s)


def pods_from_jobs(jobs: Sequence[Job]) -> list[Pod]:
    """A job trace as fragmentation-run pods: whole GPUs, no CPU/memory request."""
    return [Pod(j.job_id, j.num_gpus, GPU_MILLI) for j in jobs]


def jobs_from_pods(pods: Sequence[Pod], path: Path) -> list[Job]:
    """The openb pod list as a JCT trace: arrival = creation, work = seconds from scheduling to deletion."""
    table = _read_csv(path)
    if not table.has("creation_time", "deletion_time"):
        raise InputDataError(f"{path}: a JCT run needs columns 'creation_time' and 'deletion_time'")
    created = table.numbers("creation_time", minimum=0)
    deleted = table.numbers("deletion_time", minimum=0)
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
    table = _read_csv(path)
    out = Throughputs()
    if table.has(*COLOCATION_COLUMNS):
        models = [normalize_gpu_model(m) for m in table.texts("gpu_model")]
        a_types, b_types = table.texts("workload_a"), table.texts("workload_b")
        solo_a = table.numbers("solo_throughput_a", minimum=0)
        solo_b = table.numbers("solo_throughput_b", minimum=0)
        if not table.has("coloc_throughput_a", "coloc_throughput_b"):
            raise InputDataError(f"{path}: missing columns coloc_throughput_a, coloc_throughput_b")
        co_a = table.numbers("coloc_throughput_a", minimum=0)
        co_b = table.numbers("coloc_throughput_b", minimum=0)
        for i, model in enumerate(models):
            for job, solo in ((a_types[i], solo_a[i]), (b_types[i], solo_b[i])):
                if solo > 0:
                    out.isolated[(model, job, 1, True)] = solo
            if co_a[i] > 0 and co_b[i] > 0:
                out.colocated[(model, a_types[i], b_types[i])] = (co_a[i], co_b[i])
                out.colocated[(model, b_types[i], a_types[i])] = (co_b[i], co_a[i])
    elif table.has(*THROUGHPUT_COLUMNS):
        models = [normalize_gpu_model(m) for m in table.texts("gpu_model")]
        types = table.texts("workload")
        counts = table.numbers("gpu_count", minimum=1, integer=True)
        nodes = table.numbers("nodes", minimum=1, integer=True) if table.has("nodes") else None
        tput = table.numbers("throughput", minimum=0)
        for i, model in enumerate(models):
            if tput[i] > 0:
                out.isolated[(model, types[i], int(counts[i]), nodes is None or nodes[i] == 1)] = tput[i]
    else:
        raise _missing(path, table, {"colocations": COLOCATION_COLUMNS, "throughputs": THROUGHPUT_COLUMNS})
    if not out.isolated:
        raise InputDataError(f"{path}: no positive throughput")
    return out
