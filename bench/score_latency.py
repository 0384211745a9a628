"""Scoring latency at the scale kube-scheduler sends: 500 candidate nodes × 8 GPUs, ~2,000 residents.

One command, prints the figures recorded in docs/benchmarks.md:
  * in-process `Scorer.score_candidates` and `Scorer.extender_priorities` (`advisor.placement.scorer`) over the 500
    nodes, p50/p99 per call — warm (node states and request shapes seen before: the score vectors and the memo
    answer) and cold (every node just refreshed by a new snapshot);
  * `POST /extender/prioritize` over HTTP on loopback (a full v1.Pod, 500 NodeNames) against
    `gpuadvisor advisor serve --no-kube` in a subprocess: p50/p99 with one keep-alive client, and the server's own
    CPU time per request (unaffected by other load on the machine);
  * the same with a pod shape never seen before in every request (cold: a new share size, GPU count × CPU request
    and workload), p50/p99 per kind;
  * sustained requests/s with several concurrent keep-alive clients (which share the cores with the server);
  * `POST /v1/score` over the same 500 nodes (every node, explained): p50/p99 with one keep-alive client, server CPU
    per request, and sustained requests/s with several clients.

`--node-cpu` gives the in-process nodes CPU/memory as the Kubernetes watch would (64 CPUs / 512 GiB allocatable,
2 CPUs / 16 GiB requested per resident pod); the HTTP server runs with `--no-kube`, so its nodes have none.

Usage: python bench/score_latency.py [--nodes 500] [--iterations 600] [--requests 400] [--seconds 10] [--clients 4]
       [--node-cpu] [--part all|in-process|prioritize|score]
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
from collections.abc import Callable
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

from cluster import (
    POD_MIX,
    advisor_cpu_seconds,
    floor_requests,
    free_port,
    machine_note,
    percentiles_ms,
    post,
    push_snapshots,
    start_advisor,
    sustained_rate,
    synthetic_cluster,
    timed_requests,
    v1_pod,
)

from advisor.api.schemas import V1Pod
from advisor.cli.serve import GC_THRESHOLDS
from advisor.cluster.state import ClusterState, PodResources
from advisor.placement.config import ScoringConfig
from advisor.placement.scorer import Scorer
from advisor.placement.types import PodRequest
from collector.snapshot import NodeSnapshot


def bench_in_process(snapshots: list[dict[str, Any]], iterations: int, *, node_cpu: bool = False) -> None:
    state = ClusterState()
    parsed = [NodeSnapshot.model_validate(raw) for raw in snapshots]
    for snap in parsed:
        state.ingest(snap)
    if node_cpu:
        state.replace_allocatable({s.node: (64_000, 512 * 1024) for s in parsed})
        held = {
            (r.pod, name) for name, n in state.nodes.items() for g in n.gpus for r in g.residents if r.pod != "host"
        }
        state.replace_pods([], [PodResources(pod, node, 2000, 16 * 1024) for pod, node in sorted(held)])
        print(f"node CPU/memory known: {len(held)} pods' requests")
    nodes = state.nodes
    names = sorted(nodes)
    gpus = sum(len(n.gpus) for n in nodes.values())
    residents = sum(len(g.residents) for n in nodes.values() for g in n.gpus)
    print(f"cluster: {len(names)} nodes, {gpus} GPUs, {residents} residents")
    scorer = Scorer(ScoringConfig(), clock=time.time)
    pods = [V1Pod.model_validate(p).to_request() for p in POD_MIX]
    gc.freeze()  # as `gpuadvisor advisor serve` does
    gc.set_threshold(*GC_THRESHOLDS)
    for pod in pods:
        scorer.score_candidates(pod, names, nodes)
    calls: list[tuple[str, Callable[[PodRequest], object]]] = [
        ("score_candidates", lambda pod: scorer.score_candidates(pod, names, nodes)),
        ("extender_priorities", lambda pod: scorer.extender_priorities(pod, names, nodes)),
    ]
    for name, call in calls:
        for label, count in (("warm", iterations), ("cold", max(1, iterations // 5))):
            wall: list[float] = []
            cpu: list[float] = []
            for i in range(count):
                if label == "cold":
                    scorer.clear()
                t0, c0 = time.perf_counter(), time.thread_time()
                call(pods[i % len(pods)])
                wall.append(time.perf_counter() - t0)
                cpu.append(time.thread_time() - c0)
            p50, p99 = percentiles_ms(wall)
            c50, c99 = percentiles_ms(cpu)
            print(
                f"in-process {name}, {label}: wall p50 {p50:.2f} ms, p99 {p99:.2f} ms; "
                f"CPU p50 {c50:.2f} ms, p99 {c99:.2f} ms ({count} calls)"
            )


def bench_http(snapshots: list[dict[str, Any]], requests: int, seconds: float, clients: int) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_advisor(port, Path(tmp) / "bench.db")
        try:
            conn = HTTPConnection("127.0.0.1", port)
            push_snapshots(port, snapshots)
            names = [s["node"] for s in snapshots]
            bodies = [json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode() for pod in POD_MIX]
            status, reply = post(conn, "/extender/prioritize", bodies[0])
            hosts = json.loads(reply)
            assert status == 200, reply[:300]
            assert [h["Host"] for h in hosts] == names
            assert all(type(h["Score"]) is int and 0 <= h["Score"] <= 10 for h in hosts)
            histogram = {s: sum(1 for h in hosts if h["Score"] == s) for s in range(11)}
            print(f"HostPriorityList for a 1-GPU v1.Pod: {len(hosts)} hosts, scores {histogram}")
            for body in bodies:
                post(conn, "/extender/prioritize", body)
            f50, f99, floor_ms = floor_requests("/extender/prioritize", reply, bodies, requests, Path(tmp))
            print(
                f"HTTP floor (FastAPI + uvicorn, async route answering the same {len(reply)} B): p50 {f50:.2f} ms,"
                f" p99 {f99:.2f} ms, server CPU {floor_ms:.2f} ms/request"
            )
            p50, p99, cpu_ms = timed_requests(conn, proc.pid, "/extender/prioritize", bodies, requests)
            print(
                f"HTTP /extender/prioritize, one keep-alive client: p50 {p50:.2f} ms, p99 {p99:.2f} ms "
                f"({requests} requests); server CPU {cpu_ms:.2f} ms/request"
            )
            cold_ms: dict[str, list[float]] = {"1 GPU": [], "2-8 GPUs": [], "a share": []}
            cpu0 = advisor_cpu_seconds(proc.pid)
            for i in range(requests):
                # A pod shape never seen before in every request: a new share size, GPU count x CPU request, workload.
                kind = ("1 GPU", "2-8 GPUs", "a share")[i % 3]
                pod = v1_pod(1) if kind == "1 GPU" else v1_pod((2, 4, 8)[(i // 3) % 3])
                if kind == "a share":
                    pod = v1_pod(0, share_milli=100 + (i * 37) % 850)
                pod["metadata"]["labels"]["gpuadvisor.io/workload"] = f"cold-{i}"
                pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = f"{1000 + i}m"
                body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()
                t0 = time.perf_counter()
                status, _ = post(conn, "/extender/prioritize", body)
                cold_ms[kind].append(time.perf_counter() - t0)
                assert status == 200
            cpu_ms = (advisor_cpu_seconds(proc.pid) - cpu0) / requests * 1e3
            for kind, samples in cold_ms.items():
                p50, p99 = percentiles_ms(samples)
                print(
                    f"HTTP /extender/prioritize, a new pod shape every request ({kind}, cold): p50 {p50:.2f} ms, "
                    f"p99 {p99:.2f} ms ({len(samples)} requests)"
                )
            print(f"  server CPU over the cold requests: {cpu_ms:.2f} ms/request")
            rate, elapsed = sustained_rate(port, "/extender/prioritize", bodies, clients, seconds)
            print(f"sustained: {rate:.0f} requests/s, {clients} concurrent clients, {elapsed:.1f} s")
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def bench_score_http(snapshots: list[dict[str, Any]], requests: int, seconds: float, clients: int) -> None:
    """`POST /v1/score` over every node (500): the native API, a full explained answer per node."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_advisor(port, Path(tmp) / "bench.db")
        try:
            conn = HTTPConnection("127.0.0.1", port)
            push_snapshots(port, snapshots)
            pods = [{"gpus": 1}, {"gpus": 2}, {"gpus": 4}, {"gpus": 8}, {"gpu_milli": 250}, {"gpus": 1}]
            bodies = [json.dumps({"pod": {**pod, "workload": "resnet50-bs64"}}).encode() for pod in pods]
            status, reply = post(conn, "/v1/score", bodies[0])
            assert status == 200, reply[:300]
            answer = json.loads(reply)
            assert len(answer["scores"]) == len(snapshots)
            print(f"/v1/score answer for a 1-GPU pod: {len(answer['scores'])} nodes, {len(reply) / 1e3:.0f} kB")
            for body in bodies:
                post(conn, "/v1/score", body)
            p50, p99, cpu_ms = timed_requests(conn, proc.pid, "/v1/score", bodies, requests)
            print(
                f"HTTP /v1/score, {len(snapshots)} nodes, one keep-alive client: p50 {p50:.2f} ms, p99 {p99:.2f} ms "
                f"({requests} requests); server CPU {cpu_ms:.2f} ms/request"
            )
            rate, elapsed = sustained_rate(port, "/v1/score", bodies, clients, seconds)
            print(
                f"/v1/score sustained: {rate:.0f} requests/s, {clients} concurrent clients, "
                f"{elapsed:.1f} s (server at most one core: {1e3 / max(cpu_ms, 1e-9):.0f} requests/s of CPU)"
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--iterations", type=int, default=600)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--node-cpu", action="store_true", help="in-process nodes carry CPU/memory")
    parser.add_argument("--part", choices=("all", "in-process", "prioritize", "score"), default="all")
    args = parser.parse_args()
    print(f"machine: {machine_note()}")
    snapshots = synthetic_cluster(args.nodes)
    if args.part in ("all", "in-process"):
        bench_in_process(snapshots, args.iterations, node_cpu=args.node_cpu)
    if args.part in ("all", "prioritize"):
        bench_http(snapshots, args.requests, args.seconds, args.clients)
    if args.part in ("all", "score"):
        bench_score_http(snapshots, args.requests, args.seconds, args.clients)


if __name__ == "__main__":
    main()
