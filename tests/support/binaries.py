"""Find the external binaries the tests drive; outside CI a missing one skips, under CI=true it fails."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

EXTRA_PATHS = [*sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True), Path("/usr/sbin")]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require_binary(name: str, why: str) -> str:
    """Path of executable `name`; skip the test (or fail it under CI) with `why` when it is absent."""
    found = shutil.which(name)
    if found is None:
        for directory in EXTRA_PATHS:
            candidate = directory / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                found = str(candidate)
                break
    if found is None:
        message = f"{name} not found on PATH: {why}"
        if in_ci():
            pytest.fail(message + " (CI=true: required)")
        pytest.skip(message)
    return found
