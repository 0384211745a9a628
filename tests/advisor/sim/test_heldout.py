"""What the Gavel experiment's advisor knows (advisor.sim.heldout), on the bundled Gavel data."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.sim.heldout import heldout_table
from advisor.sim.loaders import load_throughputs
from advisor.sim.rates import RateTable, truth_table

GAVEL = Path(__file__).resolve().parents[3] / "advisor" / "data" / "gavel" / "simulation_throughputs.json"

# Each call trains 28 interference models, each choosing its knobs by leave-one-family-out (≈ 50 s of CPU on one core
# of the 2-core CI machine): twice the suite's default limit leaves room for a busy machine without hiding a hang.
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def truth() -> RateTable:
    return truth_table(load_throughputs(GAVEL))


def _exact_share(believed: RateTable, truth: RateTable, gpu: str, *, count: int) -> float:
    keys = [k for k in truth.isolated if k[0] == gpu and k[2] == count and k[3]]
    assert keys
    return sum(abs(believed.isolated[k] / truth.isolated[k] - 1) < 1e-6 for k in keys) / len(keys)


def test_cold_knows_each_job_from_its_k80_trial_run_only(truth: RateTable) -> None:
    believed = heldout_table(GAVEL, knowledge="cold", rounds=5)
    assert _exact_share(believed, truth, "k80", count=1) == 1.0
    assert _exact_share(believed, truth, "v100", count=1) < 0.2
    assert _exact_share(believed, truth, "p100", count=1) < 0.2
    assert set(believed.norm) == set(truth.norm)
    assert all(0.0 < v <= 1.0 for v in believed.norm.values())


def test_profiled_knows_every_1_gpu_speed_and_predicts_the_rest(truth: RateTable) -> None:
    believed = heldout_table(GAVEL, knowledge="profiled", rounds=5)
    for gpu in ("k80", "p100", "v100"):
        assert _exact_share(believed, truth, gpu, count=1) == 1.0
    assert _exact_share(believed, truth, "v100", count=4) < 0.5  # multi-GPU speeds stay predictions
    assert set(believed.norm) == set(truth.norm)
    assert believed.norm != truth.norm  # co-location is never measured for the job's family


def test_unknown_knowledge_is_refused() -> None:
    with pytest.raises(ValueError, match="knowledge must be one of cold, profiled"):
        heldout_table(GAVEL, knowledge="psychic")
