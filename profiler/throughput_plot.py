"""The `profile show --plot` figure: a workload's measured throughput and its slowdown when sharing a GPU.

Matplotlib, headless. The figure has a fixed size whatever the number of profiles (a workload imported from a public
data set has hundreds): solo throughput against GPU count, one line per GPU model, and — when co-location runs exist —
the workload's throughput while sharing a GPU as a share of its solo throughput, one dot per partner, per GPU model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # after use("Agg"): pyplot must not pick a GUI backend
import numpy as np
from matplotlib.axes import Axes

WIDTH_INCHES, HEIGHT_INCHES, DPI = 6.5, 4.5, 100  # one panel; two panels side by side are twice as wide
MAX_SERIES_IN_LEGEND = 10


def _solo_panel(ax: Axes, profiles: Sequence[Mapping[str, Any]]) -> None:
    """Throughput against GPU count: every profile a marker, a line through the best one per count, per series."""
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for p in profiles:
        spread = " (over several nodes)" if int(p.get("node_count") or 1) > 1 else ""
        series[f"{p['gpu_model']}{spread}"].append((int(p["gpu_count"]), float(p["throughput_samples_per_s"])))
    counts: set[int] = set()
    for i, (label, points) in enumerate(sorted(series.items())):
        best: dict[int, float] = {}
        for count, value in points:
            best[count] = max(value, best.get(count, 0.0))
        xs = sorted(best)
        counts.update(xs)
        (line,) = ax.plot(xs, [best[x] for x in xs], marker="o", label=label if i < MAX_SERIES_IN_LEGEND else None)
        ax.scatter([c for c, _ in points], [v for _, v in points], color=line.get_color(), s=12, alpha=0.5)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(counts), [str(c) for c in sorted(counts)])
    ax.minorticks_off()
    ax.set_xlabel("GPUs")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_title("alone: best measured throughput per GPU count", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, title="GPU model", title_fontsize=7)


def _sharing_panel(ax: Axes, workload: str, colocations: Sequence[Mapping[str, Any]]) -> None:
    """The workload's co-located / solo throughput, one dot per partner and GPU model, with each model's median."""
    by_model: dict[str, list[float]] = defaultdict(list)
    for c in colocations:
        for side in ("a", "b"):
            if c[f"workload_{side}"] == workload and float(c[f"solo_throughput_{side}"]) > 0:
                by_model[str(c["gpu_model"])].append(float(c[f"norm_{side}"]))
    models = sorted(by_model)
    rng = np.random.default_rng(0)  # jitter only spreads the dots apart; fixed so the same data draws the same PNG
    for y, model in enumerate(models):
        values = np.asarray(by_model[model])
        ax.scatter(values, y + rng.uniform(-0.2, 0.2, len(values)), s=14, alpha=0.6)
        median = float(np.median(values))
        ax.plot([median, median], [y - 0.35, y + 0.35], color="black", linewidth=2)
        ax.annotate(f"median {median:.2f} ({len(values)} co-runs)", (median, y + 0.38), fontsize=7, ha="center")
    ax.axvline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.set_yticks(range(len(models)), models)
    ax.set_ylim(-0.6, len(models) - 0.4 + 0.3)
    ax.set_xlim(0, max(1.1, *(max(v) for v in by_model.values())) if by_model else 1.1)
    ax.set_xlabel("throughput sharing a GPU / throughput alone")
    ax.set_title("sharing a GPU with another workload", fontsize=10)
    ax.grid(alpha=0.3, axis="x")


def plot_throughputs(
    profiles: Sequence[Mapping[str, Any]],
    colocations: Sequence[Mapping[str, Any]],
    path: Path,
    title: str,
    workload: str,
) -> None:
    """Write the PNG: solo throughputs of `workload`, and its co-located throughputs beside them when there are any."""
    sharing = [c for c in colocations if workload in (c["workload_a"], c["workload_b"])]
    panels = 1 + bool(sharing) if profiles else 1
    fig, axes = plt.subplots(1, panels, figsize=(WIDTH_INCHES * panels, HEIGHT_INCHES), dpi=DPI, squeeze=False)
    try:
        if profiles:
            _solo_panel(axes[0][0], profiles)
        if sharing:
            _sharing_panel(axes[0][-1], workload, sharing)
        if not profiles and not sharing:
            axes[0][0].text(0.5, 0.5, "no successful measurement yet", ha="center", va="center")
            axes[0][0].set_axis_off()
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)
