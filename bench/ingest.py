"""Telemetry ingest: NodeSnapshots per second accepted by one advisor replica (8 GPUs × 4 processes each).

One command, prints the figures recorded in docs/benchmarks.md:
  * in-process: `NodeSnapshot.model_validate_json` + `ClusterState.ingest` per snapshot;
  * over HTTP on loopback: `POST /v1/telemetry` (with a bearer token) to `gpuadvisor advisor serve --no-kube` from
    several keep-alive clients for a fixed time, each snapshot a distinct node, plus the server's CPU per snapshot.

With `--prioritize-clients N` (and `--nodes`), the HTTP part runs ingest and kube-scheduler's load together: the
state first holds `--nodes` nodes, then the ingest clients push snapshots of those nodes while N keep-alive clients
post `/extender/prioritize` over 500 of them; both rates and the server's CPU (cores) are printed.

`--ingest-workers N` serves with N ingest worker processes (GPUADVISOR_INGEST_WORKERS; 0 = one process, the default
here so that figures compare with earlier ones); the server's CPU is printed per process (the state-owning process,
each worker) and in all, as cores used over the run.

With `--wrk` (and `--prioritize-clients`), the load comes from two wrk processes (a C load generator, as
bench/http_wrk.py; not a project dependency) instead of Python threads, which on a small machine take the cores the
server would use: `--clients` connections push the snapshots in turn (a Lua script), `--prioritize-clients` post
prioritize over 500 random nodes, both as fast as the server answers; rates, latency percentiles and the server's
CPU per process are printed.

Usage: python bench/ingest.py [--snapshots 2000] [--seconds 10] [--clients 4] [--nodes 5000 --prioritize-clients 2]
       [--ingest-workers 1] [--wrk]
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

from cluster import child_pids, free_port, machine_note, process_cpu_seconds, start_advisor, synthetic_snapshot, v1_pod
from http_wrk import LUA, wrk

from advisor.api.app import STATE_FREEZE_AFTER_NODES
from advisor.cli.serve import GC_THRESHOLDS
from advisor.cluster.state import ClusterState
from collector.snapshot import NodeSnapshot


def main() -> None:  # noqa: PLR0915 - a benchmark's steps in the order it reports them
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snapshots", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--prioritize-clients", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=5000, help="nodes in the state (with --prioritize-clients)")
    parser.add_argument("--skip-in-process", action="store_true")
    parser.add_argument("--ingest-workers", type=int, default=0)
    parser.add_argument("--wrk", action="store_true", help="load from wrk (with --prioritize-clients)")
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
        proc = start_advisor(port, Path(tmp) / "ingest.db", {"GPUADVISOR_INGEST_WORKERS": str(args.ingest_workers)})
        try:
            workers = wait_for_workers(port, proc.pid, args.ingest_workers)
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
            prioritized = [0] * args.prioritize_clients
            if args.prioritize_clients:
                conn = HTTPConnection("127.0.0.1", port)
                for body in bodies:
                    conn.request("POST", "/v1/telemetry", body=body, headers=headers)
                    conn.getresponse().read()
                names = [f"node-{i:05d}" for i in range(args.nodes)]
            if args.wrk and args.prioritize_clients:
                under_wrk(args, port=port, pids=[proc.pid, *workers], bodies=bodies, tmp=Path(tmp), token=token)
                return
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

            pids = [proc.pid, *workers]
            cpu0 = [process_cpu_seconds(p) for p in pids]
            threads = [threading.Thread(target=worker, args=(k,)) for k in range(args.clients)]
            threads += [threading.Thread(target=scheduler, args=(k,)) for k in range(args.prioritize_clients)]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - start
            cpu = [process_cpu_seconds(p) - c for p, c in zip(pids, cpu0, strict=True)]
            total = sum(counts)
            cores = sum(cpu) / elapsed
            per_process = ", ".join(
                f"{'owner' if i == 0 else f'worker {i}'} {c / elapsed:.2f}" for i, c in enumerate(cpu)
            )
            print(f"server CPU: {cores:.2f} cores in all ({per_process}); {args.ingest_workers} ingest workers")
            if args.prioritize_clients:
                print(
                    f"HTTP at {args.nodes} nodes: {total / elapsed:.0f} snapshots/s accepted ({args.clients} clients) "
                    f"while serving {sum(prioritized) / elapsed:.0f} prioritize/s over 500 candidates "
                    f"({args.prioritize_clients} clients), {elapsed:.1f} s; server CPU {cores:.2f} cores"
                )
            else:
                cpu_ms = sum(cpu) / total * 1e3
                owner_ms = cpu[0] / total * 1e3
                print(
                    f"HTTP POST /v1/telemetry: {total / elapsed:.0f} snapshots/s accepted with {args.clients} clients "
                    f"for {elapsed:.1f} s; server CPU {cpu_ms:.2f} ms/snapshot (= {1e3 / cpu_ms:.0f}/s per core), "
                    f"of which the state-owning process {owner_ms:.2f} ms (= {1e3 / owner_ms:.0f}/s on its core)"
                )
        finally:
            proc.terminate()
            proc.wait(timeout=30)


INGEST_LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {token}"
local bodies = {{}}
for line in io.lines("{path}") do bodies[#bodies + 1] = line end
local i = 0
request = function()
  i = i % #bodies + 1
  return wrk.format(nil, nil, nil, bodies[i])
end
"""


def under_wrk(
    args: argparse.Namespace, *, port: int, pids: list[int], bodies: list[bytes], tmp: Path, token: str
) -> None:
    """Ingest and prioritize from two concurrent wrk runs; rates, latencies and the server's CPU per process."""
    snapshots = tmp / "snapshots.jsonl"
    snapshots.write_bytes(b"\n".join(bodies) + b"\n")
    ingest_script = tmp / "ingest.lua"
    ingest_script.write_text(INGEST_LUA.format(token=token, path=snapshots))
    prioritize_body = tmp / "prioritize.json"
    candidates = random.Random(5).sample([f"node-{i:05d}" for i in range(args.nodes)], 500)
    prioritize_body.write_bytes(json.dumps({"Pod": v1_pod(1), "NodeNames": candidates}).encode())
    prioritize_script = tmp / "prioritize.lua"
    prioritize_script.write_text(LUA.format(body=prioritize_body))
    seconds = round(args.seconds)
    results: dict[str, dict[str, float]] = {}

    def run(name: str, path: str, script: Path, connections: int) -> None:
        url = f"http://127.0.0.1:{port}{path}"
        results[name] = wrk(url, script, seconds=seconds, connections=connections, threads=1)

    runs = [
        threading.Thread(target=run, args=("ingest", "/v1/telemetry", ingest_script, args.clients)),
        threading.Thread(
            target=run, args=("prioritize", "/extender/prioritize", prioritize_script, args.prioritize_clients)
        ),
    ]
    cpu0 = [process_cpu_seconds(p) for p in pids]
    start = time.perf_counter()
    for t in runs:
        t.start()
    for t in runs:
        t.join()
    elapsed = time.perf_counter() - start
    cpu = [process_cpu_seconds(p) - c for p, c in zip(pids, cpu0, strict=True)]
    per_process = ", ".join(f"{'owner' if i == 0 else f'worker {i}'} {c / seconds:.2f}" for i, c in enumerate(cpu))
    print(f"server CPU: {sum(cpu) / seconds:.2f} cores in all ({per_process}); {args.ingest_workers} ingest workers")
    for name, got in results.items():
        print(
            f"wrk {name}: {got['rps']:.0f}/s, p50 {got['p50_ms']:.2f} ms, p99 {got['p99_ms']:.2f} ms, "
            f"non-2xx {got['non_2xx']:.0f}"
        )
    print(f"(both wrk runs {seconds} s, {elapsed:.1f} s with start-up; {args.nodes} nodes in the state)")


def wait_for_workers(port: int, pid: int, count: int) -> list[int]:
    """Wait until the advisor's `count` ingest workers serve (its /metrics says so); their process ids."""
    deadline = time.monotonic() + 60
    while count:
        conn = HTTPConnection("127.0.0.1", port)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        if f"gpuadvisor_advisor_ingest_workers {float(count)}" in text:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"the advisor's {count} ingest workers did not start within 60 s")
        time.sleep(0.2)
    return child_pids(pid)


if __name__ == "__main__":
    main()
