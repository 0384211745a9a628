"""Fixtures of the collector tests: the stand-in NVML library and fixture /proc trees."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.fake_nvml import FakeNvmlConfig, build_library, fake_nvml_env, write_config

ConfigureNvml = Callable[[FakeNvmlConfig], dict[str, str]]


@pytest.fixture(scope="session")
def fake_nvml_library() -> Path:
    return build_library()


@pytest.fixture
def configure_nvml(fake_nvml_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ConfigureNvml:
    """Write a stand-in NVML config for this test, point the environment at it, return the env vars."""

    def configure(config: FakeNvmlConfig) -> dict[str, str]:
        env = fake_nvml_env(fake_nvml_library, write_config(config, tmp_path / "nvml.conf"))
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return env

    return configure


def write_proc(root: Path, cgroups: dict[int, str]) -> Path:
    """A fixture /proc tree: `<root>/<pid>/cgroup` with the given content per PID."""
    for pid, text in cgroups.items():
        (root / str(pid)).mkdir(parents=True, exist_ok=True)
        (root / str(pid) / "cgroup").write_text(text)
    return root
