"""Telemetry ingest: NodeSnapshots per second accepted by one advisor replica (8 GPUs × 4 processes each).

One command, prints the figures recorded in docs/benchmarks.md:
  * in-process: `NodeSnapshot.model_validate_json` + `ClusterState.ingest` per snapshot;
  * over HTTP on loopback: `POST /v1/telemetry` (with a bearer token) to `gpuadvisor advisor serve --no-kube` from
    several keep-alive clients for a fixed time, each snapshot a distinct node, plus the server's CPU per snapshot.

Usage: python bench/ingest.py [--snapshots 2000] [--seconds 10] [--clients 4]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import tempfile
import threading
import time
from http.client import HTTPConnection
from pathlib import Path

from cluster import free_port, machine_note, process_cpu_seconds, start_advisor, synthetic_snapshot

from advisor.cli.serve import GC_THRESHOLDS
from advisor.cluster.state import ClusterState
from collector.snapshot import NodeSnapshot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snapshots", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    print(f"machine: {machine_note()}")
    rng = random.Random(3)
    bodies = [
        json.dumps(synthetic_snapshot(f"node-{i:05d}", rng, processes_per_gpu=4)).encode()
        for i in range(args.snapshots)
    ]
    print(f"snapshots: {len(bodies)} distinct nodes, 8 GPUs x 4 processes, {len(bodies[0])} bytes each")

    state = ClusterState()
    gc.freeze()  # as `gpuadvisor advisor serve` does
    gc.set_threshold(*GC_THRESHOLDS)
    t0, c0 = time.perf_counter(), time.thread_time()
    for body in bodies:
        state.ingest(NodeSnapshot.model_validate_json(body))
    rate = len(bodies) / (time.perf_counter() - t0)
    cpu_ms = (time.thread_time() - c0) / len(bodies) * 1e3
    print(f"in-process validate + ingest: {rate:.0f} snapshots/s wall; CPU {cpu_ms:.2f} ms each")

    port = free_port()
    token = "bench-token"
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GPUADVISOR_API_TOKEN"] = token
        proc = start_advisor(port, Path(tmp) / "ingest.db")
        try:
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
            counts = [0] * args.clients
            stop = time.perf_counter() + args.seconds

            def worker(k: int) -> None:
                conn = HTTPConnection("127.0.0.1", port)
                i = k
                while time.perf_counter() < stop:
                    conn.request("POST", "/v1/telemetry", body=bodies[i % len(bodies)], headers=headers)
                    response = conn.getresponse()
                    response.read()
                    assert response.status == 202, response.status
                    counts[k] += 1
                    i += args.clients

            cpu0 = process_cpu_seconds(proc.pid)
            threads = [threading.Thread(target=worker, args=(k,)) for k in range(args.clients)]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - start
            total = sum(counts)
            cpu_ms = (process_cpu_seconds(proc.pid) - cpu0) / total * 1e3
            print(
                f"HTTP POST /v1/telemetry: {total / elapsed:.0f} snapshots/s accepted with {args.clients} clients "
                f"for {elapsed:.1f} s; server CPU {cpu_ms:.2f} ms/snapshot (= {1e3 / cpu_ms:.0f}/s per core)"
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
