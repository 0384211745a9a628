"""PNG figures of a simulation (matplotlib, Agg backend: no display needed): allocation curves and JCT CDFs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from advisor.sim.jobs import JctResult
from advisor.sim.packing import FragmentationResult


def plot_allocation(results: Sequence[FragmentationResult], path: Path, title: str = "") -> Path:
    """GPU allocation ratio against arrived GPU demand (both as shares of cluster GPU capacity), one line per policy."""
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for r in results:
        ax.plot(r.arrived_ratio, r.allocation_ratio, label=f"{r.policy} ({r.gpu_allocation_ratio:.1%} at 100%)")
    ax.plot([0, 1], [0, 1], color="grey", linewidth=0.8, linestyle=":")
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("arrived GPU demand / cluster GPUs")
    ax.set_ylabel("allocated GPUs / cluster GPUs")
    return _save(fig, ax, title or "GPU allocation as demand grows", path)


def plot_jct_cdf(results: Sequence[JctResult], path: Path, title: str = "") -> Path:
    """Empirical CDF of job completion times (log scale), one line per policy."""
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
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
    return _save(fig, ax, title or "JCT CDF", path)


def _save(fig: Figure, ax: Axes, title: str, path: Path) -> Path:
    """Title, grid and legend, then write the PNG and free the figure."""
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
