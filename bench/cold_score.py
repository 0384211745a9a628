"""Cold prioritize calls that really are cold: a new request shape every call, on nodes with residents on free GPUs.

    .venv/bin/python bench/cold_score.py [--nodes 500,5000] [--requests 240] [--baseline GIT_REF]

In-process, the service's scorer (`Scorer.extender_priorities`, the prioritize verb's path) over N candidate nodes of
8 GPUs (bench/cluster.py's synthetic snapshots, 4-5 residents per node) where a third of the GPUs that run one process
run a host process (no pod): it holds no GPU, so those GPUs are free with a resident, and whole-GPU verdicts there
depend on the workload and the predictors. Every call brings a shape never seen before — a new workload for
1 GPU and for 2-8 GPUs, a new share size, a new GPU-memory request (whole GPU and share) — so the score vectors must
compute a row for every candidate; the script prints the share of rows computed to show it. Every call's candidate
names are new strings, decoded from JSON as a request's are. Per kind: wall p50/p99 and CPU (thread time) p50/p99
per call.

With `--baseline REF`, the same measurement runs on that commit's code too (checked out into a temporary folder,
run in a subprocess), alternating baseline and this tree twice, so that both see the same machine load: compare the
columns of one run only.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import baseline_trees
from baseline_trees import print_load

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("1 GPU", "2-8 GPUs", "share", "GPU memory, 1 GPU", "GPU memory, share")
GIB = 1 << 30


def _prioritize(nodes: dict[str, Any], now: float) -> tuple[Callable[[Any, list[str]], object], Callable[[], int]]:
    """The prioritize verb of the code on the path, and a counter of rows computed (-1 where it has none)."""
    from advisor.placement.config import ScoringConfig

    try:
        from advisor.placement.scorer import Scorer
    except ImportError:  # a commit before the Scorer: module functions over module-global caches
        from advisor.placement.extender import extender_priorities

        config = ScoringConfig()

        def old(pod: Any, names: list[str]) -> object:
            return extender_priorities(pod, names, nodes, config=config, now_seconds=now)

        return old, lambda: -1
    try:  # what the service does before it serves (`advisor serve`'s start-up), where the tree has it
        from advisor.predictors import prepare_turn_taking
    except ImportError:
        pass
    else:
        prepare_turn_taking()
    scorer = Scorer(ScoringConfig(), clock=lambda: now)
    return (lambda pod, names: scorer.extender_priorities(pod, names, nodes)), lambda: scorer.vectors.computed_rows


def _cluster(count: int) -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cluster import synthetic_snapshot

    from advisor.cluster.state import ClusterState
    from collector.snapshot import NodeSnapshot

    rng = random.Random(5)
    state = ClusterState()
    for i in range(count):
        raw = synthetic_snapshot(f"node-{i:05d}", rng)
        for gpu in raw["gpus"]:
            if len(gpu["processes"]) == 1 and rng.random() < 1 / 3:
                gpu["processes"][0]["pod"] = None  # a host process: it holds no GPU, but shares the one it runs on
        state.ingest(NodeSnapshot.model_validate(raw))
    return state


def _pods(requests: int) -> list[tuple[str, Any]]:
    from advisor.placement.types import PodRequest

    out = []
    for i in range(requests):
        kind = KINDS[i % len(KINDS)]
        workload = f"cold-{i}"
        if kind == "1 GPU":
            pod = PodRequest(gpus=1, workload=workload)
        elif kind == "2-8 GPUs":
            pod = PodRequest(gpus=(2, 4, 8)[(i // len(KINDS)) % 3], workload=workload)
        elif kind == "share":
            pod = PodRequest(gpu_milli=100 + (i * 37) % 850, workload=workload)
        elif kind == "GPU memory, 1 GPU":
            pod = PodRequest(gpus=1, gpu_memory_bytes=(40 + i % 40) * GIB, workload=workload)
        else:
            pod = PodRequest(gpu_milli=100 + (i * 53) % 700, gpu_memory_bytes=(1 + i % 30) * GIB, workload=workload)
        out.append((kind, pod))
    return out


def measure(count: int, requests: int) -> dict[str, Any]:
    """One tree's figures at `count` candidates."""
    state = _cluster(count)
    nodes = state.nodes
    names = sorted(nodes)
    residents = sum(1 for n in nodes.values() if n.free_residents)
    # The scorer's clock at the first snapshot's arrival: every node fresh, however long building the cluster took
    # (on a loaded machine 5,000 nodes take longer than the 30 s staleness, and stale nodes are not computed).
    first = min(n.observed_at_seconds for n in nodes.values() if n.observed_at_seconds is not None)
    call, computed = _prioritize(nodes, first)
    gc.freeze()
    names_json = json.dumps(names)
    for _, pod in _pods(10):  # imports, caches of node shapes: what a running service has
        # names decoded from a request here too: what the scorer keeps of a call's names is a request's strings,
        # never the cluster's own keys, spread over the heap among the nodes' states (comparing 5,000 of those
        # took 0.49 ms instead of 0.16 ms)
        call(pod, json.loads(names_json))
    wall: dict[str, list[float]] = {k: [] for k in KINDS}
    cpu: dict[str, list[float]] = {k: [] for k in KINDS}
    rows0 = computed()
    for kind, pod in _pods(requests + 10)[10:]:
        # the names as a request's body gives them: new strings every call (no hash cached, no identity to compare)
        fresh = json.loads(names_json)
        t0, c0 = time.perf_counter(), time.thread_time()
        call(pod, fresh)
        wall[kind].append(time.perf_counter() - t0)
        cpu[kind].append(time.thread_time() - c0)
    rows = computed() - rows0
    out: dict[str, Any] = {
        "nodes": count,
        "nodes_with_residents_on_free_gpus": residents,
        "cold_row_ratio": rows / (requests * count) if rows0 >= 0 else None,
    }
    for kind in KINDS:
        out[kind] = {"wall_ms": [1e3 * t for t in wall[kind]], "cpu_ms": [1e3 * t for t in cpu[kind]]}
    return out


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def _run(tree: Path, count: int, requests: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(Path(__file__).resolve()), "--one", str(count), "--requests", str(requests)]
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=env, cwd=tree)
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="500,5000")
    parser.add_argument("--requests", type=int, default=240)
    parser.add_argument("--baseline", default=None, help="a git commit to measure beside this tree")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.requests < len(KINDS):
        sys.exit(f"error: --requests must be at least {len(KINDS)} (one cold call of each kind)")
    if args.one is not None:
        print(json.dumps(measure(args.one, args.requests)))
        return
    print_load()
    results: dict[str, Any] = {}
    with baseline_trees.trees(args.baseline) as trees:
        for count in (int(n) for n in args.nodes.split(",")):
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
            for _ in range(2 if args.baseline else 1):
                for name, tree in trees.items():
                    runs[name].append(_run(tree, count, args.requests))
            rounds = len(runs["this tree"])
            print(f"\n{count} candidates, {rounds} x {args.requests} cold calls per tree, every round pooled (ms)")
            print(f"{'kind':<20}" + "".join(f"{name:>46}" for name in trees))
            summary: dict[str, dict[str, dict[str, float]]] = {name: {} for name in trees}
            for kind in KINDS:
                cells = []
                for name in trees:
                    w50, w99 = _percentiles([t for r in runs[name] for t in r[kind]["wall_ms"]])
                    c50, c99 = _percentiles([t for r in runs[name] for t in r[kind]["cpu_ms"]])
                    summary[name][kind] = {"wall_p50_ms": w50, "wall_p99_ms": w99, "cpu_p50_ms": c50, "cpu_p99_ms": c99}
                    cells.append(f"wall p50 {w50:.2f} p99 {w99:.2f}, CPU p50 {c50:.2f} p99 {c99:.2f}")
                print(f"{kind:<20}" + "".join(f"{c:>46}" for c in cells))
            last = runs["this tree"][-1]
            print(
                f"this tree: {last['nodes_with_residents_on_free_gpus']} of {count} nodes have residents on free GPUs;"
                f" rows computed per candidate and call: {last['cold_row_ratio']}"
            )
            results[str(count)] = summary
    print(json.dumps(results))


if __name__ == "__main__":
    main()
