"""The advisor's hot routes under wrk, a C load generator: requests/s and latency percentiles that a Python client on
the same cores cannot show (it spends more CPU reading a 200 kB answer than the server spends writing it).

`gpuadvisor advisor serve --no-kube` in a subprocess on loopback, fed one synthetic snapshot per node (8 GPUs of mixed
models and occupancy, as `score_latency.py`), then for each route `wrk --latency` with one connection (latency) and
with several (throughput):
  * `POST /v1/score` over every node (`{"pod": {"gpus": 1}}`, the answer lists all of them);
  * `POST /extender/prioritize` with a full v1.Pod and the node names (kube-scheduler's call; one pod shape: warm);
plus the server's own CPU time per request over each run (the advisor's every process: its ingest workers too).
Then the same runs against the HTTP floor (`bench/http_floor.py`: FastAPI + uvicorn with the advisor's flags, an async
route answering the advisor's bytes), and each route's p50 over the floor's. Snapshots are pushed on a connection of
their own, so no measured connection is handed to an ingest worker. JSON last line.
wrk must be on PATH (Debian: `apt-get install wrk`);
without it the bench says so and measures nothing (exit 0, so that `make bench` goes on).

Usage: python bench/http_wrk.py [--nodes 500] [--seconds 10] [--connections 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from http.client import HTTPConnection
from pathlib import Path

from cluster import (
    POD_MIX,
    advisor_cpu_seconds,
    free_port,
    machine_note,
    post,
    push_snapshots,
    start_advisor,
    start_floor,
    synthetic_cluster,
)

LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("{body}", "rb"); wrk.body = f:read("*a"); f:close()
"""


def wrk(url: str, script: Path, *, seconds: int, connections: int, threads: int) -> dict[str, float]:
    """One wrk run: requests/s, p50 and p99 latency in ms, non-2xx count."""
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    def found(pattern: str) -> re.Match[str]:
        match = re.search(pattern, out, re.MULTILINE)
        if match is None:
            raise SystemExit(f"error: wrk's output has no {pattern!r}:\n{out}")
        return match

    def latency_ms(label: str) -> float:
        value, unit = found(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$").groups()
        return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

    rate = float(found(r"Requests/sec:\s+([\d.]+)").group(1))
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {
        "rps": rate,
        "p50_ms": latency_ms("50"),
        "p99_ms": latency_ms("99"),
        "non_2xx": float(errors.group(1) if errors else 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not on PATH (Debian: apt-get install wrk): nothing measured", file=sys.stderr)
        return
    snapshots = synthetic_cluster(args.nodes)
    names = [s["node"] for s in snapshots]
    bodies = {
        "/v1/score": {"pod": {"gpus": 1}},
        "/extender/prioritize": {"Pod": POD_MIX[0], "NodeNames": names},
    }
    port = free_port()
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        scripts: dict[str, Path] = {}
        answers: dict[str, bytes] = {}
        proc = start_advisor(port, Path(tmp) / "bench.db")
        try:
            push_snapshots(port, snapshots)  # on a connection of its own: wrk's are never handed to a worker
            conn = HTTPConnection("127.0.0.1", port, timeout=30)
            print(f"{args.nodes} nodes; {machine_note()}")
            for path, body in bodies.items():
                body_file = Path(tmp) / f"{path.strip('/').replace('/', '_')}.json"
                body_file.write_bytes(json.dumps(body).encode())
                status, answers[path] = post(conn, path, body_file.read_bytes())
                assert status == 200, (status, answers[path][:300])
                scripts[path] = Path(tmp) / f"{body_file.stem}.lua"
                scripts[path].write_text(LUA.format(body=body_file))
            conn.close()
            _measure("advisor", port, pid=proc.pid, scripts=scripts, answers=answers, args=args, figures=figures)
        finally:
            proc.terminate()
            proc.wait(10)
        floor_port = free_port()
        floor = start_floor(floor_port, answers, Path(tmp))
        try:
            _measure("floor", floor_port, pid=floor.pid, scripts=scripts, answers=answers, args=args, figures=figures)
        finally:
            floor.terminate()
            floor.wait(10)
    for key, advisor in figures.items():
        if key.startswith("advisor "):
            floor_figures = figures["floor " + key.removeprefix("advisor ")]
            advisor["p50_over_floor"] = advisor["p50_ms"] / max(floor_figures["p50_ms"], 1e-9)
            print(f"{key.removeprefix('advisor '):28s} p50 {advisor['p50_over_floor']:.1f} x the floor's")
    print(json.dumps({"nodes": args.nodes, "seconds": args.seconds, "runs": figures}))


def _measure(
    label: str,
    port: int,
    *,
    pid: int,
    scripts: dict[str, Path],
    answers: dict[str, bytes],
    args: argparse.Namespace,
    figures: dict[str, dict[str, float]],
) -> None:
    """wrk on every path at one connection and at `--connections`, the server's CPU (every process) beside it."""
    for path, script in scripts.items():
        for connections in (1, args.connections):
            cpu_before = advisor_cpu_seconds(pid)
            got = wrk(
                f"http://127.0.0.1:{port}{path}",
                script,
                seconds=args.seconds,
                connections=connections,
                threads=min(args.threads, connections),
            )
            got["server_cpu_ms"] = (advisor_cpu_seconds(pid) - cpu_before) * 1e3 / max(1.0, got["rps"] * args.seconds)
            figures[f"{label} {path} {connections} conn"] = got
            print(
                f"{label:7s} {path:22s} {connections:2d} conn: {got['rps']:7.0f} req/s  p50 {got['p50_ms']:.2f} ms"
                f"  p99 {got['p99_ms']:.2f} ms  server CPU {got['server_cpu_ms']:.2f} ms/request"
                f"  answer {len(answers[path])} B  non-2xx {got['non_2xx']:.0f}"
            )


if __name__ == "__main__":
    main()
