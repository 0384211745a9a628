"""Benchmark: predict latency of the three models for a batch of 500 rows, the scorer's hot path (goal ≤ 2 ms).

Trains the reference models from the bundled Gavel data (as `gpuadvisor up` does), then times single-threaded
batch predictions (trees evaluated by `advisor.models._forest`, as the service does): interference for 500
(resident, candidate) pairs of Gavel's measured workloads given column-wise and as `SoloProfile` objects, and
column-wise with both solo throughputs scaled ×1.37 under names never measured (the physical part, the offsets and
neighbour lookups finding nothing) and ×40 without names (the physical part alone); throughput for 500
(workload, GPU model, count, batch) rows in three mixes (all on GPU types Gavel never measured; Gavel's rows at
twice their batch size; Gavel's measured configurations themselves; in the last two every 100th row is on a GPU type
never measured, which takes the cross-GPU estimate); JCT quantiles for 500 jobs. Prints the median and p95 wall
time over the repetitions and the median CPU time of the calling thread, in milliseconds.

    .venv/bin/python bench/models_predict.py [--rows 500] [--reps 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from advisor.datasets import gavel_trace_executions, job_query_from_frame, load_gavel, side_columns_from_frame
from advisor.features import SoloProfile
from advisor.models.reference import GAVEL_THROUGHPUTS, GAVEL_TRACES, bundled_gavel_dir, train_reference_models
from advisor.models.registry import load_promoted
from profiler.store import db


def timed(fn: Callable[[], object], reps: int) -> tuple[float, float, float]:
    """(median wall ms, p95 wall ms, median CPU ms of this thread): CPU time is what a busy machine cannot inflate."""
    fn()
    wall, cpu = [], []
    for _ in range(reps):
        start, start_cpu = time.perf_counter(), time.thread_time()
        fn()
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.thread_time() - start_cpu) * 1e3)
    wall.sort()
    return statistics.median(wall), wall[int(0.95 * (len(wall) - 1))], statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        engine = db.make_engine(f"sqlite:///{tmp}/store.db")
        db.upgrade(engine)
        sessions = db.session_factory(engine)
        start, start_cpu = time.perf_counter(), time.process_time()
        train_reference_models(Path(tmp) / "models", sessions)
        print(
            f"reference models trained in {time.perf_counter() - start:.1f} s wall, "
            f"{time.process_time() - start_cpu:.1f} s CPU (bundled Gavel data, one LightGBM thread)"
        )
        models = load_promoted(sessions)
        engine.dispose()
    interference, throughput, jct = models.interference, models.throughput, models.jct
    if interference is None or throughput is None or jct is None:
        raise SystemExit(f"reference models missing: {models.describe()}")

    gavel = load_gavel(bundled_gavel_dir() / GAVEL_THROUGHPUTS)
    rng = np.random.default_rng(0)
    pairs = gavel.colocations.iloc[rng.integers(0, len(gavel.colocations), args.rows)].reset_index(drop=True)
    a, b = side_columns_from_frame(pairs, "a"), side_columns_from_frame(pairs, "b")
    gpus = pairs["gpu_model"].tolist()
    near_a, near_b = (replace(side, solo_throughput=1.37 * side.solo_throughput) for side in (a, b))
    far_a, far_b = (replace(side, solo_throughput=40.0 * side.solo_throughput) for side in (a, b))
    names_a, names_b = pairs["workload_a"].tolist(), pairs["workload_b"].tolist()
    new_a, new_b = ([f"new-{name}" for name in names] for names in (names_a, names_b))
    profiles = [
        (
            SoloProfile(r.workload_a, r.solo_throughput_a, int(r.batch_size_a)),
            SoloProfile(r.workload_b, r.solo_throughput_b, int(r.batch_size_b)),
        )
        for r in pairs.itertuples(index=False)
    ]
    thr = gavel.throughputs.iloc[rng.integers(0, len(gavel.throughputs), args.rows)].reset_index(drop=True)
    unseen = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla T4", "NVIDIA L4"]
    thr_gpus = [unseen[i % len(unseen)] for i in range(args.rows)]
    mixed_gpus = [unseen[i % len(unseen)] if i % 100 == 0 else g for i, g in enumerate(thr["gpu_model"])]
    thr_workloads = thr["workload"].tolist()
    thr_count, thr_batch = thr["gpu_count"].to_numpy(np.float64), thr["batch_size"].to_numpy(np.float64)
    thr_batch_x2 = 2.0 * thr_batch
    jobs = gavel_trace_executions(bundled_gavel_dir() / GAVEL_TRACES, gavel.throughputs)
    jobs = jobs.iloc[rng.integers(0, len(jobs), args.rows)].reset_index(drop=True)
    job_query = job_query_from_frame(jobs)
    cases: list[tuple[str, Callable[[], object]]] = [
        (
            "interference, measured, named (predict_columns)",
            lambda: interference.predict_columns(a, b, gpus, names_a, names_b),
        ),
        (
            "interference, new names x1.37 (predict_columns)",
            lambda: interference.predict_columns(near_a, near_b, gpus, new_a, new_b),
        ),
        ("interference, unnamed x40 (predict_columns)", lambda: interference.predict_columns(far_a, far_b, gpus)),
        ("interference, measured, SoloProfile (predict_pairs)", lambda: interference.predict_pairs(profiles, gpus)),
        (
            "throughput, unseen GPU types (predict)",
            lambda: throughput.predict(thr_workloads, thr_gpus, thr_count, thr_batch),
        ),
        (
            "throughput, 2x batch, 1% unseen GPU (predict)",
            lambda: throughput.predict(thr_workloads, mixed_gpus, thr_count, thr_batch_x2),
        ),
        (
            "throughput, measured, 1% unseen GPU (predict)",
            lambda: throughput.predict(thr_workloads, mixed_gpus, thr_count, thr_batch),
        ),
        ("jct quantiles (predict_query)", lambda: jct.predict_query(job_query)),
    ]
    print(f"{args.rows} rows per call, {args.reps} calls, one thread")
    for name, fn in cases:
        median, p95, cpu = timed(fn, args.reps)
        print(f"  {name:<52} median {median:6.2f} ms   p95 {p95:6.2f} ms   CPU median {cpu:6.2f} ms")


if __name__ == "__main__":
    main()
