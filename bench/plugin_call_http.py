"""The served advisor's CPU per scheduler-plugin delta call over HTTP: `bench/plugin_call_cpu.py` measures
`fast_score` in-process, this the whole request as gpuadvisor-scheduler makes it — uvicorn's HTTP parsing, the ASGI
middleware, the answer and the socket writes — in `gpuadvisor advisor serve --no-kube` (its garbage-collector
settings and all), which is what the plugin's scheduling rate pays for on a machine the advisor shares with the
scheduler (bench/scheduler_throughput.py).

N nodes with fresh snapshots (0..6 of 8 GPUs busy, seeded) are pushed, then calls go over one kept-alive connection
as the plugin sends them: `detail: brief`, `unknown_nodes: neutral`, `since` chaining the tokens, 500 candidates in a
window that moves on by 500 nodes each call and is shuffled (kube-scheduler's parallel Filter gives each cycle its
own order), the last six placed pods that are on the window as assumed pods. The first 20 calls fill the delta
table and are not timed; then the advisor process's CPU (user + system, from /proc) per call over `--calls` calls.

With `--baseline REF`, that commit's advisor is measured too (its files unpacked into a temporary folder), the two
alternated twice so that both see the same machine load.

Run from the repository root: python bench/plugin_call_http.py [--nodes 5000] [--calls 600] [--baseline REF]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import baseline_trees
from baseline_trees import print_load
from plugin_call_cpu import WINDOW, _wire, call_body

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.advisor.factories import process, snapshot  # noqa: E402 - the repository root is on the path first
from tests.support.net import free_port  # noqa: E402

TOKEN = "bench"
WARM_CALLS = 20
READY_SECONDS = 120


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ready(port: int, advisor: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if advisor.poll() is not None:
            sys.exit(f"error: the advisor exited with {advisor.returncode} before it served")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"error: the advisor did not answer /healthz within {READY_SECONDS} s")


def measure(tree: Path, nodes: int, calls: int) -> dict[str, Any]:
    """One tree's advisor, served, and the calls against it."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUADVISOR_")}
    # Snapshots held fresh for the whole run, as collectors pushing every few seconds would keep them; one process.
    env |= {
        "GPUADVISOR_API_TOKEN": TOKEN,
        "GPUADVISOR_STALENESS_SECONDS": "86400",
        "GPUADVISOR_NODE_EXPIRY_SECONDS": "86400",
        "GPUADVISOR_INGEST_WORKERS": "0",
        "PYTHONPATH": str(tree),
    }
    with tempfile.TemporaryDirectory() as tmp:
        argv = [
            "advisor",
            "serve",
            "--no-kube",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--db",
            f"sqlite:///{tmp}/a.db",
        ]
        with open(Path(tmp) / "advisor.log", "wb") as log:
            advisor = subprocess.Popen([sys.executable, "-m", "advisor.cli", *argv], cwd=tree, env=env, stderr=log)
            try:
                _ready(port, advisor)
                return _calls(port, advisor.pid, nodes, calls)
            finally:
                advisor.terminate()
                advisor.wait(30)


def _calls(port: int, pid: int, nodes: int, calls: int) -> dict[str, Any]:
    rng = random.Random(7)
    names = [f"gpu-{i:05d}" for i in range(nodes)]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    push = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    for name in names:
        busy = {g: [process(f"{name}-{g}", namespace="outside")] for g in rng.sample(range(8), rng.randint(0, 6))}
        connection.request("POST", "/v1/telemetry", json.dumps(snapshot(name, busy=busy)), push)
        response = connection.getresponse()
        response.read()
        if response.status != 202:
            sys.exit(f"error: a snapshot was answered {response.status}")
    token, assumed, deltas = "", [], 0
    for k in range(WARM_CALLS + calls):
        if k == WARM_CALLS:
            start = _cpu_seconds(pid)
        window, body = call_body(k, names, assumed)
        random.Random(k).shuffle(window)  # the list in the body: kube-scheduler's parallel Filter's order
        body["since"] = token
        connection.request(
            "POST", "/v1/score", json.dumps(body, separators=(",", ":")), {"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        got = json.loads(response.read())
        if response.status != 200:
            sys.exit(f"error: /v1/score answered {response.status}: {got}")
        token = got["token"]
        deltas += int(k >= WARM_CALLS and got["delta"])
        assumed = [*assumed, {"node": window[0], "pod": _wire(f"p-{k:05d}")}][-6:]
    spent = _cpu_seconds(pid) - start
    return {"advisor_cpu_ms_per_call": round(spent / calls * 1000, 3), "delta_answers": deltas, "calls": calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--baseline", default=None, help="a git commit to measure beside this tree")
    args = parser.parse_args()
    if args.nodes < WINDOW:
        sys.exit(f"error: --nodes must be at least {WINDOW} (the candidates of one call)")
    if args.calls < 1:
        sys.exit("error: --calls must be at least 1")
    load = print_load()
    runs = baseline_trees.alternate(args.baseline, lambda tree: measure(tree, args.nodes, args.calls))
    summary = {"nodes": args.nodes, "calls": args.calls, "load_average_at_start": round(load[0], 1), "runs": runs}
    summary["load_average_at_end"] = round(os.getloadavg()[0], 1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
