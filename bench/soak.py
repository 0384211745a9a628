"""Soak: an advisor under node churn for a long while; its memory and /metrics must level off, not grow.

One `gpuadvisor advisor serve --no-kube` on loopback is fed by `--nodes` live 8-GPU nodes, each pushing a snapshot every
`--interval-s`. Every `--churn-every-s` a `--churn` fraction of them is replaced by nodes with new names (a cluster
that autoscales, or collectors whose node names change); the replaced ones fall silent. One extra node reports
different links in every snapshot (a flapping topology). Every `--sample-every-s` the server's RSS, the size and
scrape time of /metrics and the node count of /v1/nodes are printed, with the settings, so that the table can go
into docs/benchmarks.md. Before the node-expiry work the same load grew RSS and /metrics without bound.

Usage: python bench/soak.py [--duration-s 600] [--nodes 1000] [--interval-s 10] [--churn 0.1] [--churn-every-s 10]
                            [--expiry-s 120] [--sample-every-s 30] [--gpu-links]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import tempfile
import time
from datetime import UTC, datetime
from http.client import HTTPConnection, RemoteDisconnected
from pathlib import Path
from typing import Any

from cluster import free_port, machine_note, process_cpu_seconds, start_advisor, synthetic_snapshot

LEVELS = ("NVLINK", "PCIE_SWITCH", "PCIE_HOSTBRIDGE", "NUMA", "SYSTEM")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def get(port: int, path: str) -> bytes:
    """One GET on a fresh connection (a kept-alive one would be closed by the server between samples)."""
    conn = HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read()
    conn.close()
    if response.status != 200:
        raise SystemExit(f"GET {path}: {response.status} {body[:200]!r}")
    return body


def flapping(template: dict[str, Any], step: int) -> dict[str, Any]:
    """The flapping node's snapshot: its 28 links take a different combination of levels every time."""
    raw = copy.deepcopy(template)
    for k, link in enumerate(raw["links"]):
        link["level"] = LEVELS[(step // 5 ** (k % 6)) % 5]
    return raw


def main() -> None:  # noqa: PLR0915 - a benchmark's steps in the order it reports them
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-s", type=float, default=600.0)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--interval-s", type=float, default=10.0)
    parser.add_argument("--churn", type=float, default=0.1, help="fraction of the live nodes replaced each time")
    parser.add_argument("--churn-every-s", type=float, default=10.0)
    parser.add_argument("--expiry-s", type=float, default=120.0, help="GPUADVISOR_NODE_EXPIRY_SECONDS")
    parser.add_argument("--sample-every-s", type=float, default=30.0)
    parser.add_argument("--gpu-links", action="store_true", help="GPUADVISOR_EXPORT_GPU_LINKS=true")
    args = parser.parse_args()
    print(f"machine: {machine_note()}")
    print(
        f"load: {args.nodes} live nodes x 8 GPUs, a snapshot each every {args.interval_s:g} s "
        f"({args.nodes / args.interval_s:.0f}/s); {args.churn:.0%} replaced every {args.churn_every_s:g} s; "
        f"one node with new links in every snapshot; node expiry {args.expiry_s:g} s; "
        f"per-link series {'on' if args.gpu_links else 'off'}; {args.duration_s:g} s"
    )
    rng = random.Random(11)
    serial = 0

    def new_node() -> dict[str, Any]:
        nonlocal serial
        serial += 1
        return synthetic_snapshot(f"churn-{serial:06d}", rng)

    live = [new_node() for _ in range(args.nodes)]
    flappy = synthetic_snapshot("flappy", rng)
    env = {"GPUADVISOR_NODE_EXPIRY_SECONDS": str(args.expiry_s)}
    if args.gpu_links:
        env["GPUADVISOR_EXPORT_GPU_LINKS"] = "true"
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_advisor(port, Path(tmp) / "soak.db", env)
        try:
            push = HTTPConnection("127.0.0.1", port, timeout=30)
            headers = {"Content-Type": "application/json"}
            start = time.monotonic()
            next_churn = start + args.churn_every_s
            next_sample = start
            cursor, pushed, step, refused = 0, 0, 0, 0
            per_push_s = args.interval_s / (args.nodes + 1)
            columns = ("t (s)", 6), ("RSS (MiB)", 10), ("/metrics (bytes)", 17), ("scrape (ms)", 12), ("nodes", 6)
            print(" ".join(f"{name:>{width}}" for name, width in columns), f"{'pushed':>8}")
            while (now := time.monotonic()) < start + args.duration_s:
                if now >= next_sample:
                    t0 = time.perf_counter()
                    size = len(get(port, "/metrics"))
                    scrape_ms = (time.perf_counter() - t0) * 1e3
                    nodes = len(json.loads(get(port, "/v1/nodes"))["nodes"])
                    print(
                        f"{now - start:6.0f} {rss_mib(proc.pid):10.1f} {size:17,d} {scrape_ms:12.1f} {nodes:6d} "
                        f"{pushed:8d}",
                        flush=True,
                    )
                    next_sample += args.sample_every_s
                if now >= next_churn:
                    for _ in range(round(len(live) * args.churn)):
                        live[rng.randrange(len(live))] = new_node()
                    next_churn += args.churn_every_s
                if cursor == len(live):
                    raw = flapping(flappy, step)
                    step += 1
                    cursor = 0
                else:
                    raw = live[cursor]
                    cursor += 1
                raw["timestamp"] = datetime.now(UTC).isoformat()
                body = json.dumps(raw).encode()
                try:
                    push.request("POST", "/v1/telemetry", body=body, headers=headers)
                    response = push.getresponse()
                except (ConnectionError, RemoteDisconnected):  # idle past the server's keep-alive: once more
                    push = HTTPConnection("127.0.0.1", port, timeout=30)
                    push.request("POST", "/v1/telemetry", body=body, headers=headers)
                    response = push.getresponse()
                response.read()
                if response.status != 202:
                    refused += 1
                pushed += 1
                time.sleep(max(0.0, start + pushed * per_push_s - time.monotonic()))
            size = len(get(port, "/metrics"))
            nodes = len(json.loads(get(port, "/v1/nodes"))["nodes"])
            print(
                f"end: RSS {rss_mib(proc.pid):.1f} MiB, /metrics {size:,d} bytes, {nodes} nodes held, "
                f"{pushed} snapshots pushed ({refused} refused), {serial + 1} distinct node names, "
                f"server CPU {process_cpu_seconds(proc.pid):.0f} s"
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
