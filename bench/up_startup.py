"""`gpuadvisor up` from a fresh directory: seconds until it answers /v1/score, until the reference models are
trained and served, and until it has stopped after Ctrl-C.

One command, prints the figures recorded in docs/benchmarks.md: the time of each start-up step as `up` reports it,
the time from spawning the process to the first successful `POST /v1/score` over all simulated nodes, to the summary
(printed once the models trained on this first start are served), and from SIGINT to exit. Each run uses a new
temporary directory, i.e. a new SQLite store and no models yet.

Usage: python bench/up_startup.py [--runs 3] [--nodes 4]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def one_run(nodes: int) -> tuple[float, float, float, list[str]]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="gpuadvisor-up-") as cwd:
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "advisor.cli", "up", "--port", str(port), "--nodes", str(nodes)],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
        reader.start()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/score",
            data=b'{"pod": {"gpus": 1, "workload": "resnet50-bs64"}}',
            headers={"Content-Type": "application/json"},
        )
        ready_s = float("nan")
        while proc.poll() is None and time.monotonic() - started < 180:
            try:
                with urllib.request.urlopen(request, timeout=5) as reply:
                    if reply.status == 200 and reply.read().count(b'"known":true') >= nodes:
                        ready_s = time.monotonic() - started
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.1)
        while proc.poll() is None and not any(line.startswith("Press Ctrl-C") for line in lines):
            if time.monotonic() - started > 600:
                break
            time.sleep(0.1)
        models_s = time.monotonic() - started
        stop_started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        stop_s = time.monotonic() - stop_started
        reader.join(5)
    steps = [line.strip() for line in lines if line.startswith("✓")]
    return ready_s, models_s, stop_s, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=4)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    ready, served, stopped = [], [], []
    for run in range(1, args.runs + 1):
        ready_s, models_s, stop_s, steps = one_run(args.nodes)
        ready.append(ready_s)
        served.append(models_s)
        stopped.append(stop_s)
        print(
            f"run {run}: /v1/score answered after {ready_s:.1f} s, models served after {models_s:.1f} s, "
            f"stopped {stop_s:.1f} s after SIGINT"
        )
        for step in steps:
            print(f"    {step}")
    print(
        f"median over {args.runs} fresh starts ({args.nodes} nodes × 8 GPUs): first /v1/score after "
        f"{statistics.median(ready):.1f} s (goal ≤ 120 s), trained models served after "
        f"{statistics.median(served):.1f} s, stop after {statistics.median(stopped):.1f} s"
    )


if __name__ == "__main__":
    main()
