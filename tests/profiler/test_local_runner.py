"""The local runner end to end: `gpuadvisor profile request FILE --local` (a subprocess, as a user runs it) with a
CPU-only workload script of known rate, NVML sampled through the collector's backend on the stand-in
libnvidia-ml.so.1; the same command in-process without a GPU and with a bad spec; and the runner itself for
co-location, crashes and the duration cap.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from advisor.cli.main import app
from collector.backend import NodeReading, SharingFacts
from collector.snapshot import GpuSnapshot
from profiler.local import CPU_MODEL, LocalRunner
from profiler.results import Phase, save_results
from profiler.spec import parse_trialrun
from profiler.store import db, repo
from profiler.summary import OverlapRule
from tests.support.fake_nvml import FakeGpu, FakeNvmlConfig, build_library, fake_nvml_env, write_config

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = Path(__file__).parent / "workloads" / "steady.py"
RATE = 400.0


def gpuadvisor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "advisor.cli", *args],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        cwd=REPO,
        timeout=120,
    )


def _doc(name: str, *, steps: int = 30, extra_args: tuple[str, ...] = (), **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpuadvisor.io/v1alpha1",
        "kind": "TrialRun",
        "metadata": {"name": name},
        "spec": {
            "workload": "steady",
            "image": "unused-locally",
            "command": [sys.executable, str(WORKLOAD), str(RATE), str(steps), *extra_args],
            "matrix": {"gpuCounts": [1], "batchSizes": [16]},
            "maxDurationSeconds": 60,
            "repeats": 1,
            **spec,
        },
    }


def _write(doc: dict[str, Any], path: Path) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def test_profile_request_local_stores_the_workloads_rate_with_nvml_telemetry(tmp_path: Path) -> None:
    config = write_config(FakeNvmlConfig(gpus=[FakeGpu(uuid="GPU-fake-0")]), tmp_path / "nvml.conf")
    env = {**fake_nvml_env(build_library(), config), "GPUADVISOR_DB_URL": f"sqlite:///{tmp_path}/store.db"}
    spec = _write(
        _doc("steady-local", steps=20, matrix={"gpuCounts": [1], "batchSizes": [16, 32]}), tmp_path / "spec.yaml"
    )

    result = gpuadvisor("profile", "request", str(spec), "--local", "--no-reference-partners", env=env)
    assert result.returncode == 0, result.stderr
    assert "Succeeded" in result.stdout

    plot = tmp_path / "steady.png"
    db_option = ["--db", env["GPUADVISOR_DB_URL"]]
    shown = CliRunner().invoke(app, ["profile", "show", "steady-local", "--json", "--plot", str(plot), *db_option])
    assert shown.exit_code == 0, shown.stderr
    assert plot.read_bytes().startswith(b"\x89PNG")
    detail = json.loads(shown.stdout)
    assert detail["phase"] == "Succeeded"
    assert sorted(p["batch_size"] for p in detail["profiles"]) == [16, 32]
    for profile in detail["profiles"]:
        assert profile["throughput_samples_per_s"] == pytest.approx(RATE, rel=0.10)
        assert profile["gpu_model"] == "NVIDIA H100 80GB HBM3"
        assert profile["peak_memory_bytes"] == 3 << 30
        assert profile["sm_util_mean_ratio"] == pytest.approx(0.65)
        assert profile["power_watts"] == pytest.approx(250.0)
        assert profile["mem_bw_util_ratio"] == pytest.approx(0.40)

    listed = CliRunner().invoke(app, ["profile", "list", "--json", *db_option])
    assert listed.exit_code == 0, listed.stderr
    (run,) = json.loads(listed.stdout)
    assert (run["name"], run["phase"], run["trials"], run["succeeded"]) == ("steady-local", "Succeeded", 2, 2)


def test_without_a_gpu_the_throughput_is_still_measured_with_a_warning(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store.db"
    env = {"GPUADVISOR_NVML_LIBRARY": str(tmp_path / "missing" / "libnvidia-ml.so.1"), "GPUADVISOR_DB_URL": url}
    spec = _write(_doc("no-gpu"), tmp_path / "s.yaml")
    result = CliRunner().invoke(app, ["profile", "request", str(spec), "--local", "--no-reference-partners"], env=env)
    assert result.exit_code == 0, result.stderr
    assert "warning: GPU telemetry unavailable" in result.stderr
    engine = db.make_engine(url)
    with db.session_factory(engine)() as s:
        (profile,) = repo.list_profiles(session=s, trial_run=("default", "no-gpu"))
    engine.dispose()
    assert profile.gpu_model == CPU_MODEL
    assert profile.throughput_samples_per_s == pytest.approx(RATE, rel=0.10)
    assert profile.sm_util_mean_ratio is None


def test_an_invalid_spec_exits_2_with_one_line_naming_the_field(tmp_path: Path) -> None:
    doc = _doc("bad", matrix={"gpuCounts": [0]})
    result = CliRunner().invoke(app, ["profile", "request", str(_write(doc, tmp_path / "bad.yaml")), "--local"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "spec.matrix.gpuCounts[0]" in lines[0]


def _run(
    doc: dict[str, Any], tmp_path: Path, overlap: OverlapRule = OverlapRule()
) -> tuple[list[Any], dict[str, Any], Any]:
    run = parse_trialrun(doc)
    runner = LocalRunner(backend=None, sample_interval_seconds=0.05, overlap=overlap)
    outcomes = runner.run(run)
    engine = db.make_engine(f"sqlite:///{tmp_path}/store.db")
    db.upgrade(engine)
    with db.transaction(db.session_factory(engine)) as session:
        status = save_results(session=session, run=run, trials=runner.trials(run), outcomes=outcomes)
    return outcomes, status, engine


def test_colocation_runs_both_sides_at_once_and_normalises_against_the_solos(tmp_path: Path) -> None:
    endless = "100000"  # time-bound: the runner stops each trial after 1.5 s of steady (overlapping) progress
    partner = {"workload": "half", "command": ["python", str(WORKLOAD), str(RATE / 2), endless], "batchSize": 8}
    doc = _doc("pair", steps=100_000, colocateWith=[partner], steadySeconds=1.5)
    outcomes, status, engine = _run(doc, tmp_path, OverlapRule(min_seconds=1.0, min_share=0.3))
    assert [o.trial.kind.value for o in outcomes] == ["solo", "solo", "pair"]
    assert status["phase"] == "Succeeded", status["message"]
    assert [o.notes["ended"] for o in outcomes] == ["measured"] * 3
    with db.session_factory(engine)() as s:
        (coloc,) = repo.list_colocations(session=s)
    assert (coloc.workload_a, coloc.workload_b) == ("steady", "half")
    assert coloc.solo_throughput_b == pytest.approx(RATE / 2, rel=0.15)  # a sleeper paced per step lags under load
    assert coloc.norm_a == pytest.approx(1.0, rel=0.15)  # CPU sleepers do not slow each other down
    assert coloc.sharing == "time-slicing"  # two processes on this machine's cores
    engine.dispose()


def test_a_pair_that_never_overlaps_fails_and_stores_no_colocation(tmp_path: Path) -> None:
    late = {"workload": "late", "command": ["sh", "-c", f"sleep 2; exec {sys.executable} {WORKLOAD} {RATE} 20"]}
    outcomes, status, engine = _run(_doc("apart", steps=20, colocateWith=[late]), tmp_path)
    pair = outcomes[-1]
    assert pair.phase is Phase.FAILED
    assert "ran together past their warm-ups for 0.00 s" in pair.message
    with db.session_factory(engine)() as s:
        assert repo.list_colocations(session=s) == []
    assert status["phase"] == "Failed"
    engine.dispose()


def test_a_python_command_runs_under_the_runners_interpreter(tmp_path: Path) -> None:
    shadow = tmp_path / "bin"
    shadow.mkdir()
    (shadow / "python").write_text("#!/bin/sh\necho 'the python first on PATH' >&2\nexit 7\n")
    (shadow / "python").chmod(0o755)
    doc = _doc("which-python")
    doc["spec"]["command"] = ["python", str(WORKLOAD), str(RATE), "20"]
    run = parse_trialrun(doc)
    env = {**os.environ, "PATH": f"{shadow}:{os.environ.get('PATH', '')}"}
    (outcome,) = LocalRunner(backend=None, sample_interval_seconds=0.05, base_env=env).run(run)
    assert outcome.phase is Phase.SUCCEEDED, outcome.message  # the shadowing python would have exited 7


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="PyTorch is installed here")
def test_without_pytorch_the_reference_partners_are_skipped_with_one_note_and_the_run_exits_0(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store.db"
    env = {"GPUADVISOR_NVML_LIBRARY": str(tmp_path / "missing" / "libnvidia-ml.so.1"), "GPUADVISOR_DB_URL": url}
    doc = _doc("alone", steps=20)  # no colocateWith: the reference partners would be added
    result = CliRunner().invoke(app, ["profile", "request", str(_write(doc, tmp_path / "s.yaml")), "--local"], env=env)
    assert result.exit_code == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1
    assert "cnn-bs64, transformer-bs32, recommender-bs256 skipped" in notes[0]
    assert "pip install 'gpuadvisor[workloads]'" in notes[0]
    assert "Succeeded" in result.stdout


class _OneGpu:
    """A GPU backend with one idle GPU; the sharing facts come from `facts`, as NVML's would."""

    def __init__(self, facts: SharingFacts) -> None:
        self.facts = facts
        self.asked: list[int] = []

    def read(self) -> NodeReading:
        return NodeReading(driver_version="test", gpus=(GpuSnapshot(index=0, uuid="GPU-0", model="Test GPU"),))

    def sharing_facts(self, index: int) -> SharingFacts:
        self.asked.append(index)
        return self.facts

    def close(self) -> None:
        """Nothing to release."""


@pytest.mark.parametrize(
    ("facts", "sharing"),
    [
        (SharingFacts(compute_mode="default", mig_enabled=False), "time-slicing"),
        (SharingFacts(compute_mode="default", mig_enabled=True), "mig"),
    ],
)
def test_a_pair_records_how_the_gpu_was_shared_as_the_driver_says(
    tmp_path: Path, facts: SharingFacts, sharing: str
) -> None:
    partner = {"workload": "half", "command": ["python", str(WORKLOAD), str(RATE / 2), "100000"], "batchSize": 8}
    run = parse_trialrun(_doc("shared", steps=100_000, colocateWith=[partner], steadySeconds=1.0))
    backend = _OneGpu(facts)
    runner = LocalRunner(
        backend=backend,
        sample_interval_seconds=0.05,
        overlap=OverlapRule(min_seconds=1.0, min_share=0.3),
        sharing_facts=backend.sharing_facts,
    )
    outcomes = runner.run(run)
    pair = outcomes[-1]
    assert pair.phase is Phase.SUCCEEDED, pair.message
    assert pair.notes["sharing"] == sharing
    assert backend.asked
    assert all(o.notes.get("sharing") is None for o in outcomes[:-1])  # solo runs share nothing
