"""Variants of openb's default pod list in the way the FGD paper's trace families vary, for validating packing on
families whose published traces we do not have (docs/evaluation.md, "The packing profile keeps room for the
authors' target workload; validation on generated share- and multi-GPU-heavy traces").

    .venv/bin/python bench/openb_variants.py OUT_DIR [--seed 0] [--gpushare 20,60,80,100] [--multigpu 20,40,50]

writes OUT_DIR/openb_pod_list_gpushare<X>.csv and OUT_DIR/openb_pod_list_multigpu<X>.csv in the pod list's own
format (same columns), never into the repository. How they are made, read off the two published traces we have:

* gpushare<X>: the CPU-only pods as they are, and as many GPU pods as the default trace has, each drawn with
  replacement from the default's GPU-sharing pods or from its other GPU pods, so many of each that sharing pods make
  X % of the GPU demand (openb's gpushare40 is the default's 1,088 CPU-only pods and 7,064 GPU pods resampled so,
  every request one of the default's, sharing pods 40.07 % of the demand);
* multigpu<X>: the default trace, then pods drawn with replacement from its multi-GPU pods appended until
  multi-GPU pods make X % of the GPU demand (openb's multigpu30 is the default's 8,152 pods and 356 more of 2-8 GPUs).

Seeded (`--seed`); the same seed and arguments give the same files.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = next(
    (p / "shared" / "data" / "openb" for p in ROOT.parents if (p / "shared" / "data" / "openb").exists()),
    ROOT.parent / "shared" / "data" / "openb",
)
"""../shared/data/openb, looked for upward from the checkout (a worktree sits one level deeper)."""
GPU_MILLI = 1000

Row = dict[str, str]


def gpu_demand(row: Row) -> float:
    """The GPUs a pod asks for, a share as its fraction of one GPU."""
    return int(row["num_gpu"]) * int(row["gpu_milli"]) / GPU_MILLI


def is_share(row: Row) -> bool:
    return int(row["num_gpu"]) == 1 and int(row["gpu_milli"]) < GPU_MILLI


def gpushare_variant(rows: list[Row], share_ratio: float, rng: np.random.Generator) -> list[Row]:
    """CPU-only pods kept, the GPU pods redrawn so that sharing pods make `share_ratio` of the GPU demand."""
    without_gpu = [r for r in rows if int(r["num_gpu"]) == 0]
    shares = [r for r in rows if is_share(r)]
    whole = [r for r in rows if int(r["num_gpu"]) > 0 and not is_share(r)]
    count = len(shares) + len(whole)
    share_mean = float(np.mean([gpu_demand(r) for r in shares]))
    whole_mean = float(np.mean([gpu_demand(r) for r in whole]))
    # n shares of mean s among `count` pods: n s / (n s + (count − n) w) = ratio, solved for n.
    n_shares = round(count * share_ratio * whole_mean / (share_mean * (1 - share_ratio) + share_ratio * whole_mean))
    drawn = [shares[int(i)] for i in rng.integers(0, len(shares), n_shares)]
    drawn += [whole[int(i)] for i in rng.integers(0, len(whole), count - n_shares)] if count > n_shares else []
    mixed = [*without_gpu, *drawn]
    return [mixed[int(i)] for i in rng.permutation(len(mixed))]


def multigpu_variant(rows: list[Row], multi_ratio: float, rng: np.random.Generator) -> list[Row]:
    """The trace, then multi-GPU pods drawn from it until they make `multi_ratio` of the GPU demand."""
    multi = [r for r in rows if int(r["num_gpu"]) > 1]
    total = sum(gpu_demand(r) for r in rows)
    multi_demand = sum(gpu_demand(r) for r in multi)
    out = list(rows)
    while multi_demand < multi_ratio * total:
        row = multi[int(rng.integers(len(multi)))]
        out.append(row)
        multi_demand += gpu_demand(row)
        total += gpu_demand(row)
    return out


def write(path: Path, fields: list[str], rows: list[Row]) -> None:
    """The pod list with fresh names (openb-pod-NNNN in order), every column of the source."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for i, row in enumerate(rows):
            writer.writerow({**{k: row.get(k) or "" for k in fields}, "name": f"openb-pod-{i:04d}"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for the generated pod lists (created)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gpushare", default="20,60,80,100", help="sharing pods' share of GPU demand, %%")
    parser.add_argument("--multigpu", default="20,40,50", help="multi-GPU pods' share of GPU demand, %%")
    args = parser.parse_args()
    source = DATA / "openb_pod_list_default.csv"
    if not source.exists():
        sys.exit(f"openb data not found at {DATA}")
    with source.open(newline="") as f:
        reader = csv.DictReader(f)
        fields = list(reader.fieldnames or [])
        rows = list(reader)
    args.out.mkdir(parents=True, exist_ok=True)
    for family, make in (("gpushare", gpushare_variant), ("multigpu", multigpu_variant)):
        for percent in [int(p) for p in getattr(args, family).split(",") if p]:
            if not 0 < percent <= 100:
                sys.exit(f"--{family}: {percent} is not a percentage within 1..100")
            variant = make(rows, percent / 100, np.random.default_rng([args.seed, percent]))
            path = args.out / f"openb_pod_list_{family}{percent}.csv"
            write(path, fields, variant)
            demand = sum(gpu_demand(r) for r in variant)
            counted = is_share if family == "gpushare" else (lambda r: int(r["num_gpu"]) > 1)
            part = sum(gpu_demand(r) for r in variant if counted(r))
            print(f"{path}: {len(variant)} pods, {family} {100 * part / demand:.1f} % of {demand:.0f} GPUs")


if __name__ == "__main__":
    main()
