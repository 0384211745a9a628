"""What the interference model, its check and its baselines read from a colocations frame
(`advisor.datasets.COLOCATIONS`): the normalised-throughput targets, the rows that carry them, each pair's GPU model
and sharing mode, and the probe co-runs with fixed reference workloads (`advisor.models.interference`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from advisor.datasets import pair_families
from advisor.features import FloatArray
from advisor.gpus import normalize_gpu_model
from advisor.sharing import UNKNOWN, sharing_mode

NORM_MIN = 0.01
NORM_MAX = 1.0


def norm_targets(frame: pd.DataFrame) -> tuple[FloatArray, FloatArray]:
    """Measured (norm_a, norm_b) = co-located / solo throughput of a colocations frame."""
    norm_a = frame["coloc_throughput_a"].to_numpy(np.float64) / frame["solo_throughput_a"].to_numpy(np.float64)
    norm_b = frame["coloc_throughput_b"].to_numpy(np.float64) / frame["solo_throughput_b"].to_numpy(np.float64)
    return norm_a, norm_b


def usable_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows with positive solo and co-located throughputs on both sides (others carry no label)."""
    ok = np.ones(len(frame), dtype=bool)
    for column in ("solo_throughput_a", "solo_throughput_b", "coloc_throughput_a", "coloc_throughput_b"):
        ok &= frame[column].to_numpy(np.float64) > 0
    return frame[ok].reset_index(drop=True)


def gpu_names(frame: pd.DataFrame) -> list[str]:
    return [normalize_gpu_model(g) for g in frame["gpu_model"]]


def sharing_modes(frame: pd.DataFrame) -> list[str]:
    """Each pair's sharing mode (`advisor.sharing`; "" = unknown, also where the column is absent)."""
    if "sharing" not in frame.columns:
        return [UNKNOWN] * len(frame)
    return [sharing_mode(m) for m in frame["sharing"]]


def reference_workloads(frame: pd.DataFrame, count: int, *, excluded_families: set[str]) -> list[str]:
    """`count` fixed reference workloads of a colocations frame, none of `excluded_families`: the workloads measured
    with the most distinct partners, at most one per family (ties by name), as a profiler's reference set would be."""
    fam_a, fam_b = pair_families(frame)
    family = dict(zip(frame["workload_a"].astype(str), fam_a, strict=True)) | dict(
        zip(frame["workload_b"].astype(str), fam_b, strict=True)
    )
    both = pd.DataFrame(
        {
            "workload": np.concatenate([frame["workload_a"].astype(str), frame["workload_b"].astype(str)]),
            "partner": np.concatenate([frame["workload_b"].astype(str), frame["workload_a"].astype(str)]),
        }
    )
    partners = both.groupby("workload")["partner"].nunique()
    ranked = sorted(partners.index, key=lambda w: (-int(partners[w]), w))
    chosen: list[str] = []
    families: set[str] = set()
    for workload in ranked:
        fam = family[workload]
        if fam in excluded_families or fam in families:
            continue
        chosen.append(workload)
        families.add(fam)
        if len(chosen) == count:
            break
    return chosen


def probe_rows(
    frame: pd.DataFrame, held_out: npt.NDArray[np.bool_], references: Sequence[str]
) -> npt.NDArray[np.bool_]:
    """Rows of `held_out` that pair a held-out workload with a reference workload: the probe co-runs."""
    refs = set(references)
    ref_a = frame["workload_a"].astype(str).isin(refs).to_numpy()
    ref_b = frame["workload_b"].astype(str).isin(refs).to_numpy()
    result: npt.NDArray[np.bool_] = held_out & (ref_a | ref_b)
    return result
