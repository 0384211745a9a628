"""PNG figures of a simulation (matplotlib, Agg backend: no display needed): allocation curves and JCT CDFs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from advisor.sim.jobs import JctResult
from advisor.sim.packing import FragmentationResult


def plot_allocation(results: Sequence[FragmentationResult], path: Path, title: str = "") -> Path:
    """GPU allocation ratio against arrived GPU demand (both as shares of cluster GPU capacity), one line per policy;
    beside it each policy's difference from the first one in percentage points, where differences of a fraction of a
    point (invisible on the full scale, where the curves lie on top of each other) can be read."""
    fig, (ax, diff) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=100)
    for r in results:
        ax.plot(r.arrived_ratio, r.allocation_ratio, label=f"{r.policy} ({r.gpu_allocation_ratio:.1%} at 100%)")
    ax.plot([0, 1], [0, 1], color="grey", linewidth=0.8, linestyle=":")
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("arrived GPU demand / cluster GPUs")
    ax.set_ylabel("allocated GPUs / cluster GPUs")
    ax.set_title("allocation", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if results:
        base = results[0]
        for r in results:
            grid = np.asarray(r.arrived_ratio, dtype=float)
            ours = np.asarray(r.allocation_ratio, dtype=float)
            theirs = np.interp(grid, base.arrived_ratio, base.allocation_ratio) if len(base.arrived_ratio) else ours
            points = (r.gpu_allocation_ratio - base.gpu_allocation_ratio) * 100
            diff.plot(grid, (ours - theirs) * 100, label=f"{r.policy} ({points:+.2f} points at 100%)")
        diff.axhline(0.0, color="grey", linewidth=0.8)
        diff.axvline(1.0, color="grey", linewidth=0.8)
        diff.set_xlabel("arrived GPU demand / cluster GPUs")
        diff.set_ylabel(f"allocated minus {base.policy}'s (percentage points)")
        diff.set_title(f"difference from {base.policy}", fontsize=10)
        diff.grid(alpha=0.3)
        diff.legend(fontsize=8)
    return _save(fig, title or "GPU allocation as demand grows", path)


def plot_jct_cdf(results: Sequence[JctResult], path: Path, title: str = "") -> Path:
    """Empirical CDF of job completion times (log scale), one line per policy."""
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for r in results:
        if not r.jct_s:
            continue
        values = np.maximum(np.asarray(r.jct_s), 1.0)
        ax.step(
            values,
            np.arange(1, len(values) + 1) / len(values),
            where="post",
            label=f"{r.policy} (avg {r.avg_jct_s / 3600:.1f} h)",
        )
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, title or "JCT CDF", path)


def _save(fig: Figure, title: str, path: Path) -> Path:
    """Title, then write the PNG and free the figure."""
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
