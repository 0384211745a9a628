"""Hostile clients against a running advisor (issue 40): many concurrent large scheduler bodies, and slow clients.

Starts `gpuadvisor advisor serve --no-kube` on loopback (its defaults: 16 MiB scheduler bodies, a 512 MiB parse
budget, 10 s for a request's headers, 30 s for its body), then:

1. `--clients` connections at once each POST a `--body-mb` ExtenderArgs with full Node objects to `--path`, with a
   Content-Length (`declared`) and then without one (`chunked`, read until the limit); meanwhile /healthz is asked
   every 0.1 s on both ports at once, side by side: the serving port (the loop that parses the bodies) and the
   liveness process's port (GPUADVISOR_LIVENESS_PORT, what deploy/'s liveness probe asks), and the advisor's RSS (its
   processes) sampled every 0.05 s.
2. A client that sends half a request head and then nothing, and one that sends a head and 1 byte of a 100-byte
   body: how long until the advisor closes each.

Prints the answers by status, /healthz latency (median, max), the advisor's peak RSS against its 2 GiB limit in
deploy/, whether it is alive after, and the slow clients' close times; the last line is JSON of the figures.
Loopback only; every client has a deadline.

Run from the repository root: python bench/hostile_bodies.py [--clients 100] [--body-mb 20] [--path P]
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from cluster import child_pids, free_port, machine_note, start_advisor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support import upstream

DEPLOY_MEMORY_LIMIT_MIB = 2048  # deploy/advisor/deployment.yaml
CLIENT_DEADLINE_SECONDS = 60.0
PIECE_BYTES = 1024 * 1024


def extender_body(size_bytes: int) -> bytes:
    """ExtenderArgs with as many full Node objects (tests.support.upstream) as make `size_bytes`."""
    pod = upstream.pod(containers=[upstream.container(limits={"nvidia.com/gpu": "1"})])
    one = len(json.dumps(upstream.node("node-00000")))
    count = max(1, size_bytes // (one + 2))
    nodes = [upstream.node(f"node-{i:05d}") for i in range(count)]
    return json.dumps(upstream.extender_args(pod, nodes=nodes)).encode()


def rss_mib(pid: int) -> float:
    """Resident memory of `pid` and its children (the ingest worker), MiB; 0 once gone."""
    total = 0
    for p in (pid, *child_pids(pid)):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def post_raw(port: int, path: str, body: bytes, *, declared: bool) -> str:
    """POST `body` on a fresh connection; the answer's status code, or how the connection ended."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=CLIENT_DEADLINE_SECONDS) as sock:
            length = f"Content-Length: {len(body)}" if declared else "Transfer-Encoding: chunked"
            head = f"POST {path} HTTP/1.1\r\nHost: advisor\r\nContent-Type: application/json\r\n{length}\r\n\r\n"
            sock.sendall(head.encode())
            try:
                for start in range(0, len(body), PIECE_BYTES):
                    piece = body[start : start + PIECE_BYTES]
                    sock.sendall(piece if declared else b"%x\r\n%b\r\n" % (len(piece), piece))
                if not declared:
                    sock.sendall(b"0\r\n\r\n")
            except OSError:
                pass  # answered and closed before the whole body went: read the answer below
            answer = sock.recv(64)
            return answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/1.1 ") else "closed"
    except TimeoutError:
        return "timeout"
    except OSError as e:
        return type(e).__name__


def healthz_ms(port: int) -> float | None:
    start = time.perf_counter()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/healthz")
        ok = conn.getresponse().status == 200
        conn.close()
    except OSError:
        return None
    return (time.perf_counter() - start) * 1000 if ok else None


def flood(
    port: int, liveness_port: int, pid: int, path: str, body: bytes, *, clients: int, declared: bool
) -> dict[str, float]:
    statuses: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    health: dict[int, list[float | None]] = {port: [], liveness_port: []}
    peak = [rss_mib(pid)]
    done = threading.Event()

    def client() -> None:
        outcome = post_raw(port, path, body, declared=declared)
        with lock:
            statuses[outcome] += 1

    def watch(probed: int) -> None:
        while not done.is_set():
            health[probed].append(healthz_ms(probed))
            done.wait(0.1)

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_mib(pid))
            done.wait(0.05)

    before = peak[0]
    watchers = [threading.Thread(target=watch, args=(p,)) for p in health] + [threading.Thread(target=sample)]
    for t in watchers:
        t.start()
    start = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(CLIENT_DEADLINE_SECONDS * 2)
    elapsed = time.monotonic() - start
    done.set()
    for t in watchers:
        t.join()
    mode = "with Content-Length" if declared else "chunked, no Content-Length"
    print(f"{clients} x {len(body) / 1e6:.1f} MB to {path} ({mode}) in {elapsed:.1f} s")
    print(f"  answers: {dict(sorted(statuses.items()))}")
    figures: dict[str, float] = {}
    for probed, name in ((port, "serving port"), (liveness_port, "liveness port")):
        answered = [h for h in health[probed] if h is not None]
        if not answered:
            print(f"  /healthz on the {name}: never answered")
            continue
        print(
            f"  /healthz on the {name}: {len(answered)} of {len(health[probed])} answered, "
            f"median {statistics.median(answered):.0f} ms, max {max(answered):.0f} ms"
        )
        figures[f"{name.split()[0]}_healthz_max_ms"] = round(max(answered))
        figures[f"{name.split()[0]}_healthz_unanswered"] = len(health[probed]) - len(answered)
    print(f"  advisor RSS: {before:.0f} MiB before, peak {peak[0]:.0f} MiB (deploy/ limit: {DEPLOY_MEMORY_LIMIT_MIB})")
    figures["peak_rss_mib"] = round(peak[0])
    return figures


def slow_clients(port: int) -> None:
    for name, data in (
        ("half a request head, then nothing", b"POST /extender/prioritize HTTP/1.1\r\nHost: a\r\n"),
        ("a head and 1 byte of a 100-byte body", b"POST /v1/score HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{"),
    ):
        with socket.create_connection(("127.0.0.1", port), timeout=CLIENT_DEADLINE_SECONDS) as sock:
            start = time.monotonic()
            sock.sendall(data)
            answer = b""
            try:
                while chunk := sock.recv(4096):
                    answer += chunk
            except OSError:
                pass
            status = answer.split(b"\r\n", 1)[0].decode() or "no answer"
            print(f"slow client ({name}): closed after {time.monotonic() - start:.1f} s, {status!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--body-mb", type=float, default=20.0)
    parser.add_argument("--path", default="/extender/prioritize")
    args = parser.parse_args()
    print(machine_note())
    body = extender_body(int(args.body_mb * 1e6))
    port, liveness_port = free_port(), free_port()
    results: dict[str, object] = {"load_average_start": round(os.getloadavg()[0], 1)}
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_advisor(port, Path(tmp) / "bench.db", env={"GPUADVISOR_LIVENESS_PORT": str(liveness_port)})
        try:
            deadline = time.monotonic() + 60  # the liveness process answers once the serving loop beats
            while healthz_ms(liveness_port) is None and time.monotonic() < deadline:
                time.sleep(0.1)
            for declared in (True, False):
                figures = flood(port, liveness_port, proc.pid, args.path, body, clients=args.clients, declared=declared)
                results["declared" if declared else "chunked"] = figures
            slow_clients(port)
            alive = proc.poll() is None and healthz_ms(port) is not None
            print(f"advisor alive after: {alive}")
            results["alive_after"] = alive
            results["load_average_end"] = round(os.getloadavg()[0], 1)
            print(json.dumps(results))
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
