"""Scheduling throughput of the three ways to run gpuadvisor's scheduler, same binaries, same run (DESIGN §11):

* vanilla: the stock kube-scheduler (k8s/build.sh) with its default profile, no advisor;
* plugin: gpuadvisor-scheduler with the profile of deploy/plugin/ (the GPUAdvisor plugin, one /v1/score per cycle);
* extender: the stock kube-scheduler with the profile of deploy/scheduler/ (the advisor as HTTP extender).

A real etcd and kube-apiserver on loopback (tests/support/kube.py), `--nodes` fake nodes of 8 GPUs (no kubelet), each
with a collector's snapshot at the advisor (0..6 GPUs busy at random, seeded); then per scheduler `--pods` pending
pods of 1 GPU are created, the scheduler is started, and the rate from the first binding seen to the last is
measured (every scheduler with the same client rate limit, well above what it uses). The pods are deleted between
schedulers, and the advisor has let their GPUs go before the next starts. Everything (the three schedulers, the API
server, etcd, the advisor) runs on this machine: on a shared machine the figures move with its load.

Before/after a change to the plugin, same run: `--plugin-baseline PATH` runs another gpuadvisor-scheduler build with
the same profile (`plugin_baseline`); `--plugin-filter` runs the plugin with its `filter` arg on (`plugin_filter`: one
call per cycle in PreFilter, about every node).

Usage: python bench/scheduler_throughput.py [--nodes 500] [--pods 500] [--plugin-baseline BINARY] [--plugin-filter]
       [--json]
Needs the binaries of `make kube-bin` (or $GPUADVISOR_KUBE_BIN). With --json the last line is
{"nodes", "pods", "vanilla_pods_per_second", "plugin_pods_per_second", "extender_pods_per_second", ...}, and per
plugin kind how many cycles the advisor answered (`plugin_advisor_answers`) and how many were scored neutrally because
the call failed or the breaker was open (`plugin_neutral_cycles`); per scheduler, the nodes the advisor counted as
stale after its run (`*_stale_nodes`: the snapshots pushed at setup are kept fresh for the run, 0 expected).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the control plane's helpers live in tests/support
from tests.advisor.factories import process, snapshot  # noqa: E402
from tests.support.kube import (  # noqa: E402
    BUILD_SCRIPT,
    KUBE_BIN_ENV,
    ControlPlane,
    KubeApi,
    Process,
    control_plane,
    create_node,
    gpu_node,
    namespace,
    scheduler_config,
)
from tests.support.net import free_port, wait_until  # noqa: E402
from tests.support.plugin import PLUGIN_BINARY, PLUGIN_NAME, SchedulerProcess, plugin_scheduler_config  # noqa: E402

TOKEN = "bench-advisor-token"
FRESH_SECONDS = 86_400  # the snapshots pushed at setup count as fresh for the whole run
Obj = dict[str, Any]


def bin_dir() -> Path:
    found = os.environ.get(KUBE_BIN_ENV)
    if not found:
        cached = subprocess.run([str(BUILD_SCRIPT), "--cached"], capture_output=True, text=True, check=False)
        found = cached.stdout.strip().splitlines()[-1] if cached.returncode == 0 and cached.stdout.strip() else ""
    if not found or not (Path(found) / "gpuadvisor-scheduler").exists():
        sys.exit(f"error: the Kubernetes binaries are not built: run `make kube-bin` (or set ${KUBE_BIN_ENV})")
    return Path(found)


@contextmanager
def advisor(plane: ControlPlane, workdir: Path) -> Iterator[str]:
    """`gpuadvisor advisor serve` watching the control plane, as tests/kube/conftest.py starts it."""
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUADVISOR_") and k != "KUBECONFIG"}
    # Each node's snapshot is pushed once, before the schedulers run (minutes at 5,000 nodes); a live collector
    # pushes every 5 s. Without a long staleness every node would be stale by then and scored as unknown, the cheap
    # neutral path: the figures would flatter the advisor.
    fresh = {"GPUADVISOR_STALENESS_SECONDS": str(FRESH_SECONDS), "GPUADVISOR_NODE_EXPIRY_SECONDS": str(FRESH_SECONDS)}
    env = {**clean, "KUBECONFIG": str(plane.kubeconfig), "GPUADVISOR_API_TOKEN": TOKEN, **fresh}
    argv = ["advisor", "serve", "--host", "127.0.0.1", "--port", str(port), "--db", f"sqlite:///{workdir}/a.db"]
    proc = Process("advisor", [sys.executable, "-m", "advisor.cli", *argv], workdir / "advisor.log", env).start()
    url = f"http://127.0.0.1:{port}"
    try:
        proc.wait_ready(lambda: httpx.get(f"{url}/healthz", timeout=2).status_code == 200)
        yield url
    finally:
        proc.stop()


def make_cluster(api: KubeApi, advisor_url: str, nodes: int, seed: int) -> list[str]:
    """`nodes` GPU nodes in the API server, and each one's snapshot at the advisor (0..6 GPUs busy at random)."""
    rng = random.Random(seed)
    names = [f"gpu-{i:05d}" for i in range(nodes)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: create_node(api, gpu_node(n)), names))
    with httpx.Client(base_url=advisor_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
        for name in names:
            busy = {g: [process(f"{name}-{g}", namespace="outside")] for g in rng.sample(range(8), rng.randint(0, 6))}
            response = client.post("/v1/telemetry", json=snapshot(name, busy=busy))
            response.raise_for_status()
    return names


def gpu_pod(name: str, scheduler: str) -> Obj:
    resources = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": "trainer:latest", "resources": {"requests": resources, "limits": resources}}
            ],
        },
    }


def pending(api: KubeApi, ns: str) -> int:
    listed = api.get(f"/api/v1/namespaces/{ns}/pods", fieldSelector="spec.nodeName=")
    return len(listed["items"])


def create_pods(api: KubeApi, ns: str, scheduler: str, pods: int) -> None:
    """`pods` pending GPU pods for `scheduler`, created before it runs."""
    namespace(api, ns)
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda i: api.create(f"/api/v1/namespaces/{ns}/pods", gpu_pod(f"p-{i:05d}", scheduler)), range(pods)
            )
        )


def measure(api: KubeApi, ns: str, pods: int, timeout_s: float) -> float:
    """Pods per second from the first binding seen to the last (polled every 20 ms): the scheduler's own rate, not
    the API server's pod creation nor the scheduler's start."""
    deadline = time.monotonic() + timeout_s
    first = None
    while (left := pending(api, ns)) > 0:
        if first is None and left < pods:
            first = (time.monotonic(), pods - left)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{ns}: {left} of {pods} pods still pending after {timeout_s:.0f} s")
        time.sleep(0.02)
    end = time.monotonic()
    if first is None:  # all bound between two polls
        return float("inf")
    return (pods - first[1]) / (end - first[0])


def allocated_milli(advisor_url: str) -> int:
    """Every GPU allocation the advisor holds, in thousandths of a GPU."""
    listed = httpx.get(f"{advisor_url}/v1/nodes", params={"detail": "true"}, timeout=60).json()["nodes"]
    return sum(g.get("allocated_milli", 0) for n in listed for g in n.get("gpus", []))


def stale_nodes(advisor_url: str) -> int:
    """Nodes the advisor counts as stale now (its `gpuadvisor_advisor_nodes` gauge, refreshed by the scrape)."""
    for line in httpx.get(f"{advisor_url}/metrics", timeout=60).text.splitlines():
        if line.startswith('gpuadvisor_advisor_nodes{freshness="stale"}'):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def clean(api: KubeApi, ns: str, advisor_url: str, baseline_milli: int) -> None:
    """Delete the run's pods at once (no kubelet to wait for) and wait until the advisor has let their GPUs go."""
    api.request("DELETE", f"/api/v1/namespaces/{ns}/pods", json={"gracePeriodSeconds": 0})
    wait_until(lambda: not api.get(f"/api/v1/namespaces/{ns}/pods")["items"], timeout_s=120)
    if not wait_until(lambda: allocated_milli(advisor_url) == baseline_milli, timeout_s=120, interval_s=0.5):
        raise RuntimeError(f"the advisor still holds the pods of {ns}")


# kube-scheduler's default client rate (50 QPS, burst 100) would cap every scheduler at ~50 bindings/s; the three
# get the same high limit, as scheduler_perf gives its schedulers, so that the scheduling itself is measured.
CLIENT = {"qps": 5000, "burst": 5000}


def without_filter(config: Obj) -> Obj:
    """The plugin profile without the GPUAdvisor plugin at preFilter and filter and without its `filter` arg: what a
    build from before those extension points loads."""
    for profile in config["profiles"]:
        for point in ("preFilter", "filter"):
            enabled = profile.get("plugins", {}).get(point, {}).get("enabled", [])
            enabled[:] = [p for p in enabled if p["name"] != PLUGIN_NAME]
        for plugin in profile.get("pluginConfig", []):
            if plugin["name"] == PLUGIN_NAME:
                plugin["args"].pop("filter", None)
    return config


def configs(
    plane: ControlPlane, advisor_url: str, *, baseline: Path | None = None, with_filter: bool = False
) -> dict[str, tuple[Path, Callable[[str], Obj]]]:
    """Per kind: the binary and its KubeSchedulerConfiguration under a scheduler name; `baseline` adds
    `plugin_baseline`, another gpuadvisor-scheduler build with the same profile, and `with_filter` adds
    `plugin_filter`, the plugin with its `filter` arg on."""
    bins = plane.bin_dir

    def vanilla(name: str) -> Obj:
        return {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": name}],
        }

    kinds: dict[str, tuple[Path, Callable[[str], Obj]]] = {
        "vanilla": (bins / "kube-scheduler", vanilla),
        "plugin": (
            bins / "gpuadvisor-scheduler",
            lambda name: plugin_scheduler_config(plane.kubeconfig, advisor_url, name),
        ),
    }
    if baseline is not None:
        kinds["plugin_baseline"] = (
            baseline,
            lambda name: without_filter(plugin_scheduler_config(plane.kubeconfig, advisor_url, name)),
        )
    if with_filter:
        kinds["plugin_filter"] = (
            bins / "gpuadvisor-scheduler",
            lambda name: plugin_scheduler_config(plane.kubeconfig, advisor_url, name, filter=True),
        )
    kinds["extender"] = (
        bins / "kube-scheduler",
        lambda name: scheduler_config(plane.kubeconfig, f"{advisor_url}/extender", name),
    )
    return kinds


@contextmanager
def _scheduler_process(plane: ControlPlane, binary: Path, config: Path, log: Path) -> Iterator[SchedulerProcess]:
    port = free_port()
    proc = Process(
        binary.name,
        [
            str(binary),
            f"--config={config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--authentication-kubeconfig={plane.kubeconfig}",
            f"--authorization-kubeconfig={plane.kubeconfig}",
        ],
        log,
    ).start()
    try:
        proc.wait_ready(lambda: httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False).status_code == 200)
        yield SchedulerProcess(proc, f"https://127.0.0.1:{port}")
    finally:
        proc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument(
        "--plugin-baseline",
        type=Path,
        metavar="BINARY",
        help="another gpuadvisor-scheduler build (before a change) to run with the same profile: plugin_baseline",
    )
    parser.add_argument(
        "--plugin-filter", action="store_true", help="also run the plugin with its filter arg on: plugin_filter"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on the last line")
    args = parser.parse_args()
    if args.plugin_baseline is not None and not os.access(args.plugin_baseline, os.X_OK):
        sys.exit(f"error: --plugin-baseline: {args.plugin_baseline} is not an executable file")
    bins = bin_dir()
    with tempfile.TemporaryDirectory(prefix="sched-bench-") as tmp:
        work = Path(tmp)
        with control_plane(bins, _mkdir(work / "plane")) as plane, advisor(plane, _mkdir(work / "advisor")) as url:
            t0 = time.monotonic()
            names = make_cluster(plane.api, url, args.nodes, args.seed)
            setup_s = time.monotonic() - t0
            if not wait_until(lambda: allocated_milli(url) > 0, timeout_s=60):
                raise RuntimeError("the advisor holds none of the busy GPUs reported")
            baseline = allocated_milli(url)
            result: dict[str, Any] = {"nodes": len(names), "pods": args.pods, "setup_seconds": round(setup_s, 1)}
            kinds = configs(plane, url, baseline=args.plugin_baseline, with_filter=args.plugin_filter)
            for kind, (binary, config_of) in kinds.items():
                name = f"bench-{kind.replace('_', '-')}"
                config = {**config_of(name), "clientConnection": {"kubeconfig": str(plane.kubeconfig), **CLIENT}}
                path = _mkdir(work / kind) / "config.yaml"
                path.write_text(yaml.safe_dump(config))
                create_pods(plane.api, name, name, args.pods)
                with _scheduler_process(plane, binary, path, work / kind / "scheduler.log") as scheduler:
                    rate = measure(plane.api, name, args.pods, args.timeout_s)
                    advised = ""
                    if binary.name == PLUGIN_BINARY:
                        # A call that failed or was never made (the breaker open) is a cycle scored without the
                        # advisor: cheaper, so a rate without these counts can flatter the plugin.
                        calls = scheduler.metric("gpuadvisor_plugin_advisor_calls_total", result="ok")
                        neutral = scheduler.metric("gpuadvisor_plugin_fallbacks_total")
                        result[f"{kind}_advisor_answers"] = int(calls)
                        result[f"{kind}_neutral_cycles"] = int(neutral)
                        advised = f" ({int(calls)} cycles advised, {int(neutral)} neutral)"
                result[f"{kind}_pods_per_second"] = round(rate, 1)
                result[f"{kind}_stale_nodes"] = stale_nodes(url)  # 0: every score was made on fresh telemetry
                print(f"{kind:9s} {rate:8.1f} pods/s{advised}", file=sys.stderr)
                clean(plane.api, name, url, baseline)
            for kind in kinds:
                if kind.startswith("plugin"):
                    result[f"{kind}_over_vanilla"] = round(
                        result[f"{kind}_pods_per_second"] / result["vanilla_pods_per_second"], 3
                    )
            result["load_average_1m"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


if __name__ == "__main__":
    main()
