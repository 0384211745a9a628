"""The advisor's CPU per scheduler-plugin call (`POST /v1/score` as gpuadvisor-scheduler's PreScore sends it) at
cluster scale: the figure that sets the plugin's scheduling rate on a machine the advisor shares with the scheduler
(bench/scheduler_throughput.py).

In-process, `fast_score` (the running service's path for a valid body) over N nodes with fresh snapshots (0..6 of 8
GPUs busy, seeded): each call as the plugin makes it — `detail: brief`, `unknown_nodes: neutral`, the 500 candidates
kube-scheduler scores at 5,000 nodes (percentageOfNodesToScore's adaptive 10 %), a window that moves on by 500 nodes
each call as the scheduler's start index does, and the pods placed in the last six calls that are on the window sent
as assumed. Two passes over the same calls: without bindings, then with the pod placed three calls earlier reported
bound (`ClusterState.update_pod`, as the advisor's pod watch does) after every call. CPU seconds of this process per
call (the bindings' rebuilds included in the second), and a SHA-256 of every answer (equal across trees: the same
answers). Where the tree has delta answers (`since`), each pass is followed by the same calls chaining their tokens,
each answer merged as the plugin merges it and checked against the full answer asked right after (not timed):
`cpu_ms_per_call_delta` (and `..._with_bindings`, the bindings made again at the same points) and how many merged
answers differed (`delta_answers_unlike_full*`, 0 expected).

With `--baseline REF`, the same measurement runs on that commit's code too (checked out into a temporary folder, run
in a subprocess), alternating baseline and this tree twice, so that both see the same machine load.

Run from the repository root: python bench/plugin_call_cpu.py [--nodes 5000] [--calls 300] [--baseline REF]
"""

from __future__ import annotations

import argparse
import hashlib
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

ROOT = Path(__file__).resolve().parents[1]
WINDOW = 500
TOKEN = "bench"


def _wire(name: str) -> dict[str, Any]:
    resources = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    return {
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}"},
        "spec": {
            "schedulerName": "gpuadvisor",
            "containers": [{"name": "main", "resources": {"requests": resources, "limits": resources}}],
        },
    }


def call_body(k: int, names: list[str], assumed: list[dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """The k-th call's candidates (a window of WINDOW names that moves round the cluster, as kube-scheduler's
    percentageOfNodesToScore does) and its `/v1/score` body as the plugin sends it, with the assumed pods on them."""
    window = [names[(k * WINDOW + j) % len(names)] for j in range(WINDOW)]
    present = set(window)
    return window, {
        "pod": _wire(f"p-{k:05d}"),
        "nodes": window,
        "unknown_nodes": "neutral",
        "assumed": [a for a in assumed if a["node"] in present],
        "detail": "brief",
    }


def measure(nodes: int, calls: int) -> dict[str, Any]:  # noqa: PLR0915 - one measurement, its passes side by side
    """One tree's figures (this process imports the tree it runs in: `--one` in a subprocess with its path first)."""
    from fastapi.testclient import TestClient

    from advisor.api import create_app
    from advisor.api.routes.score import fast_score
    from advisor.api.schemas import ScoreRequest
    from advisor.cluster.state import ClusterState, allocation_of
    from advisor.placement.types import PodRequest
    from advisor.settings import AdvisorSettings
    from tests.advisor.factories import process, snapshot

    rng = random.Random(7)
    names = [f"gpu-{i:05d}" for i in range(nodes)]
    state = ClusterState()
    with tempfile.TemporaryDirectory() as tmp:
        # Snapshots held fresh for the whole run, as collectors pushing every few seconds would keep them.
        settings = AdvisorSettings(db_url=f"sqlite:///{tmp}/a.db", no_kube=True, api_token=TOKEN, staleness_seconds=1e6)
        app = create_app(settings, state=state)
        with TestClient(app) as client:
            for name in names:
                busy = {
                    g: [process(f"{name}-{g}", namespace="outside")] for g in rng.sample(range(8), rng.randint(0, 6))
                }
                got = client.post(
                    "/v1/telemetry", json=snapshot(name, busy=busy), headers={"Authorization": f"Bearer {TOKEN}"}
                )
                assert got.status_code == 202, got.text
            deadline = time.monotonic() + 60
            while len(state.nodes) < nodes and time.monotonic() < deadline:
                time.sleep(0.2)
            assert len(state.nodes) == nodes, f"{len(state.nodes)} of {nodes} nodes ingested"
            ctx = app.state.ctx
            bodies, windows = [], []
            assumed: list[dict[str, Any]] = []
            for k in range(calls):
                window, body = call_body(k, names, assumed)
                bodies.append(json.dumps(body).encode())
                windows.append(window)
                assumed = [*assumed, {"node": window[k % WINDOW], "pod": _wire(f"p-{k:05d}")}][-6:]

            def run(bind: bool) -> tuple[float, str]:
                digest = hashlib.sha256()
                start = time.process_time()
                for k, body in enumerate(bodies):
                    digest.update(fast_score(body, ctx))
                    if bind and k >= 3:
                        pod = PodRequest(name=f"bench/p-{k - 3:05d}", gpus=1)
                        state.update_pod(pod.name, allocation_of(pod.name, pod, windows[k - 3][(k - 3) % WINDOW]), None)
                return (time.process_time() - start) / calls, digest.hexdigest()

            def run_since(bind: bool) -> tuple[float, int]:
                """The same calls with `since` (delta answers), each merged as the plugin does; CPU of the delta
                calls and bindings only, and how many merged answers differ from the full answer asked after it."""
                token, held, spent, mismatches = "", {}, 0.0, 0
                for k, body in enumerate(bodies):
                    request = json.loads(body)
                    asked = json.dumps({**request, "since": token}).encode()
                    start = time.process_time()
                    got = json.loads(fast_score(asked, ctx))
                    if bind and k >= 3:
                        pod = PodRequest(name=f"bench/p-{k - 3:05d}", gpus=1)
                        state.update_pod(pod.name, allocation_of(pod.name, pod, windows[k - 3][(k - 3) % WINDOW]), None)
                    spent += time.process_time() - start
                    held = {**held, **got_entries(got)} if got["delta"] else got_entries(got)
                    token = got["token"]
                    full = got_entries(json.loads(fast_score(body, ctx)))
                    mismatches += int({n: held.get(n) for n in windows[k]} != full)
                return spent / calls, mismatches

            plain_s, plain_digest = run(bind=False)
            figures: dict[str, Any] = {"cpu_ms_per_call": round(plain_s * 1000, 3)}
            if "since" in ScoreRequest.model_fields:  # a tree with delta answers
                delta_s, delta_wrong = run_since(bind=False)
                figures["cpu_ms_per_call_delta"] = round(delta_s * 1000, 3)
                figures["delta_answers_unlike_full"] = delta_wrong
            bound_s, bound_digest = run(bind=True)
            figures["cpu_ms_per_call_with_bindings"] = round(bound_s * 1000, 3)
            if "since" in ScoreRequest.model_fields:
                delta_s, delta_wrong = run_since(bind=True)
                figures["cpu_ms_per_call_delta_with_bindings"] = round(delta_s * 1000, 3)
                figures["delta_answers_unlike_full_with_bindings"] = delta_wrong
    return {**figures, "answers_sha256": plain_digest, "answers_with_bindings_sha256": bound_digest}


def got_entries(answer: dict[str, Any]) -> dict[str, Any]:
    return {s["node"]: s for s in answer["scores"]}


def _run(tree: Path, nodes: int, calls: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(Path(__file__).resolve()), "--one", "--nodes", str(nodes), "--calls", str(calls)]
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=env, cwd=tree)
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--baseline", default=None, help="a git commit to measure beside this tree")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.nodes < WINDOW:
        sys.exit(f"error: --nodes must be at least {WINDOW} (the candidates of one call)")
    if args.one:
        sys.path.insert(0, os.getcwd())
        print(json.dumps(measure(args.nodes, args.calls)))
        return
    load = print_load()
    runs = baseline_trees.alternate(args.baseline, lambda tree: _run(tree, args.nodes, args.calls))
    summary: dict[str, Any] = {"nodes": args.nodes, "calls": args.calls, "load_average_at_start": round(load[0], 1)}
    summary["runs"] = runs
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
