"""Interference by sharing mode (docs/models.md): the H100 folder's time-sliced pairs against Gavel-trained models.

    .venv/bin/python bench/interference_sharing.py [--db ../shared/data/h100-2026-11-27/gpu.db] [--json]

Reads the co-location pairs the reference TrialRuns stored on a real H100 in its default compute mode (time-slicing)
and scores, on both sides of every pair: the interference model trained on Gavel's pairs (sharing unknown: on a
time-sliced pair it answers with the time-slicing prior alone), the time-slicing prior alone, the utilisation-sum
heuristic and "0.5 for everything". Those pairs were measured with the flawed protocol of issue 32 (sides that
barely overlapped, sides faster than alone): read the figures as a check of shape, not of accuracy.

The folder records no start and end times of a pair's two sides, so how much they overlapped cannot be read from
it. `--overlapped-only` keeps the pairs neither side of which ran faster than alone: a side faster while sharing
than alone can only be a pair whose sides barely met (plus solo noise), so such a pair says nothing about sharing.
The filter reads the measurements only, never a predictor's error. Both sets are printed by default.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.datasets import load_gavel, normalize_frame, side_columns_from_frame
from advisor.models.interference import InterferenceModel, norm_targets
from advisor.models.reference import GAVEL_THROUGHPUTS, bundled_gavel_dir
from advisor.sharing import time_slicing_prior, util_sum_prior
from profiler.csv_formats import COLOCATIONS

ROOT = Path(__file__).resolve().parents[1]
DB = ROOT.parent / "shared" / "data" / "h100-2026-11-27" / "gpu.db"
_QUERY = """
SELECT c.gpu_model, a.name, b.name, c.solo_throughput_a, c.solo_throughput_b, c.coloc_throughput_a,
       c.coloc_throughput_b, c.sm_util_a, c.mem_bw_util_a, c.mem_bytes_a, c.sm_util_b, c.mem_bw_util_b, c.mem_bytes_b,
       c.batch_size_a, c.batch_size_b
FROM colocations c JOIN workloads a ON a.id = c.workload_a_id JOIN workloads b ON b.id = c.workload_b_id
"""
_COLUMNS = [
    "gpu_model",
    "workload_a",
    "workload_b",
    "solo_throughput_a",
    "solo_throughput_b",
    "coloc_throughput_a",
    "coloc_throughput_b",
    "sm_util_a",
    "mem_bw_util_a",
    "mem_bytes_a",
    "sm_util_b",
    "mem_bw_util_b",
    "mem_bytes_b",
    "batch_size_a",
    "batch_size_b",
]


def h100_pairs(db: Path) -> pd.DataFrame:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        rows = connection.execute(_QUERY).fetchall()
    frame = pd.DataFrame(rows, columns=_COLUMNS).assign(sharing="time-slicing")
    return normalize_frame(frame, COLOCATIONS, with_labels=True, source=str(db))


def overlapped(pairs: pd.DataFrame) -> pd.DataFrame:
    """The pairs neither side of which ran faster than alone (see the module doc)."""
    norm_a, norm_b = norm_targets(pairs)
    return pairs[(norm_a <= 1.0) & (norm_b <= 1.0)].reset_index(drop=True)


def scores(pairs: pd.DataFrame, model: InterferenceModel) -> dict[str, float]:
    """MAE over both sides of every pair of each predictor."""
    truth = np.concatenate(norm_targets(pairs))
    a, b = side_columns_from_frame(pairs, "a"), side_columns_from_frame(pairs, "b")
    learned = model.predict_frame(pairs)
    predictions = {
        "model (trained on Gavel)": np.concatenate([learned[:, 0], learned[:, 1]]),
        "time-slicing prior": np.concatenate([time_slicing_prior(a, b), time_slicing_prior(b, a)]),
        "utilisation sum": np.concatenate([util_sum_prior(a, b), util_sum_prior(b, a)]),
        "0.5": np.full(len(truth), 0.5),
    }
    return {name: float(np.mean(np.abs(np.clip(p, 0.01, 1.0) - truth))) for name, p in predictions.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=DB)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.db.is_file():
        raise SystemExit(f"error: {args.db}: no such store (the H100 folder of ../shared/data)")
    pairs = h100_pairs(args.db)
    kept = overlapped(pairs)
    gavel = load_gavel(bundled_gavel_dir() / GAVEL_THROUGHPUTS).colocations
    model = InterferenceModel(num_threads=1).fit(gavel)
    faster = int(np.sum(np.concatenate(norm_targets(pairs)) > 1.0))
    mae, mae_overlapped = scores(pairs, model), scores(kept, model)
    if args.json:
        print(
            json.dumps(
                {
                    "pairs": len(pairs),
                    "sides_faster_than_alone": faster,
                    "mae": mae,
                    "overlapped_pairs": len(kept),
                    "mae_overlapped": mae_overlapped,
                }
            )
        )
        return
    print(f"{len(pairs)} pairs, {faster} sides faster than alone (a protocol artefact)")
    print(f"{'':26s} {'all pairs':>10s} {'overlapped (' + str(len(kept)) + ')':>16s}")
    for name, value in mae.items():
        print(f"{name:26s} {value:10.4f} {mae_overlapped[name]:16.4f}")


if __name__ == "__main__":
    main()
