"""The served advisor's CPU per scheduler-plugin delta call over HTTP: `bench/plugin_call_cpu.py` measures
`fast_score` in-process, this the whole request as gpuadvisor-scheduler makes it — uvicorn's HTTP parsing, the ASGI
middleware, the answer and the socket writes — in `gpuadvisor advisor serve --no-kube` (its garbage-collector
settings and all), which is what the plugin's scheduling rate pays for on a machine the advisor shares with the
scheduler (bench/scheduler_throughput.py).

N nodes with fresh snapshots (0..6 of 8 GPUs busy, seeded) are pushed, then calls go over one kept-alive connection
as the plugin sends them: `detail: brief`, `unknown_nodes: neutral`, `since` chaining the tokens, 500 candidates in a
window that moves on by 500 nodes each call and is shuffled (kube-scheduler's parallel Filter gives each cycle its
own order), the last six placed pods that are on the window as assumed pods. The first 20 calls fill the delta
table and are not timed; then the advisor process's CPU (user + system, from /proc) per call over `--calls` calls.

With `--burst`, the calls go as they do in bench/scheduler_throughput.py's burst: each cycle's pod is placed on a
node of the next call's window, so every call carries the pod the last one placed as assumed (the plugin's Reserve;
the advisor's pod watch has not seen it bound yet: here, without a watch, it never does), and after that call the
node's new snapshot (the pod's process on a free GPU) reaches the state, as the binding does through the watch in
the real run: one node of each later window has changed since it was last asked. The figure is then the CPU of a
call and of one snapshot's ingest; `advisor_cpu_ms_per_snapshot` is the same snapshots' ingest measured alone, before
the calls, so that `advisor_cpu_ms_per_call - advisor_cpu_ms_per_snapshot` is the call's part.

`--client go` sends each request as gpuadvisor-scheduler's net/http does (k8s/plugin/gpuadvisor/client.go): the
body in `appendRequest`'s key order with `assumed` left out when empty, the head in net/http's order and words (Host,
User-Agent, Content-Length, Content-Type, Accept-Encoding: gzip), head and body in one write, the answer read by its
Content-Length; `--client python` (the default) is `http.client`'s request, head and body in two writes.

With `--baseline REF`, that commit's advisor is measured too (its files unpacked into a temporary folder), the two
alternated twice so that both see the same machine load.

Run from the repository root: python bench/plugin_call_http.py [--nodes 5000] [--calls 600] [--burst]
[--client go] [--baseline REF]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import baseline_trees
from baseline_trees import print_load
from cluster import wait_healthz
from plugin_call_cpu import WINDOW, _wire, call_body

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.advisor.factories import process, snapshot  # noqa: E402 - the repository root is on the path first
from tests.support.net import free_port  # noqa: E402

TOKEN = "bench"
WARM_CALLS = 20
READY_SECONDS = 120


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def go_request(port: int, body: dict[str, Any]) -> bytes:
    """The bytes gpuadvisor-scheduler writes for `body` (its keys in `appendRequest`'s order, `assumed` left out when
    empty, as `omitempty` does; then net/http's head: Host, User-Agent, Content-Length, the headers set in sorted
    order, Accept-Encoding added by the transport), in one piece."""
    order = ("pod", "nodes", "unknown_nodes", "assumed", "detail", "since")
    wire = {k: body[k] for k in order if k in body and (k != "assumed" or body[k])}
    data = json.dumps(wire, separators=(",", ":")).encode()
    head = (
        f"POST /v1/score HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: Go-http-client/1.1\r\n"
        f"Content-Length: {len(data)}\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n"
    )
    return head.encode() + data


class GoClient:
    """One kept-alive connection that writes each request whole and reads the answer by its Content-Length."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go's net package sets it
        self.pending = b""

    def call(self, body: dict[str, Any]) -> tuple[int, Any]:
        self.sock.sendall(go_request(self.port, body))
        data = self.pending
        while b"\r\n\r\n" not in data:
            data += self._read()
        head, rest = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length = next(
            int(v) for k, _, v in (line.partition(":") for line in lines[1:]) if k.lower() == "content-length"
        )
        while len(rest) < length:
            rest += self._read()
        self.pending = rest[length:]
        return status, json.loads(rest[:length])

    def _read(self) -> bytes:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            sys.exit("error: the advisor closed the connection")
        return chunk


def measure(tree: Path, nodes: int, calls: int, *, burst: bool = False, client: str = "python") -> dict[str, Any]:
    """One tree's advisor, served, and the calls against it."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUADVISOR_")}
    # Snapshots held fresh for the whole run, as collectors pushing every few seconds would keep them; one process.
    env |= {
        "GPUADVISOR_API_TOKEN": TOKEN,
        "GPUADVISOR_STALENESS_SECONDS": "86400",
        "GPUADVISOR_NODE_EXPIRY_SECONDS": "86400",
        "GPUADVISOR_INGEST_WORKERS": "0",
        "PYTHONPATH": str(tree),
    }
    with tempfile.TemporaryDirectory() as tmp:
        argv = [
            "advisor",
            "serve",
            "--no-kube",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--db",
            f"sqlite:///{tmp}/a.db",
        ]
        with open(Path(tmp) / "advisor.log", "wb") as log:
            advisor = subprocess.Popen([sys.executable, "-m", "advisor.cli", *argv], cwd=tree, env=env, stderr=log)
            try:
                wait_healthz(port, advisor, READY_SECONDS)
                return _calls(port, advisor.pid, nodes, calls, burst=burst, client=client)
            finally:
                advisor.terminate()
                advisor.wait(30)


def _python_call(connection: http.client.HTTPConnection, body: dict[str, Any]) -> tuple[int, Any]:
    """`http.client`'s request of `body` (head and body in two writes) and its answer."""
    connection.request(
        "POST", "/v1/score", json.dumps(body, separators=(",", ":")), {"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    return response.status, json.loads(response.read())


def _calls(port: int, pid: int, nodes: int, calls: int, *, burst: bool, client: str) -> dict[str, Any]:
    rng = random.Random(7)
    names = [f"gpu-{i:05d}" for i in range(nodes)]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    busy: dict[str, dict[int, list[dict[str, Any]]]] = {}

    def push(name: str) -> None:
        connection.request("POST", "/v1/telemetry", json.dumps(snapshot(name, busy=busy[name])), headers)
        response = connection.getresponse()
        response.read()
        if response.status != 202:
            sys.exit(f"error: a snapshot was answered {response.status}")

    for name in names:
        busy[name] = {g: [process(f"{name}-{g}", namespace="outside")] for g in rng.sample(range(8), rng.randint(0, 6))}
        push(name)
    # --burst: where each cycle's pod goes, a node with a free GPU on the next call's window
    planned: Counter[str] = Counter()
    placed = [_place(names, busy, planned, k + 1, rng) for k in range(WARM_CALLS + calls)] if burst else []
    ingest_ms = None
    if burst:  # the snapshots the calls will bring, their ingest alone (they leave the nodes as they are now)
        start = _cpu_seconds(pid)
        for node in placed[WARM_CALLS:]:
            push(node)
        ingest_ms = (_cpu_seconds(pid) - start) / calls * 1000
    token, deltas = "", 0
    assumed: list[dict[str, Any]] = []
    go = GoClient(port) if client == "go" else None
    for k in range(WARM_CALLS + calls):
        if k == WARM_CALLS:
            start = _cpu_seconds(pid)
        window, body = call_body(k, names, assumed)
        random.Random(k).shuffle(window)  # the list in the body: kube-scheduler's parallel Filter's order
        body["since"] = token
        code, got = go.call(body) if go is not None else _python_call(connection, body)
        if code != 200:
            sys.exit(f"error: /v1/score answered {code}: {got}")
        token = got["token"]
        deltas += int(k >= WARM_CALLS and got["delta"])
        if burst:
            if k > 0:  # the pod the last cycle placed, sent with this call, is now running on its node
                node = placed[k - 1]
                free = next(g for g in range(8) if g not in busy[node])
                busy[node][free] = [process(f"p-{k - 1:05d}", namespace="bench")]
                push(node)
            assumed = [{"node": placed[k], "pod": _wire(f"p-{k:05d}")}]
        else:
            assumed = [*assumed, {"node": window[0], "pod": _wire(f"p-{k:05d}")}][-6:]
    spent = _cpu_seconds(pid) - start
    figures = {
        "advisor_cpu_ms_per_call": round(spent / calls * 1000, 3),
        "delta_answers": deltas,
        "calls": calls,
        "client": client,
    }
    if ingest_ms is not None:
        figures["advisor_cpu_ms_per_snapshot"] = round(ingest_ms, 3)
    return figures


def _place(
    names: list[str],
    busy: dict[str, dict[int, list[dict[str, Any]]]],
    planned: Counter[str],
    k: int,
    rng: random.Random,
) -> str:
    """A node of the k-th call's window with a GPU free for one more pod, counted in `planned`."""
    window, _ = call_body(k, names, [])
    while True:
        node = rng.choice(window)
        if len(busy[node]) + planned[node] < 8:
            planned[node] += 1
            return node


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--client", choices=("python", "go"), default="python", help="how requests are written")
    parser.add_argument("--baseline", default=None, help="a git commit to measure beside this tree")
    parser.add_argument(
        "--burst", action="store_true", help="each call carries the pod the last one placed; its node changes after"
    )
    args = parser.parse_args()
    if args.nodes < WINDOW:
        sys.exit(f"error: --nodes must be at least {WINDOW} (the candidates of one call)")
    if args.calls < 1:
        sys.exit("error: --calls must be at least 1")
    load = print_load()
    runs = baseline_trees.alternate(
        args.baseline, lambda tree: measure(tree, args.nodes, args.calls, burst=args.burst, client=args.client)
    )
    summary = {
        "nodes": args.nodes,
        "calls": args.calls,
        "burst": args.burst,
        "load_average_at_start": round(load[0], 1),
    }
    summary["runs"] = runs
    summary["load_average_at_end"] = round(os.getloadavg()[0], 1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
