"""Fixtures of the model tests: the bundled Gavel data (always present) and the public sets in ../shared/data."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from advisor.datasets import GavelData, gavel_trace_executions, load_gavel
from advisor.models.interference import InterferenceModel
from advisor.models.reference import GAVEL_THROUGHPUTS, GAVEL_TRACES, bundled_gavel_dir
from tests.support.binaries import in_ci

SHARED_DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"
FAST = {"num_boost_round": 120, "num_threads": 1}
"""Fewer boosting rounds than the defaults, one thread: fits in tests take a second."""


@pytest.fixture(scope="session")
def gavel() -> GavelData:
    return load_gavel(bundled_gavel_dir() / GAVEL_THROUGHPUTS)


@pytest.fixture(scope="session")
def v100_pairs(gavel: GavelData) -> pd.DataFrame:
    return gavel.colocations[gavel.colocations["gpu_model"] == "v100"].reset_index(drop=True)


@pytest.fixture(scope="session")
def v100_interference(v100_pairs: pd.DataFrame) -> InterferenceModel:
    """An interference model fitted on Gavel's V100 pairs, shared by the tests (they must not mutate it)."""
    return InterferenceModel(**FAST).fit(v100_pairs)


@pytest.fixture(scope="session")
def gavel_executions(gavel: GavelData) -> pd.DataFrame:
    return gavel_trace_executions(bundled_gavel_dir() / GAVEL_TRACES, gavel.throughputs)


@pytest.fixture
def shared_data() -> Path:
    """../shared/data; skipped when absent outside CI (the public sets are not bundled), a failure under CI=true."""
    if not SHARED_DATA.is_dir():
        message = f"public data sets not found at {SHARED_DATA}"
        if in_ci():
            pytest.fail(message + " (CI=true: required)")
        pytest.skip(message)
    return SHARED_DATA
