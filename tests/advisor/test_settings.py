"""Service settings from the environment: the packing's task mix, and one clear line for a bad variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from advisor.api.app import scoring_config
from advisor.fragmentation import DEFAULT_TASK_MIX
from advisor.settings import AdvisorSettings


def test_the_task_mix_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert scoring_config(AdvisorSettings()).task_mix == DEFAULT_TASK_MIX
    monkeypatch.setenv("GPUADVISOR_TASK_MIX", "[[1, 500, 0.5], [8, 1000, 0.5]]")
    assert scoring_config(AdvisorSettings()).task_mix == ((1, 500, 0.5), (8, 1000, 0.5))


def test_a_bad_setting_exits_2_naming_the_variable() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "advisor.cli", "advisor", "serve", "--port", "1"],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "GPUADVISOR_TASK_MIX": "[[0, 500, 1.0]]"},
        timeout=60,
    )
    assert result.returncode == 2
    assert "GPUADVISOR_TASK_MIX" in result.stderr
    assert "gpus must be >= 1" in result.stderr
    assert "Traceback" not in result.stderr
