"""Benchmark: training time of each model on the public data sets (and of the bundled reference models).

Each fit is the full `advisor.models.training.train` of `gpuadvisor models train`: one validation fit with the
baselines, then the final fit on every row. Prints wall and CPU seconds (CPU is what a busy machine cannot inflate).
The public sets are read from ../shared/data (or --data); a missing one is reported and skipped.

    .venv/bin/python bench/models_train.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from advisor.datasets import Kind, gavel_trace_executions, load_gavel, load_philly, load_sia
from advisor.models.reference import GAVEL_THROUGHPUTS, GAVEL_TRACES, bundled_gavel_dir
from advisor.models.training import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    args = parser.parse_args()
    gavel = bundled_gavel_dir()
    bundled = load_gavel(gavel / GAVEL_THROUGHPUTS)
    cases: list[tuple[str, Kind, Callable[[], pd.DataFrame]]] = [
        ("interference, Gavel 1-GPU pairs (bundled)", "interference", lambda: bundled.colocations),
        ("throughput, Gavel (bundled)", "throughput", lambda: bundled.throughputs),
        (
            "jct, Gavel traces (bundled)",
            "jct",
            lambda: gavel_trace_executions(gavel / GAVEL_TRACES, bundled.throughputs),
        ),
        ("throughput, Sia placements", "throughput", lambda: load_sia(args.data / "sia" / "sia_placements_all.csv")),
        ("jct, Philly", "jct", lambda: load_philly(args.data / "philly" / "philly.csv")),
    ]
    print(f"{'case':<45} {'rows':>7} {'wall s':>8} {'CPU s':>8}")
    for name, kind, load in cases:
        try:
            frame = load()
        except FileNotFoundError as e:
            print(f"{name:<45} skipped: {e}")
            continue
        start, start_cpu = time.perf_counter(), time.process_time()
        train(kind, frame, source=name)
        wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        print(f"{name:<45} {len(frame):>7} {wall:>8.1f} {cpu:>8.1f}")


if __name__ == "__main__":
    main()
