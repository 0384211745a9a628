"""Telemetry ingest: NodeSnapshots per second accepted by one advisor replica (8 GPUs × 4 processes each).

One command, prints the figures recorded in docs/benchmarks.md:
  * in-process: `NodeSnapshot.model_validate_json` + `ClusterState.ingest` per snapshot;
  * over HTTP on loopback: `POST /v1/telemetry` (with a bearer token) to `gpuadvisor advisor serve --no-kube` from
    several keep-alive clients for a fixed time, each snapshot a distinct node, plus the server's CPU per snapshot.

With `--prioritize-clients N` (and `--nodes`), the HTTP part runs ingest and kube-scheduler's load together: the
state first holds `--nodes` nodes, then the ingest clients push snapshots of those nodes while N keep-alive clients
post `/extender/prioritize` over 500 of them; both rates and the server's CPU (cores) are printed.

Usage: python bench/ingest.py [--snapshots 2000] [--seconds 10] [--clients 4] [--nodes 5000 --prioritize-clients 2]
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

from cluster import free_port, machine_note, process_cpu_seconds, start_advisor, synthetic_snapshot, v1_pod

from advisor.api.app import STATE_FREEZE_AFTER_NODES
from advisor.cli.serve import GC_THRESHOLDS
from advisor.cluster.state import ClusterState
from collector.snapshot import NodeSnapshot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snapshots", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--prioritize-clients", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=5000, help="nodes in the state (with --prioritize-clients)")
    parser.add_argument("--skip-in-process", action="store_true")
    args = parser.parse_args()
    if args.prioritize_clients:
        args.snapshots = args.nodes
    print(f"machine: {machine_note()}")
    rng = random.Random(3)
    bodies = [
        json.dumps(synthetic_snapshot(f"node-{i:05d}", rng, processes_per_gpu=4)).encode()
        for i in range(args.snapshots)
    ]
    print(f"snapshots: {len(bodies)} distinct nodes, 8 GPUs x 4 processes, {len(bodies[0])} bytes each")

    if not args.skip_in_process:
        state = ClusterState(freeze_after_nodes=STATE_FREEZE_AFTER_NODES)  # as the service builds it
        gc.freeze()  # as `gpuadvisor advisor serve` does
        gc.set_threshold(*GC_THRESHOLDS)
        t0, c0 = time.perf_counter(), time.thread_time()
        for body in bodies:
            state.ingest(NodeSnapshot.model_validate_json(body), body)
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
            prioritized = [0] * args.prioritize_clients
            if args.prioritize_clients:
                conn = HTTPConnection("127.0.0.1", port)
                for body in bodies:
                    conn.request("POST", "/v1/telemetry", body=body, headers=headers)
                    conn.getresponse().read()
                names = [f"node-{i:05d}" for i in range(args.nodes)]
            stop = time.perf_counter() + args.seconds
            counts = [0] * args.clients

            def scheduler(k: int) -> None:
                conn = HTTPConnection("127.0.0.1", port)
                pick = random.Random(k)
                pods = [v1_pod(1), v1_pod(2), v1_pod(4), v1_pod(0, share_milli=250)]
                i = 0
                while time.perf_counter() < stop:
                    body = json.dumps({"Pod": pods[i % len(pods)], "NodeNames": pick.sample(names, 500)}).encode()
                    conn.request("POST", "/extender/prioritize", body=body, headers=headers)
                    response = conn.getresponse()
                    response.read()
                    assert response.status == 200, response.status
                    prioritized[k] += 1
                    i += 1

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
            threads += [threading.Thread(target=scheduler, args=(k,)) for k in range(args.prioritize_clients)]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - start
            total = sum(counts)
            cpu_ms = (process_cpu_seconds(proc.pid) - cpu0) / total * 1e3
            if args.prioritize_clients:
                cores = (process_cpu_seconds(proc.pid) - cpu0) / elapsed
                print(
                    f"HTTP at {args.nodes} nodes: {total / elapsed:.0f} snapshots/s accepted ({args.clients} clients) "
                    f"while serving {sum(prioritized) / elapsed:.0f} prioritize/s over 500 candidates "
                    f"({args.prioritize_clients} clients), {elapsed:.1f} s; server CPU {cores:.2f} cores"
                )
            else:
                print(
                    f"HTTP POST /v1/telemetry: {total / elapsed:.0f} snapshots/s accepted with {args.clients} clients "
                    f"for {elapsed:.1f} s; server CPU {cpu_ms:.2f} ms/snapshot (= {1e3 / cpu_ms:.0f}/s per core)"
                )
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
