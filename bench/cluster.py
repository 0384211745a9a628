"""Synthetic clusters for the advisor benchmarks: NodeSnapshots, v1.Pods and a served advisor to measure.

Shared by `score_latency.py` and `ingest.py` (run from the repository root: `python bench/<name>.py`).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

GIB = 1 << 30
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB", "NVIDIA L4")
WORKLOADS = ("resnet50-bs64", "bert-base-bs32", "gpt2-bs8")


def _links(gpus: int, kind: int) -> list[dict[str, Any]]:
    half = gpus // 2

    def level(a: int, b: int) -> str:
        if kind == 0:  # NVSwitch: all pairs NVLink
            return "NVLINK"
        if kind == 1:  # two NVLink islands, one per socket
            return "NVLINK" if a // half == b // half else "NUMA"
        if a // 2 == b // 2:  # PCIe only: pairs behind a switch, halves behind a host bridge
            return "PCIE_SWITCH"
        return "PCIE_HOSTBRIDGE" if a // half == b // half else "SYSTEM"

    return [{"a": a, "b": b, "level": level(a, b)} for a in range(gpus) for b in range(a + 1, gpus)]


def synthetic_snapshot(
    node: str, rng: random.Random, *, gpus: int = 8, processes_per_gpu: int | None = None
) -> dict[str, Any]:
    """One node's NodeSnapshot JSON. By default ~half the GPUs are busy and some shared (≈ 4–5 residents/node)."""
    out = []
    model = MODELS[rng.randrange(len(MODELS))]
    for i in range(gpus):
        n = processes_per_gpu if processes_per_gpu is not None else rng.choice((0, 0, 0, 0, 1, 1, 1, 2))
        procs = [
            {
                "pid": 1000 + i * 10 + p,
                "memory_used_bytes": rng.randrange(1, 30) * GIB,
                "sm_utilization_ratio": round(rng.random() * 0.9, 3),
                "pod": {
                    "namespace": "ml",
                    "name": f"{node}-g{i}-p{p}",
                    "uid": f"u-{node}-{i}-{p}",
                    "container": "main",
                    "workload": rng.choice(WORKLOADS),
                },
            }
            for p in range(n)
        ]
        out.append(
            {
                "index": i,
                "uuid": f"GPU-{node}-{i}",
                "model": model,
                "healthy": rng.random() > 0.002,
                "memory_total_bytes": 80 * GIB,
                "memory_used_bytes": sum(p["memory_used_bytes"] for p in procs),
                "utilization_ratio": min(1.0, sum(p["sm_utilization_ratio"] for p in procs)),
                "memory_bandwidth_utilization_ratio": round(rng.random() * 0.8, 3) if procs else 0.0,
                "power_watts": 250.0,
                "temperature_celsius": 55.0,
                "processes": procs,
            }
        )
    return {
        "node": node,
        "timestamp": datetime.now(UTC).isoformat(),
        "gpus": out,
        "links": _links(gpus, rng.randrange(3)),
    }


def synthetic_cluster(nodes: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [synthetic_snapshot(f"node-{i:04d}", rng) for i in range(nodes)]


def v1_pod(gpus: int, *, share_milli: int | None = None) -> dict[str, Any]:
    """A v1.Pod as kube-scheduler sends it (trimmed of nothing the scheduler would strip)."""
    limits: dict[str, str] = {"cpu": "8", "memory": "64Gi"}
    annotations = {"kubectl.kubernetes.io/last-applied-configuration": "{}"}
    if share_milli is None:
        limits["nvidia.com/gpu"] = str(gpus)
    else:
        annotations["gpuadvisor.io/gpu-milli"] = str(share_milli)
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": "train-0",
            "namespace": "ml",
            "uid": "0b4f7a2e-52a4-4c53-9c5e-3f3d7f2b9a10",
            "labels": {"gpuadvisor.io/workload": "resnet50-bs64", "app": "trainer"},
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": "gpuadvisor-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "command": ["python", "train.py"],
                    "resources": {"limits": limits, "requests": {"cpu": "4", "memory": "32Gi"}},
                }
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
        "status": {"phase": "Pending"},
    }


POD_MIX = [v1_pod(1), v1_pod(1), v1_pod(2), v1_pod(4), v1_pod(8), v1_pod(0, share_milli=250)]


def percentiles_ms(samples_s: list[float]) -> tuple[float, float]:
    ordered = sorted(samples_s)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1e3, p99 * 1e3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), robust to other load on the machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def advisor_cpu_seconds(pid: int) -> float:
    """User + system CPU time so far of the process `pid` and of every process below it (an advisor's ingest
    workers): "server CPU" is what the whole advisor spent."""
    total = 0.0
    pending = [pid]
    while pending:
        p = pending.pop()
        try:
            total += process_cpu_seconds(p)
        except OSError:  # gone since listed
            continue
        pending += child_pids(p)
    return total


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid` (an advisor's ingest workers), from /proc."""
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                children.append(int(entry.name))
    return sorted(children)


def post(conn: http.client.HTTPConnection, path: str, body: bytes) -> tuple[int, bytes]:
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, response.read()


def push_snapshots(port: int, snapshots: list[dict[str, Any]]) -> None:
    """Every snapshot to `POST /v1/telemetry`, each accepted (202), on a connection of its own, closed after: the
    advisor hands a connection that pushes telemetry to its ingest worker, and a timed request on that connection
    would be forwarded through the worker (a hop kube-scheduler's connections never take)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for raw in snapshots:
            status, _ = post(conn, "/v1/telemetry", json.dumps(raw).encode())
            assert status == 202, status
    finally:
        conn.close()


def timed_requests(
    conn: http.client.HTTPConnection, pid: int, path: str, bodies: list[bytes], requests: int
) -> tuple[float, float, float]:
    """`requests` posts of `bodies` in turn to `path` on one keep-alive connection: (p50 ms, p99 ms, the server's
    CPU ms per request: process `pid` and its workers, `advisor_cpu_seconds`)."""
    times = []
    cpu0 = advisor_cpu_seconds(pid)
    for i in range(requests):
        t0 = time.perf_counter()
        status, _ = post(conn, path, bodies[i % len(bodies)])
        times.append(time.perf_counter() - t0)
        assert status == 200
    cpu_ms = (advisor_cpu_seconds(pid) - cpu0) / requests * 1e3
    p50, p99 = percentiles_ms(times)
    return p50, p99, cpu_ms


def sustained_rate(port: int, path: str, bodies: list[bytes], clients: int, seconds: float) -> tuple[float, float]:
    """`clients` keep-alive clients posting `bodies` in turn to `path` for `seconds`: (requests/s, elapsed s)."""
    counts = [0] * clients
    stop = time.perf_counter() + seconds

    def worker(k: int) -> None:
        c = http.client.HTTPConnection("127.0.0.1", port)
        i = k
        while time.perf_counter() < stop:
            s, _ = post(c, path, bodies[i % len(bodies)])
            assert s == 200
            counts[k] += 1
            i += 1

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    return sum(counts) / elapsed, elapsed


START_SECONDS = 300
"""How long a bench waits for the advisor or the floor to answer: at load 12-15 on 2 cores an advisor took over 60 s
to start, so the benches measured nothing on the loaded machine they are meant to report from."""


def start_advisor(port: int, db_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`gpuadvisor advisor serve --no-kube` on loopback (settings from `env` too), waiting until /healthz answers."""
    # A benchmark stack on loopback: snapshots are pushed without a token.
    env = {
        **os.environ,
        "GPUADVISOR_STALENESS_SECONDS": "3600",
        "GPUADVISOR_ALLOW_UNAUTHENTICATED_WRITES": "true",
        **(env or {}),
    }
    argv = ["advisor", "serve", "--no-kube", "--host", "127.0.0.1", "--port", str(port), "--db", f"sqlite:///{db_path}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "advisor.cli", *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_healthz(port, proc, START_SECONDS)
    except SystemExit:
        proc.terminate()
        raise
    return proc


def wait_healthz(port: int, proc: subprocess.Popen[bytes], seconds: float) -> None:
    """Wait until the advisor `proc` on loopback `port` answers /healthz with 200; one `error:` line and exit when it
    exits first or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"error: the advisor exited with {proc.returncode} before it served")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"error: the advisor did not answer /healthz within {seconds:g} s")


def machine_note() -> str:
    load = os.getloadavg()
    return f"{os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} when started"


def start_floor(port: int, answers: dict[str, bytes], directory: Path) -> subprocess.Popen[bytes]:
    """The HTTP floor (`bench/http_floor.py`: FastAPI + uvicorn with the advisor's flags, an async route per path
    answering the advisor's bytes) on loopback, waiting until it accepts connections."""
    files: dict[str, str] = {}
    for i, (path, data) in enumerate(answers.items()):
        file = directory / f"floor_answer_{i}.json"
        file.write_bytes(data)
        files[path] = str(file)
    script = Path(__file__).resolve().parent / "http_floor.py"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(port), json.dumps(files)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"error: the HTTP floor exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.terminate()
    raise SystemExit(f"error: the HTTP floor did not start within {START_SECONDS} s")


def floor_requests(
    path: str, answer: bytes, bodies: list[bytes], requests: int, directory: Path
) -> tuple[float, float, float]:
    """`timed_requests` against the HTTP floor answering `answer` on `path` (`start_floor`): the framework's own
    (p50 ms, p99 ms, CPU ms per request) for the same bodies and answer bytes."""
    port = free_port()
    floor = start_floor(port, {path: answer}, directory)
    try:
        return timed_requests(http.client.HTTPConnection("127.0.0.1", port), floor.pid, path, bodies, requests)
    finally:
        floor.terminate()
        floor.wait(10)
