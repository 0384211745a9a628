"""The advisor's share of an extender call with whole Node objects (`nodeCacheCapable: false`): a 12 MB-class
ExtenderArgs body of real-sized GPU nodes (the Nodes of tests/kube/test_large_node_list.py), against the shipped
profile's `httpTimeout` (300 ms), which must also cover the scheduler sending the body and decoding the answer.

In-process, same bodies, in one run: the filter's fast path (`fast_filter`: the passing Nodes handed back as the
bytes sent), the filter route's own handling (the body validated into pydantic models, the answer rebuilt from them,
as every filter call was answered before the fast path), and the prioritize fast path (`fast_prioritize`). Each is
timed on the same body again and again (`*_same_nodes`: what a scheduler sends call after call while its Nodes do
not change) and on a body whose every Node changed since the last call (`*_changed_nodes`: each Node's
resourceVersion differs, as after a restart or when every kubelet has just posted its status). Wall time per call,
median and max, and the median CPU time of the process per call (what the call costs, however loaded the machine);
the first call of a fresh process is in `*_first_ms`.

With `--baseline REF`, the same measurement runs on that commit's code too (checked out into a temporary folder,
run in a subprocess), alternating baseline and this tree twice, so that both see the same machine load: compare the
columns of one run only.

Run from the repository root: python bench/extender_full_nodes.py [--megabytes 12.5] [--iterations 5]
[--baseline REF].
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import baseline_trees
from baseline_trees import print_load

ROOT = Path(__file__).resolve().parents[1]
PATHS = ("filter_fast_path", "filter_route", "prioritize_fast_path")


def _timed(call: Callable[[bytes], object], bodies: list[bytes]) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds of this process) per call: on a loaded machine the wall time is mostly waiting for a
    core, the CPU time what the call itself costs."""
    wall, cpu = [], []
    for body in bodies:
        start, start_cpu = time.perf_counter(), time.process_time()
        call(body)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return wall, cpu


def measure(megabytes: float, iterations: int) -> dict[str, Any]:
    """One tree's figures (this process imports the tree it runs in: `--one` in a subprocess with its path first)."""
    from advisor.api import create_app
    from advisor.api.routes.extender import fast_filter, fast_prioritize, filter_
    from advisor.api.schemas import ExtenderArgs
    from advisor.cluster.state import ClusterState
    from advisor.settings import AdvisorSettings
    from tests.advisor.factories import v1_pod
    from tests.kube.test_large_node_list import real_sized_node

    count = math.ceil(megabytes * 1e6 / len(json.dumps(real_sized_node("large-0000"))))
    items = [real_sized_node(f"large-{i:04d}") for i in range(count)]

    def body(version: int) -> bytes:
        for item in items:
            item["metadata"]["resourceVersion"] = str(1000 + version)
        args = {"Pod": v1_pod(gpus=1), "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
        return json.dumps(args).encode()

    same = body(0)
    with tempfile.TemporaryDirectory() as tmp:
        settings = AdvisorSettings(db_url=f"sqlite:///{tmp}/a.db", no_kube=True, api_token="bench")
        ctx = create_app(settings, state=ClusterState()).state.ctx  # no telemetry: the handling of the body itself

        def route(raw: bytes) -> object:
            return filter_(ExtenderArgs.model_validate_json(raw), ctx).model_dump_json(exclude_none=True)

        calls: dict[str, Callable[[bytes], object]] = {
            "filter_fast_path": lambda raw: fast_filter(raw, ctx),
            "filter_route": route,
            "prioritize_fast_path": lambda raw: fast_prioritize(raw, ctx),
        }
        results: dict[str, Any] = {"nodes": count, "body_megabytes": round(len(same) / 1e6, 2)}
        version = 1
        for name, call in calls.items():
            results[f"{name}_first_ms"] = round(_timed(call, [same])[0][0] * 1000, 1)
            results[f"{name}_same_nodes"], results[f"{name}_same_nodes_cpu"] = _timed(call, [same] * iterations)
            changed = []
            for _ in range(iterations):
                changed.append(body(version))
                version += 1
            results[f"{name}_changed_nodes"], results[f"{name}_changed_nodes_cpu"] = _timed(call, changed)
    return results


def _run(tree: Path, megabytes: float, iterations: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(Path(__file__).resolve()), "--one", "--megabytes", str(megabytes)]
    command += ["--iterations", str(iterations)]
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=env, cwd=tree)
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def _figures(seconds: list[float], cpu_seconds: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(seconds) * 1000, 1),
        "max_ms": round(max(seconds) * 1000, 1),
        "cpu_median_ms": round(statistics.median(cpu_seconds) * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=12.5, help="size of the ExtenderArgs body")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--baseline", default=None, help="a git commit to measure beside this tree")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        sys.path.insert(0, os.getcwd())
        print(json.dumps(measure(args.megabytes, args.iterations)))
        return
    load = print_load()
    with baseline_trees.trees(args.baseline) as trees:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for _ in range(2 if args.baseline else 1):
            for name, tree in trees.items():
                runs[name].append(_run(tree, args.megabytes, args.iterations))
    first = runs["this tree"][0]
    print(f"{first['nodes']} nodes, ExtenderArgs body {first['body_megabytes']} MB; wall median / max (CPU median) ms,")
    print("runs pooled")
    print(f"{'':34}" + "".join(f"{name:>36}" for name in trees))
    summary: dict[str, Any] = {"nodes": first["nodes"], "body_megabytes": first["body_megabytes"]}
    summary |= {"http_timeout_ms": 300, "load_average_at_start": round(load[0], 1)}
    for path in PATHS:
        for kind in ("same_nodes", "changed_nodes"):
            key = f"{path}_{kind}"
            row = {
                name: _figures([s for run in done for s in run[key]], [s for run in done for s in run[f"{key}_cpu"]])
                for name, done in runs.items()
            }
            cells = "".join(
                f"{f['median_ms']:>17.1f} / {f['max_ms']:>7.1f} ({f['cpu_median_ms']:>6.1f})" for f in row.values()
            )
            print(f"{key:34}{cells}")
            summary[key] = row
        firsts = {name: [run[f"{path}_first_ms"] for run in done] for name, done in runs.items()}
        print(f"{path + '_first':34}" + "".join(f"{', '.join(map(str, v)):>36}" for v in firsts.values()))
        summary[f"{path}_first_ms"] = firsts
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
