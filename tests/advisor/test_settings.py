"""Service settings from the environment: the packing's task mix, and one clear line for a bad variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from advisor.placement.config import DEFAULT_WAIT_SLACK, ScoringConfig
from advisor.placement.fragmentation import DEFAULT_TASK_MIX
from advisor.settings import AdvisorSettings


def test_the_task_mix_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ScoringConfig.from_settings(AdvisorSettings()).task_mix == DEFAULT_TASK_MIX
    monkeypatch.setenv("GPUADVISOR_TASK_MIX", "[[1, 500, 0.5], [8, 1000, 0.5]]")
    assert ScoringConfig.from_settings(AdvisorSettings()).task_mix == ((1, 500, 0.5), (8, 1000, 0.5))


def test_the_task_mix_may_give_cpu_and_memory_per_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUADVISOR_TASK_MIX", "[[1, 500, 0.5], [8, 1000, 0.3, 64000, null], [0, 0, 0.2, 4000, 8192]]")
    config = ScoringConfig.from_settings(AdvisorSettings())
    assert config.task_mix == ((1, 500, 0.5), (8, 1000, 0.3, 64000.0, None), (0, 0, 0.2, 4000.0, 8192.0))
    assert config.resources is not None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[[1, 500, 0.5, 4000]]", "task_mix[0]: expected [gpus, milli, probability] or"),
        ("[[1, 500, 0.5, 4000, 1024], [1, 1000, 0.5, -1, 1024]]", "task_mix[1]: cpu_milli must be >= 0"),
        ("[[0, 0, 1.0]]", "task_mix[0]: a task without GPU needs its cpu_milli or memory_mib"),
    ],
)
def test_a_bad_task_mix_names_the_entry(monkeypatch: pytest.MonkeyPatch, value: str, message: str) -> None:
    monkeypatch.setenv("GPUADVISOR_TASK_MIX", value)
    with pytest.raises(ValueError, match="task_mix") as caught:
        AdvisorSettings()
    assert message in str(caught.value)


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
    assert "gpus 0 (a task without GPU) needs milli 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_extender_span_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ScoringConfig.from_settings(AdvisorSettings()).extender_span_points == 40.0
    monkeypatch.setenv("GPUADVISOR_EXTENDER_SPAN_POINTS", "20")
    assert ScoringConfig.from_settings(AdvisorSettings()).extender_span_points == 20.0
    monkeypatch.setenv("GPUADVISOR_EXTENDER_SPAN_POINTS", "0")
    with pytest.raises(ValueError, match="extender_span_points"):
        AdvisorSettings()


def test_the_wait_slack_comes_from_the_environment_and_zero_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ScoringConfig.from_settings(AdvisorSettings()).wait_slack == DEFAULT_WAIT_SLACK
    monkeypatch.setenv("GPUADVISOR_WAIT_SLACK", "1.5")
    assert ScoringConfig.from_settings(AdvisorSettings()).wait_slack == 1.5
    monkeypatch.setenv("GPUADVISOR_WAIT_SLACK", "0")
    assert ScoringConfig.from_settings(AdvisorSettings()).wait_slack is None


def test_holding_nodes_for_a_blocked_pod_is_off_unless_turned_on(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not ScoringConfig.from_settings(AdvisorSettings()).hold_for_blocked
    monkeypatch.setenv("GPUADVISOR_HOLD_FOR_BLOCKED", "true")
    assert ScoringConfig.from_settings(AdvisorSettings()).hold_for_blocked
    monkeypatch.setenv("GPUADVISOR_HOLD_FOR_BLOCKED", "sometimes")
    with pytest.raises(ValueError, match="hold_for_blocked"):
        AdvisorSettings()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "must be 0 (never wait for a faster GPU) or >= 1"),
        ("0.5", "must be 0 (never wait for a faster GPU) or >= 1"),
    ],
)
def test_a_bad_wait_slack_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch, value: str, message: str) -> None:
    monkeypatch.setenv("GPUADVISOR_WAIT_SLACK", value)
    with pytest.raises(ValueError, match="wait_slack") as caught:
        AdvisorSettings()
    assert message in str(caught.value)


def test_shortest_first_is_off_unless_turned_on(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not ScoringConfig.from_settings(AdvisorSettings()).shortest_first
    monkeypatch.setenv("GPUADVISOR_SHORTEST_FIRST", "true")
    assert ScoringConfig.from_settings(AdvisorSettings()).shortest_first
    monkeypatch.setenv("GPUADVISOR_SHORTEST_FIRST", "maybe")
    with pytest.raises(ValueError, match="shortest_first"):
        AdvisorSettings()


def test_per_model_task_mixes_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ScoringConfig.from_settings(AdvisorSettings()).model_task_mix is None
    monkeypatch.setenv("GPUADVISOR_MODEL_TASK_MIX", '{"T4": [[1, 1000, 0.5, 8000, 16384], [1, 1000, 0.5, 1e12, null]]}')
    config = ScoringConfig.from_settings(AdvisorSettings())
    assert config.for_model("Tesla-T4").task_mix == ((1, 1000, 0.5, 8000.0, 16384.0), (1, 1000, 0.5, 1e12, None))
    assert config.for_model("NVIDIA A100-SXM4-40GB") is config
    monkeypatch.setenv("GPUADVISOR_MODEL_TASK_MIX", '{"T4": [[1, 1000]]}')
    with pytest.raises(ValueError, match=r"T4: task_mix\[0\]: expected"):
        AdvisorSettings()
    monkeypatch.setenv("GPUADVISOR_MODEL_TASK_MIX", "[[1, 1000, 1.0]]")
    with pytest.raises(ValueError, match="JSON object of GPU model"):
        AdvisorSettings()


def test_the_best_fit_share_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ScoringConfig.from_settings(AdvisorSettings()).packing_best_fit_share == 0.2
    monkeypatch.setenv("GPUADVISOR_PACKING_BEST_FIT_SHARE", "0.1")
    assert ScoringConfig.from_settings(AdvisorSettings()).packing_best_fit_share == 0.1
    monkeypatch.setenv("GPUADVISOR_PACKING_BEST_FIT_SHARE", "2")
    with pytest.raises(ValueError, match="packing_best_fit_share"):
        AdvisorSettings()
