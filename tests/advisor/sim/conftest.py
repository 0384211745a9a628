"""Small fixture files in the simulator's input formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def write(path: Path, text: str) -> Path:
    path.write_text(text.strip() + "\n")
    return path


@pytest.fixture
def gavel_json(tmp_path: Path) -> Path:
    """Two 1-GPU job types on K80 and V100, with one feasible and one infeasible co-location."""
    a, b = "('A (batch size 32)', 1)", "('B (batch size 64)', 1)"
    data = {
        "k80": {a: {"null": 2.0, a: [1.0, 1.0], b: [0.0, 0.0]}, b: {"null": 4.0, b: [2.0, 2.0], a: [0.0, 0.0]}},
        "v100": {a: {"null": 10.0, a: [5.0, 5.0], b: [5.0, 8.0]}, b: {"null": 10.0, b: [5.0, 5.0], a: [8.0, 5.0]}},
    }
    path = tmp_path / "throughputs.json"
    path.write_text(json.dumps(data))
    return path
