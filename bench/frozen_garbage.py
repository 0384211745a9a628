"""Cyclic garbage frozen in a serving advisor: what a full collection of everything would reclaim.

    .venv/bin/python bench/frozen_garbage.py [--nodes 2000] [--rounds 3]

The cluster state calls `gc.freeze()` every few hundred rebuilt nodes, so that collections never scan the nodes
again; whatever cyclic garbage a freeze catches (objects in use then, garbage later) is reclaimed only by a full
collection of everything (`gc.unfreeze()`, `gc.collect()`), a stall of the event loop (~0.4 s at 10,000 nodes,
bench/state_gc.py). The state runs none, on the grounds that the serving path makes no such garbage: this checks it.

`gpuadvisor advisor serve --no-kube` runs in a subprocess with a signal handler added (SIGUSR1: unfreeze, collect
with `gc.DEBUG_SAVEALL`, write the unreachable objects' count by type, freeze again). The client pushes `--nodes`
snapshots (a new connection every 100 pushes, as collectors reconnect) and asks `/extender/prioritize` on one
kept-alive connection after every 100 pushes, for `--rounds` rounds of every node; the garbage is counted after
start-up and after each round. Prints one line per count and, last, a JSON line: the unreachable objects found
after each count (cumulative: found garbage is kept, so a leak shows as growth).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cluster import free_port, machine_note, post, synthetic_snapshot, v1_pod, wait_healthz

_SERVER = """
import collections, gc, runpy, signal, sys
out = sys.argv.pop(1)
kept = []
def count(*_):
    gc.unfreeze()
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    gc.set_debug(0)
    kept.extend(gc.garbage)  # kept alive: found again next time, so the counts add up
    gc.garbage.clear()
    kinds = collections.Counter(type(o).__module__ + "." + type(o).__qualname__ for o in kept)
    with open(out, "a") as f:
        f.write(json.dumps({"unreachable": len(kept), "kinds": kinds.most_common(12)}) + "\\n")
    gc.freeze()
import json
signal.signal(signal.SIGUSR1, count)
sys.argv = ["advisor.cli", *sys.argv[1:]]
runpy.run_module("advisor.cli", run_name="__main__")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {machine_note()}")
    port = free_port()
    env = {**os.environ, "GPUADVISOR_STALENESS_SECONDS": "3600", "GPUADVISOR_ALLOW_UNAUTHENTICATED_WRITES": "true"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "garbage.jsonl"
        out.touch()
        argv = ["advisor", "serve", "--no-kube", "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--db", f"sqlite:///{tmp}/advisor.db"]
        server = subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(out), *argv],
            env=env,
            cwd=tmp,  # `-c` puts the working directory first on the path: the advisor comes from PYTHONPATH or the venv
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        counts: list[int] = []

        def count(label: str) -> None:
            lines = len(out.read_text().splitlines())
            server.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 120
            while len(out.read_text().splitlines()) == lines and time.monotonic() < deadline:
                time.sleep(0.1)
            found = json.loads(out.read_text().splitlines()[-1])
            counts.append(found["unreachable"])
            print(f"{label}: {found['unreachable']} unreachable objects; {found['kinds']}", flush=True)

        try:
            wait_healthz(port, server, 60)
            rng = random.Random(3)
            names = [f"node-{i:05d}" for i in range(args.nodes)]
            snapshots = [synthetic_snapshot(n, rng) for n in names]
            scheduler = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            pods = [v1_pod(1), v1_pod(2), v1_pod(0, share_milli=250)]
            count("after start-up")
            for r in range(args.rounds + 1):
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
                for start in range(0, args.nodes, 100):
                    collector = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                    for snap in snapshots[start : start + 100]:
                        status, _ = post(collector, "/v1/telemetry", json.dumps({**snap, "timestamp": stamp}).encode())
                        if status != 202:
                            sys.exit(f"error: a push was answered {status}")
                    collector.close()
                    body = {"Pod": pods[start // 100 % 3], "NodeNames": rng.sample(names, min(500, args.nodes))}
                    status, _ = post(scheduler, "/extender/prioritize", json.dumps(body).encode())
                    if status != 200:
                        sys.exit(f"error: a prioritize call was answered {status}")
                if r:  # the first round builds the state: its connections are the start's
                    count(f"after round {r} ({args.nodes} pushes on {args.nodes // 100} connections)")
        finally:
            server.terminate()
            server.wait(30)
    print(json.dumps({"unreachable_after": counts}))


if __name__ == "__main__":
    main()
