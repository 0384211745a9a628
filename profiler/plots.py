"""The `profile show --plot` figure: measured throughput per configuration (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # after use("Agg"): pyplot must not pick a GUI backend
from matplotlib.patches import Patch


def _label(profile: Mapping[str, Any]) -> str:
    batch = f" bs{profile['batch_size']}" if profile.get("batch_size") else ""
    return f"{profile['workload']}{batch}\n{profile['gpu_count']}× {profile['gpu_model']}"


def _side(colocation: Mapping[str, Any], side: str) -> str:
    batch = colocation.get(f"batch_size_{side}")
    return f"{colocation[f'workload_{side}']}" + (f" bs{batch}" if batch else "")


def plot_throughputs(
    profiles: Sequence[Mapping[str, Any]], colocations: Sequence[Mapping[str, Any]], path: Path, title: str
) -> None:
    """Bars of solo throughput per configuration; co-located throughputs of each side beside them, hatched."""
    labels = [_label(p) for p in profiles]
    values = [float(p["throughput_samples_per_s"]) for p in profiles]
    colors = ["tab:blue"] * len(values)
    for c in colocations:
        for side, other in (("a", "b"), ("b", "a")):
            labels.append(f"{_side(c, side)}\nwith {_side(c, other)}")
            values.append(float(c[f"coloc_throughput_{side}"]))
            colors.append("tab:orange")
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(values) + 2), 4.5))
    try:
        bars = ax.bar(range(len(values)), values, color=colors)
        for bar, color in zip(bars, colors, strict=True):
            if color == "tab:orange":
                bar.set_hatch("//")
        ax.set_xticks(range(len(values)), labels, fontsize=8)
        ax.set_ylabel("throughput (samples/s)")
        if colocations:
            ax.legend(
                handles=[
                    Patch(color="tab:blue", label="solo"),
                    Patch(color="tab:orange", hatch="//", label="sharing a GPU"),
                ]
            )
        ax.set_title(title)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
