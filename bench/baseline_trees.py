"""The source trees a `--baseline REF` bench measures side by side: this checkout, and REF's files unpacked from git
into a temporary folder (imported from there by the bench's own subprocess), for as long as the `with` lasts."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
THIS_TREE = "this tree"


@contextmanager
def trees(baseline: str | None) -> Iterator[dict[str, Path]]:
    """{name: root}: the baseline first (when given), then this tree."""
    with tempfile.TemporaryDirectory() as tmp:
        if baseline is None:
            yield {THIS_TREE: ROOT}
            return
        base = Path(tmp) / "baseline"
        base.mkdir()
        archive = subprocess.run(["git", "archive", baseline], check=True, capture_output=True, cwd=ROOT)
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        yield {f"baseline {baseline}": base, THIS_TREE: ROOT}


def print_load() -> tuple[float, float, float]:
    """Print and return the machine's load averages as the bench starts (figures taken under load say so)."""
    load = os.getloadavg()
    print(f"{os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} when started")
    return load


def alternate(baseline: str | None, measure: Callable[[Path], dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """{name: [figures, ...]}: `measure` of each tree in turn, baseline first, two rounds when there is a baseline
    (so that neither tree always runs first), each round's figures printed as they come."""
    with trees(baseline) as roots:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in roots}
        for _ in range(2 if baseline else 1):
            for name, root in roots.items():
                got = measure(root)
                runs[name].append(got)
                print(f"{name}: {got}")
    return runs
