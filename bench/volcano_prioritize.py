"""Volcano's extender calls at scale: `POST /volcano/prioritize` with 500 NodeInfos × 8 resident tasks (each a full
Pod, ≈12 MB, as Volcano's extender plugin encodes api.NodeInfo), and `POST /volcano/predicate` (one NodeInfo).

Against `gpuadvisor advisor serve --no-kube` in a subprocess on loopback, fed one synthetic snapshot per node: the
wall time per request as Volcano's HTTP client sees it (sending the body included) — median, p99 and max — and the
server's own CPU time per request (every process of the advisor). The snapshots go on a connection of their own, so
the timed one is never handed to an ingest worker. Beside each route, in the same run, the HTTP floor
(`bench/http_floor.py`: the same framework and server flags, an async route answering the advisor's bytes) timed
the same way on the same body, and the advisor's median over the floor's. JSON last line. The bodies come from
`tests.support.upstream` (the Go types' JSON field names).

Run from the repository root: python bench/volcano_prioritize.py [--nodes 500] [--tasks N] [--requests 60].
`--tasks` defaults to 8 per NodeInfo up to 500 nodes and to none beyond: 5,000 NodeInfos of 8 tasks would be 128 MB,
past the advisor's default body limit (`GPUADVISOR_SCHEDULER_BODY_LIMIT_BYTES`, 24 MiB), while 5,000 without tasks is
the ≈14 MB body issue 26 measured. To measure another checkout's advisor with the same bodies, run it from that
checkout's root (the served `advisor` package is the working directory's).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from http.client import HTTPConnection
from pathlib import Path

from cluster import (
    advisor_cpu_seconds,
    floor_requests,
    free_port,
    machine_note,
    post,
    push_snapshots,
    start_advisor,
    synthetic_snapshot,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bodies come from the tests' upstream fixtures
from tests.support import upstream

NOT_FOUND = 404
TASKS_UP_TO_NODES = 500
"""Beyond this many NodeInfos the default body carries no resident tasks (see the docstring)."""


def main() -> None:  # noqa: PLR0915 - a benchmark's steps in the order it reports them
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--tasks", type=int, default=None, help="resident tasks per NodeInfo (8 up to 500 nodes)")
    parser.add_argument("--requests", type=int, default=60)
    args = parser.parse_args()
    if args.tasks is None:
        args.tasks = 8 if args.nodes <= TASKS_UP_TO_NODES else 0
    print(machine_note())
    rng = random.Random(7)
    names = [f"node-{i:04d}" for i in range(args.nodes)]
    snapshots = [synthetic_snapshot(n, rng) for n in names]
    pod = upstream.pod(containers=[upstream.container(limits={"nvidia.com/gpu": "2", "cpu": "8", "memory": "64Gi"})])
    task = upstream.volcano_task(pod, gpus=2)
    node_infos = [upstream.volcano_node(n, tasks=args.tasks) for n in names]
    prioritize = json.dumps(upstream.volcano_prioritize(task, node_infos)).encode()
    predicate = json.dumps(upstream.volcano_predicate(task, node_infos[0])).encode()
    print(f"prioritize body {len(prioritize) / 1e6:.1f} MB ({args.nodes} NodeInfos × {args.tasks} tasks)")

    figures: dict[str, object] = {}
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_advisor(port, Path(tmp) / "bench.db")
        try:
            conn = HTTPConnection("127.0.0.1", port, timeout=30)
            push_snapshots(port, snapshots)
            status, reply = post(conn, "/volcano/prioritize", prioritize)
            assert status == 200, reply[:300]
            scores = json.loads(reply)["nodeScore"]
            assert set(scores) == set(names), "every node scored"
            for path, body in (("/volcano/prioritize", prioritize), ("/volcano/predicate", predicate)):
                if post(conn, path, body)[0] == NOT_FOUND:
                    print(f"POST {path}: not served by this advisor")
                    continue
                for _ in range(3):  # warm-up
                    post(conn, path, body)
                times: list[float] = []
                cpu0 = advisor_cpu_seconds(proc.pid)
                for _ in range(args.requests):
                    started = time.perf_counter()
                    status, _ = post(conn, path, body)
                    times.append(time.perf_counter() - started)
                    assert status == 200, status
                cpu_ms = (advisor_cpu_seconds(proc.pid) - cpu0) / args.requests * 1e3
                ordered = sorted(times)
                p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
                median_ms = statistics.median(ordered) * 1e3
                print(
                    f"POST {path}: median {median_ms:.1f} ms, p99 {p99 * 1e3:.1f} ms, "
                    f"max {ordered[-1] * 1e3:.1f} ms wall; server CPU {cpu_ms:.1f} ms/request "
                    f"({args.requests} requests)"
                )
                answer = post(conn, path, body)[1]
                floor_p50, floor_p99, floor_cpu = floor_requests(path, answer, [body], args.requests, Path(tmp))
                print(
                    f"  HTTP floor, same body and {len(answer)} B answer: median {floor_p50:.1f} ms, p99 "
                    f"{floor_p99:.1f} ms, CPU {floor_cpu:.1f} ms/request; the advisor's median "
                    f"{median_ms / max(floor_p50, 1e-9):.1f}x the floor's"
                )
                figures[path] = {
                    "median_ms": median_ms,
                    "p99_ms": p99 * 1e3,
                    "max_ms": ordered[-1] * 1e3,
                    "server_cpu_ms": cpu_ms,
                    "floor_median_ms": floor_p50,
                    "floor_p99_ms": floor_p99,
                    "floor_cpu_ms": floor_cpu,
                }
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(json.dumps({"nodes": args.nodes, "tasks": args.tasks, **figures}))


if __name__ == "__main__":
    main()
