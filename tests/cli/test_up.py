"""`gpuadvisor up` as a newcomer runs it: it starts, answers the printed curl commands, and stops on Ctrl-C."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from advisor.cli.up import examples, node_names
from tests.support.fake_nvml import FakeGpu, FakeNvmlConfig, build_library, fake_nvml_env, write_config
from tests.support.net import free_port, wait_until

START_TIMEOUT_S = 120
# The summary (with the curl commands) follows the training of the reference models: seconds, more on a loaded machine.
SUMMARY_TIMEOUT_S = 240


def test_example_commands_are_valid_shell_with_json_bodies() -> None:
    by_path = {}
    for example in examples("http://127.0.0.1:8080", node_names(2)):
        argv = shlex.split(example.command)
        assert argv[0] == "curl"
        url = next(a for a in argv if a.startswith("http://127.0.0.1:8080/"))
        by_path[url.removeprefix("http://127.0.0.1:8080")] = (
            json.loads(argv[argv.index("-d") + 1]) if "-d" in argv else None
        )
    assert by_path["/v1/score"] == {"pod": {"gpus": 1, "workload": "resnet50-bs64"}}
    extender = by_path["/extender/prioritize"]
    assert extender["NodeNames"] == ["sim-node-1", "sim-node-2"]
    assert extender["Pod"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert by_path["/v1/nodes"] is None


def _lines_of(exposition: str, family: str) -> str:
    return "\n".join(line for line in exposition.splitlines() if line.startswith(family + "{"))


def _request(command: str) -> httpx.Response:
    """Run a printed curl command line through httpx (its URL, method and JSON body)."""
    argv = shlex.split(command)
    url = next(a for a in argv if a.startswith("http://"))
    if "-d" in argv:
        body = argv[argv.index("-d") + 1]
        return httpx.post(url, content=body, headers={"Content-Type": "application/json"}, timeout=10)
    return httpx.get(url, timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(SUMMARY_TIMEOUT_S + 60)
def test_up_trains_serves_scores_for_its_nodes_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """A fresh directory on a machine with two GPUs (the stand-in NVML library): /v1/score answers for the simulated
    nodes and this machine within 120 s; the reference models are trained on this first start and served once ready;
    the printed commands work; Ctrl-C stops everything."""
    port, metrics_port = free_port(), free_port()
    local_gpus = [
        FakeGpu(uuid=f"GPU-local-{i}", pci_bus_id=f"00000000:1{i}:00.0", nvlink_peers=[1 - i]) for i in (0, 1)
    ]
    nvml = fake_nvml_env(build_library(), write_config(FakeNvmlConfig(gpus=local_gpus), tmp_path / "nvml.conf"))
    expected_nodes = {"sim-node-1", "sim-node-2", socket.gethostname()}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "advisor.cli",
            "up",
            "--port",
            str(port),
            "--nodes",
            "2",
            "--gpus-per-node",
            "4",
            "--interval-s",
            "0.5",
            "--db",
            f"sqlite:///{tmp_path}/up.db",
            "--metrics-port",
            str(metrics_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env={**os.environ, **nvml, "PYTHONUNBUFFERED": "1", "COLUMNS": "400"},
    )
    lines: list[str] = []
    ready = threading.Event()

    def read_output() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("Press Ctrl-C"):
                ready.set()

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    try:

        def scored_both_nodes() -> bool:
            reply = httpx.post(f"http://127.0.0.1:{port}/v1/score", json={"pod": {"gpus": 1}}, timeout=10)
            scores = reply.json()["scores"] if reply.status_code == 200 else []
            return {s["node"] for s in scores if s["known"]} == expected_nodes

        assert wait_until(scored_both_nodes, START_TIMEOUT_S, interval_s=0.5), "\n".join(lines)
        assert ready.wait(SUMMARY_TIMEOUT_S), "\n".join(lines)
        assert any(line.strip().startswith("models") and "jct: jct v1" in line for line in lines), lines
        served = httpx.post(f"http://127.0.0.1:{port}/v1/score", json={"pod": {"gpus": 1}}, timeout=10).json()
        # The simulated nodes have no sharing label: time-slicing is assumed, a mode Gavel's pairs were not measured in.
        assert served["models"]["interference"].startswith("time-slicing prior (interference v"), served["models"]
        assert served["models"]["jct"].startswith("heuristic: no JCT estimate"), served["models"]  # no workload named
        pod = {"gpus": 1, "workload": "resnet50-bs64"}  # the quickstart's workload: the bundled models know it
        served = httpx.post(f"http://127.0.0.1:{port}/v1/score", json={"pod": pod}, timeout=10).json()
        assert served["models"]["jct"].startswith("jct v"), served["models"]
        assert served["models"]["speed"].startswith("throughput v"), served["models"]

        commands = [line for line in lines if line.startswith("curl ")]
        assert len(commands) == 3, lines
        for command in commands:
            answer = _request(command)
            assert answer.status_code == 200, f"{command}: {answer.text}"
        priorities = _request(next(c for c in commands if "/extender/prioritize" in c)).json()
        assert {p["Host"] for p in priorities} == expected_nodes
        assert all(0 <= p["Score"] <= 10 for p in priorities)
        # every node's collector series on the one port the banner prints, under the names of /v1/nodes
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        assert any(metrics_url in line for line in lines), lines
        exposition = httpx.get(metrics_url, timeout=10).text
        for family in ("gpuadvisor_gpu_info", "gpuadvisor_gpu_utilization_ratio"):
            assert {n for n in expected_nodes if f'node="{n}"' in _lines_of(exposition, family)} == expected_nodes
        pods = _lines_of(exposition, "gpuadvisor_pod_gpu_memory_used_bytes")  # the simulated nodes run pods
        assert {"sim-node-1", "sim-node-2"} <= {n for n in expected_nodes if f'node="{n}"' in pods}
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
        reader.join(5)
    assert code == 0, "\n".join(lines)
    assert any("stopped" in line for line in lines)
    assert "Traceback" not in "\n".join(lines)


def test_up_with_a_bad_store_url_exits_2_with_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "advisor.cli", "up", "--port", str(free_port()), "--db", "nonsense://x"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error:")
    assert "nonsense://x" in line
    assert "Traceback" not in result.stdout + result.stderr


REPO = Path(__file__).resolve().parents[2]


def _make_up(tmp_path: Path, port: int, args: str) -> subprocess.Popen[str]:
    """`make up PORT=… ARGS=…` in the checkout, with a virtualenv whose `gpuadvisor` is this interpreter's."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    script = venv / "bin" / "gpuadvisor"
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m advisor.cli "$@"\n')
    script.chmod(0o755)
    (venv / ".installed-stamp").touch()  # newer than pyproject.toml: nothing to install
    return subprocess.Popen(
        ["make", "--no-print-directory", "-C", str(REPO), "up", f"VENV={venv}", f"PORT={port}", f"ARGS={args}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "GPUADVISOR_MODEL_DIR": str(tmp_path / "models"), "PYTHONUNBUFFERED": "1"},
        start_new_session=True,  # Ctrl-C goes to make and gpuadvisor together, as in a terminal
    )


def test_make_up_takes_another_port_and_passes_other_options_through(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        refused = _make_up(tmp_path, taken, "")
        output, _ = refused.communicate(timeout=120)
    assert refused.returncode != 0
    assert f"cannot listen on 127.0.0.1:{taken}" in output
    assert "make up PORT=N" in output
    assert "Traceback" not in output

    port = free_port()
    proc = _make_up(tmp_path, port, f"--nodes 1 --gpus-per-node 2 --db sqlite:///{tmp_path}/up.db")
    try:

        def one_node() -> bool:
            nodes = httpx.get(f"http://127.0.0.1:{port}/v1/nodes", timeout=5).json()["nodes"]
            return [(n["name"], n["gpu_count"]) for n in nodes] == [("sim-node-1", 2)]

        assert wait_until(one_node, START_TIMEOUT_S, interval_s=0.5)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    assert f"advisor serving on port {port}" in output, output
    assert (tmp_path / "up.db").exists()
    assert "Traceback" not in output
