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
call per cycle in PreFilter, about every node); `--profile-only` runs gpuadvisor-scheduler with the plugin's profile
but without the plugin (`profile_only`: what the profile's NodeResourcesFit settings cost, beside vanilla's defaults);
`--binary-only` runs gpuadvisor-scheduler with vanilla's stock profile (`binary_only`: the binary alone).

The host's speed moves between runs (by up to 67 % for the same binary on the development machine): `--rounds N`
runs every scheduler N times on the same cluster, interleaved round by round (the order reversed every other round,
so that an even N runs each kind as often early as late), prints every round, and gives per kind the median of its
figures and the median of its per-round ratio to vanilla (`KIND_over_vanilla`; each round's in
`KIND_over_vanilla_rounds`, every figure of every round in `rounds`).

Where a cycle's time goes, per scheduler: the CPU milliseconds per pod bound of the scheduler, the advisor, the API
server and etcd over the same window (`*_cpu_ms_per_pod`: on a machine whose cores they share, the advisor's CPU is
time the plugin's cycle can wait for), the means of kube-scheduler's extension-point histograms (`*_cycle_ms`), the
plugin's call mean (`*_advisor_call_ms`); what besides the cycles could differ between schedulers, per pod bound: the
API server's requests by verb and resource (`*_apiserver_requests_per_pod`), the cluster events the scheduler handled
and the pods put back in its queue (`*_events_per_pod`, `*_queued_per_pod`), its garbage collections (`*_gc_cycles`)
and kube-scheduler's sampled per-plugin time (`*_sampled_plugin_ms`); and with `--pprof DIR` each scheduler's CPU
profile of 5 s from its first binding (`go tool pprof`; the pods bound within it, `*_pprof_pods`, give a pod's share)
and its allocations over its run (two `allocs` profiles, for `-diff_base`).

Usage: python bench/scheduler_throughput.py [--nodes 500] [--pods 500] [--rounds 1] [--plugin-baseline BINARY]
       [--plugin-filter] [--profile-only] [--binary-only] [--pprof DIR] [--json]
Needs the binaries of `make kube-bin` (or $GPUADVISOR_KUBE_BIN). With --json the last line is
{"nodes", "pods", "vanilla_pods_per_second", "plugin_pods_per_second", "extender_pods_per_second",
"plugin_over_vanilla", ...} (medians with --rounds), and per
plugin kind how many cycles the advisor answered (`plugin_advisor_answers`) and how many were scored neutrally because
the call failed or the breaker was open (`plugin_neutral_cycles`), how many answers were deltas merged into the
verdicts the plugin held (`plugin_delta_answers`) or full (`plugin_full_answers`; both 0 for a build before them);
per scheduler, the nodes the advisor counted as stale after its run (`*_stale_nodes`: the snapshots pushed at setup
are kept fresh for the run, 0 expected).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
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
    ADMIN_TOKEN,
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
def pinned(cpus: set[int] | None) -> Iterator[None]:
    """This process (and so what it starts meanwhile) on `cpus`, then back on the CPUs it had; None: as it is."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def split_cpus(spec: str | None, available: set[int]) -> tuple[set[int], set[int]] | None:
    """`--advisor-cpus`: (the advisor's CPUs, everything else's), or None without the flag. The advisor's must be
    some of `available`, and leave at least one for the control plane, the schedulers and this client."""
    if spec is None:
        return None
    try:
        ours = {int(part) for part in spec.split(",") if part.strip()}
    except ValueError:
        raise ValueError(f"--advisor-cpus: {spec!r} is not a comma-separated list of CPU numbers") from None
    if not ours or not ours <= available:
        raise ValueError(f"--advisor-cpus: {spec!r} must name some of this process's CPUs {sorted(available)}")
    rest = available - ours
    if not rest:
        raise ValueError(f"--advisor-cpus: {spec!r} leaves no CPU for the control plane and the schedulers")
    return ours, rest


@contextmanager
def advisor(plane: ControlPlane, workdir: Path, cpus: set[int] | None = None) -> Iterator[tuple[str, Process]]:
    """`gpuadvisor advisor serve` watching the control plane, as tests/kube/conftest.py starts it (on `cpus` when
    given: its threads inherit them): its URL and process."""
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUADVISOR_") and k != "KUBECONFIG"}
    # Each node's snapshot is pushed once, before the schedulers run (minutes at 5,000 nodes); a live collector
    # pushes every 5 s. Without a long staleness every node would be stale by then and scored as unknown, the cheap
    # neutral path: the figures would flatter the advisor.
    fresh = {"GPUADVISOR_STALENESS_SECONDS": str(FRESH_SECONDS), "GPUADVISOR_NODE_EXPIRY_SECONDS": str(FRESH_SECONDS)}
    env = {**clean, "KUBECONFIG": str(plane.kubeconfig), "GPUADVISOR_API_TOKEN": TOKEN, **fresh}
    argv = ["advisor", "serve", "--host", "127.0.0.1", "--port", str(port), "--db", f"sqlite:///{workdir}/a.db"]
    with pinned(cpus):
        proc = Process("advisor", [sys.executable, "-m", "advisor.cli", *argv], workdir / "advisor.log", env).start()
    url = f"http://127.0.0.1:{port}"
    try:
        proc.wait_ready(lambda: httpx.get(f"{url}/healthz", timeout=2).status_code == 200)
        yield url, proc
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


def create_pods(api: KubeApi, ns: str, scheduler: str, pods: int) -> None:
    """`pods` pending GPU pods for `scheduler`, created before it runs."""
    namespace(api, ns)
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda i: api.create(f"/api/v1/namespaces/{ns}/pods", gpu_pod(f"p-{i:05d}", scheduler)), range(pods)
            )
        )


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (/proc/PID/stat), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Bindings:
    """The pods of a namespace as they are bound, seen through a watch opened before the scheduler starts: when each
    binding arrived, and each process's CPU at the first. A watch costs the API server one event per binding, where
    listing the namespace's pods every 20 ms (this bench before) had it and the bench encode and decode every pod
    fifty times a second on the cores the schedulers are measured on; it also times each binding as it arrives."""

    def __init__(self, api: KubeApi, ns: str, pods: int, timeout_s: float, pids: dict[str, int]) -> None:
        self.pods, self.pids = pods, pids
        self.cpu_at_first: dict[str, float] = {}
        self.error: BaseException | None = None
        listed = api.get(f"/api/v1/namespaces/{ns}/pods")
        self._bound = {p["metadata"]["uid"] for p in listed["items"] if p["spec"].get("nodeName")}
        self._client = httpx.Client(
            base_url=api.url,
            headers={"Authorization": f"Bearer {api.token}"},
            verify=ssl.create_default_context(cafile=api.ca_file),
            timeout=httpx.Timeout(30, read=timeout_s),
        )
        self._path = f"/api/v1/namespaces/{ns}/pods"
        self._version = listed["metadata"]["resourceVersion"]
        self._deadline = time.monotonic() + timeout_s
        self.reopened = 0  # watches the API server ended before every pod was bound, each reopened where it ended
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self.times: list[float] = []
        self.done = threading.Event()
        self.on_first: Callable[[], None] | None = None  # run in the watch's thread at the first binding
        self._thread.start()

    def _watch(self) -> None:
        """Follow the pods until all are bound or the time is up. The API server may end a watch early (its own
        timeout, a restart of its watch cache): then the watch is opened again from the last resourceVersion seen,
        as a client-go reflector does, so no binding is missed or counted twice."""
        try:
            while len(self._bound) < self.pods:
                left = self._deadline - time.monotonic()
                if left <= 1:
                    break
                params = {"watch": "1", "resourceVersion": self._version, "timeoutSeconds": str(int(left))}
                with self._client.stream("GET", self._path, params=params) as response:
                    response.raise_for_status()
                    self._follow(response.iter_lines())
                self.reopened += len(self._bound) < self.pods
        except BaseException as e:  # handed to measure(): the run fails with it
            self.error = e
        finally:
            self.done.set()
            self._client.close()

    def _follow(self, lines: Iterator[str]) -> None:
        for line in lines:
            event = json.loads(line)
            obj = event["object"]
            if event["type"] == "ERROR":  # 410 Gone among them: the bindings since the last event are unknown
                raise RuntimeError(f"pod watch: {obj.get('message')}")
            self._version = obj["metadata"]["resourceVersion"]
            if event["type"] == "BOOKMARK":
                continue
            uid = obj["metadata"]["uid"]
            if obj["spec"].get("nodeName") and uid not in self._bound:
                self._bound.add(uid)
                self.times.append(time.monotonic())
                if len(self.times) == 1:
                    self.cpu_at_first = {k: cpu_seconds(pid) for k, pid in self.pids.items()}
                    if self.on_first is not None:
                        self.on_first()
            if len(self._bound) >= self.pods:
                return

    def bound_between(self, start: float, end: float) -> int:
        """Pods bound from `start` to `end` (time.monotonic())."""
        return sum(start <= t <= end for t in self.times)

    def add_process(self, name: str, pid: int) -> None:
        """Count a process started after the watch (the scheduler: before it can bind anything)."""
        self.pids = {**self.pids, name: pid}

    def measure(self, timeout_s: float) -> tuple[float, dict[str, float]]:
        """Pods per second from the first binding to the last: the scheduler's own rate, not the API server's pod
        creation nor the scheduler's start; and over the same window, per pod bound after the first, the CPU
        milliseconds each process spent (on a machine whose cores they share: where a cycle's time goes)."""
        pids = self.pids
        started = time.monotonic()
        if not self.done.wait(timeout_s) or self.error is not None or len(self._bound) < self.pods:
            raise RuntimeError(
                f"{len(self._bound)} of {self.pods} pods bound when the pod watch ended, "
                f"{time.monotonic() - started:.0f} s after the scheduler started (limit {timeout_s:.0f} s; "
                f"watches reopened: {self.reopened})" + (f": {self.error}" if self.error else "")
            )
        end_cpu = {k: cpu_seconds(pid) for k, pid in pids.items()}
        window = len(self.times) - 1
        if window < 1 or self.times[-1] <= self.times[0]:
            return float("inf"), {}
        cpu_ms = {k: round((end_cpu[k] - self.cpu_at_first[k]) * 1000 / window, 2) for k in pids}
        return window / (self.times[-1] - self.times[0]), cpu_ms


def mean_ms(scheduler: SchedulerProcess, name: str, **labels: str) -> float:
    """The mean of a histogram on the scheduler's /metrics, in milliseconds (0 if nothing was observed)."""
    count = scheduler.metric(f"{name}_count", **labels)
    return round(scheduler.metric(f"{name}_sum", **labels) * 1000 / count, 2) if count else 0.0


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


def without_plugin(config: Obj) -> Obj:
    """The plugin profile with the GPUAdvisor plugin taken out of every extension point and its args: what the
    profile's other settings (NodeResourcesFit's) cost without the plugin."""
    config = without_filter(config)
    for profile in config["profiles"]:
        for point in profile.get("plugins", {}).values():
            point["enabled"] = [p for p in point.get("enabled", []) if p["name"] != PLUGIN_NAME]
        profile["pluginConfig"] = [p for p in profile.get("pluginConfig", []) if p["name"] != PLUGIN_NAME]
    return config


def configs(
    plane: ControlPlane,
    advisor_url: str,
    *,
    baseline: Path | None = None,
    with_filter: bool = False,
    profile_only: bool = False,
    binary_only: bool = False,
) -> dict[str, tuple[Path, Callable[[str], Obj]]]:
    """Per kind: the binary and its KubeSchedulerConfiguration under a scheduler name; `baseline` adds
    `plugin_baseline`, another gpuadvisor-scheduler build with the same profile, `with_filter` adds
    `plugin_filter`, the plugin with its `filter` arg on, `profile_only` adds `profile_only`, the plugin's
    profile without the plugin, and `binary_only` adds `binary_only`, gpuadvisor-scheduler with vanilla's stock
    profile."""
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
    if binary_only:
        kinds["binary_only"] = (bins / "gpuadvisor-scheduler", vanilla)
    if profile_only:
        kinds["profile_only"] = (
            bins / "gpuadvisor-scheduler",
            lambda name: without_plugin(plugin_scheduler_config(plane.kubeconfig, advisor_url, name)),
        )
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
def scheduler_process(
    plane: ControlPlane,
    binary: Path,
    config: Path,
    log: Path,
    *,
    on_start: Callable[[str, int], None],
    extra_args: tuple[str, ...] = (),
) -> Iterator[SchedulerProcess]:
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
            *extra_args,
        ],
        log,
    ).start()
    assert proc.proc is not None
    on_start("scheduler", proc.proc.pid)
    try:
        proc.wait_ready(lambda: httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False).status_code == 200)
        yield SchedulerProcess(proc, f"https://127.0.0.1:{port}")
    finally:
        proc.stop()


def run_one(
    plane: ControlPlane,
    advisor_at: tuple[str, Process],
    kind: str,
    binary: Path,
    config_of: Callable[[str], Obj],
    *,
    work: Path,
    args: argparse.Namespace,
    pprof_dir: Path | None = None,
) -> dict[str, Any]:
    """One scheduler's run over its own namespace of pending pods: its figures, keys prefixed with `kind`."""
    url, advisor_proc = advisor_at
    name = f"bench-{kind.replace('_', '-')}"
    config = {**config_of(name), "clientConnection": {"kubeconfig": str(plane.kubeconfig), **CLIENT}}
    path = _mkdir(work / kind) / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    create_pods(plane.api, name, name, args.pods)
    pids = _pids({"advisor": advisor_proc, "apiserver": plane.apiserver, "etcd": plane.etcd})
    bindings = Bindings(plane.api, name, args.pods, args.timeout_s, pids)
    out: dict[str, Any] = {}
    log = work / kind / "scheduler.log"
    requests_before = apiserver_requests(plane.api)
    with scheduler_process(plane, binary, path, log, on_start=bindings.add_process) as scheduler:
        at_ready = scheduler.metrics_text()
        profile: Profile | None = None
        if pprof_dir is not None:
            _allocs(scheduler, pprof_dir / f"{kind}.allocs-start.pprof")
            profile = Profile(scheduler, pprof_dir / f"{kind}.pprof")
            bindings.on_first = profile.start
            if bindings.times:  # the first binding came before the callback was in place
                profile.start()
        rate, cpu_ms = bindings.measure(args.timeout_s)
        if profile is not None and pprof_dir is not None:
            out[f"{kind}_pprof_pods"] = profile.join(bindings)
            _allocs(scheduler, pprof_dir / f"{kind}.allocs.pprof")
        at_end = scheduler.metrics_text()
        out[f"{kind}_cpu_ms_per_pod"] = cpu_ms
        out[f"{kind}_watch_reopened"] = bindings.reopened
        # Where the scheduling cycle goes (means over the run; the stock metrics of kube-scheduler).
        out[f"{kind}_cycle_ms"] = {
            point: mean_ms(scheduler, "scheduler_framework_extension_point_duration_seconds", extension_point=point)
            for point in ("PreFilter", "Filter", "PreScore", "Score", "Reserve")
        } | {"attempt": mean_ms(scheduler, "scheduler_scheduling_attempt_duration_seconds")}
        out |= scheduler_work(kind, at_ready, at_end, args.pods)
        advised = ""
        if binary.name == PLUGIN_BINARY and kind not in ("profile_only", "binary_only"):
            # A call that failed or was never made (the breaker open) is a cycle scored without the advisor:
            # cheaper, so a rate without these counts can flatter the plugin.
            calls = scheduler.metric("gpuadvisor_plugin_advisor_calls_total", result="ok")
            neutral = scheduler.metric("gpuadvisor_plugin_fallbacks_total")
            out[f"{kind}_advisor_answers"] = int(calls)
            out[f"{kind}_neutral_cycles"] = int(neutral)
            out[f"{kind}_advisor_call_ms"] = mean_ms(
                scheduler, "gpuadvisor_plugin_advisor_call_duration_seconds", result="ok"
            )
            # How the answers came (a build before delta answers has none of these: 0).
            delta = scheduler.metric("gpuadvisor_plugin_advisor_answers_total", kind="delta")
            full = scheduler.metric("gpuadvisor_plugin_advisor_answers_total", kind="full")
            out[f"{kind}_delta_answers"], out[f"{kind}_full_answers"] = int(delta), int(full)
            advised = f" ({int(calls)} cycles advised, {int(neutral)} neutral; {int(delta)} delta, {int(full)} full)"
    out[f"{kind}_apiserver_requests_per_pod"] = per_pod(
        counter_delta(requests_before, apiserver_requests(plane.api)), args.pods
    )
    out[f"{kind}_pods_per_second"] = round(rate, 1)
    out[f"{kind}_stale_nodes"] = stale_nodes(url)  # 0: every score was made on fresh telemetry
    print(f"{kind:12s} {rate:8.1f} pods/s{advised}; CPU ms per pod {cpu_ms}", file=sys.stderr)
    return out


def parse_metrics(text: str, name: str, *labels: str) -> dict[str, float]:
    """The samples of one metric in Prometheus text, summed by the values of `labels` (joined by a space)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, value = line.rsplit(" ", 1)
        pairs = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', head))
        key = " ".join(pairs.get(label, "") for label in labels)
        found[key] = found.get(key, 0.0) + float(value)
    return found


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What each counter grew by (those that did not grow left out)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def per_pod(counts: dict[str, float], pods: int) -> dict[str, float]:
    return {k: round(v / pods, 3) for k, v in sorted(counts.items())}


def apiserver_requests(api: KubeApi) -> dict[str, float]:
    """The API server's requests so far by verb and resource (`apiserver_request_total`): what the scheduler, the
    advisor and this bench asked of it."""
    response = httpx.get(
        f"{api.url}/metrics",
        headers={"Authorization": f"Bearer {api.token}"},
        verify=ssl.create_default_context(cafile=api.ca_file),
        timeout=60,
    )
    response.raise_for_status()
    counts = parse_metrics(response.text, "apiserver_request_total", "verb", "resource", "subresource")
    return {k.strip().replace(" ", "/"): v for k, v in counts.items()}


def scheduler_work(kind: str, at_ready: str, at_end: str, pods: int) -> dict[str, Any]:
    """What the scheduler did over its run besides the cycles, per pod, from its /metrics when it was ready and
    after its last binding: garbage collections (`go_gc_duration_seconds_count`), the cluster events it handled
    (`scheduler_event_handling_duration_seconds_count`), pods put back in its queue by event
    (`scheduler_queue_incoming_pods_total`), and the sampled per-plugin time (`plugin_execution_duration_seconds`,
    kube-scheduler records one cycle in ten: the sum over those, in ms per pod bound)."""
    gcs = counter_delta(
        parse_metrics(at_ready, "go_gc_duration_seconds_count"), parse_metrics(at_end, "go_gc_duration_seconds_count")
    )
    events = counter_delta(
        parse_metrics(at_ready, "scheduler_event_handling_duration_seconds_count", "event"),
        parse_metrics(at_end, "scheduler_event_handling_duration_seconds_count", "event"),
    )
    queued = counter_delta(
        parse_metrics(at_ready, "scheduler_queue_incoming_pods_total", "event"),
        parse_metrics(at_end, "scheduler_queue_incoming_pods_total", "event"),
    )
    plugin_s = counter_delta(
        parse_metrics(at_ready, "scheduler_plugin_execution_duration_seconds_sum", "plugin", "extension_point"),
        parse_metrics(at_end, "scheduler_plugin_execution_duration_seconds_sum", "plugin", "extension_point"),
    )
    return {
        f"{kind}_gc_cycles": int(sum(gcs.values())),
        f"{kind}_events_per_pod": per_pod(events, pods),
        f"{kind}_queued_per_pod": per_pod(queued, pods),
        f"{kind}_sampled_plugin_ms": {k.replace(" ", "/"): round(v * 1000, 2) for k, v in sorted(plugin_s.items())},
    }


# Counts where one round's figure matters on its own: aggregated as the worst round, not the median.
WORST_OF_ROUNDS = ("_neutral_cycles", "_stale_nodes", "_watch_reopened")


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of several rounds of the same kinds as one: each number the median over the rounds (the counts of
    WORST_OF_ROUNDS their largest), each dict of numbers per key; and per kind other than vanilla its rate over
    vanilla's in the same round (`KIND_over_vanilla_rounds`), whose median is `KIND_over_vanilla` — the same host
    speed on both sides of each ratio, where a ratio of the medians would pair rounds run at different speeds."""
    if not rounds:
        raise ValueError("no rounds to summarise")
    out: dict[str, Any] = {}
    for key, first in rounds[0].items():
        values = [r[key] for r in rounds if key in r]
        if isinstance(first, bool) or not isinstance(first, int | float | dict):
            continue
        if isinstance(first, dict):
            keys = sorted({k for v in values for k in v})
            out[key] = {k: _median([v[k] for v in values if k in v]) for k in keys}
        elif key.endswith(WORST_OF_ROUNDS):
            out[key] = max(values)
        else:
            out[key] = _median(values)
    kinds = [k.removesuffix("_pods_per_second") for k in rounds[0] if k.endswith("_pods_per_second")]
    for kind in kinds:
        if kind == "vanilla" or "vanilla_pods_per_second" not in rounds[0]:
            continue
        ratios = [round(r[f"{kind}_pods_per_second"] / r["vanilla_pods_per_second"], 3) for r in rounds]
        out[f"{kind}_over_vanilla_rounds"] = ratios
        out[f"{kind}_over_vanilla"] = _median(ratios)
    return out


def _median(values: list[Any]) -> Any:
    result = statistics.median(values)
    return round(result, 3) if isinstance(result, float) else result


def round_order(kinds: list[str], round_index: int) -> list[str]:
    """The kinds in the order round `round_index` (0-based) runs them: as listed, then reversed in the next round, so
    that over two rounds each kind runs as often early as late in a round (a drift of the host's speed during a
    round then favours none of them)."""
    return kinds if round_index % 2 == 0 else kinds[::-1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every scheduler this many times on the same cluster, interleaved round by round; the figures are "
        "the medians over the rounds (and the median of each round's ratio to vanilla), every round printed",
    )
    parser.add_argument(
        "--plugin-baseline",
        type=Path,
        metavar="BINARY",
        help="another gpuadvisor-scheduler build (before a change) to run with the same profile: plugin_baseline",
    )
    parser.add_argument(
        "--plugin-filter", action="store_true", help="also run the plugin with its filter arg on: plugin_filter"
    )
    parser.add_argument(
        "--profile-only",
        action="store_true",
        help="also run the plugin's profile without the plugin (its NodeResourcesFit settings alone): profile_only",
    )
    parser.add_argument(
        "--binary-only",
        action="store_true",
        help="also run gpuadvisor-scheduler with vanilla's stock profile (the binary alone): binary_only",
    )
    parser.add_argument(
        "--pprof",
        type=Path,
        metavar="DIR",
        help=f"write each scheduler's CPU profile of {PPROF_SECONDS} s from its first binding to DIR/KIND.pprof "
        "(the pods bound in it: KIND_pprof_pods), and its allocation profiles when ready and after its last binding "
        "(DIR/KIND.allocs-start.pprof, DIR/KIND.allocs.pprof); with --rounds, under DIR/round-N/",
    )
    parser.add_argument(
        "--advisor-cpus",
        metavar="LIST",
        help="run the advisor on these CPUs (e.g. 1) and the control plane, the schedulers and this client on the "
        "others, as a cluster runs the advisor's Deployment on other cores than the scheduler's; without it every "
        "process shares every CPU",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on the last line")
    args = parser.parse_args(argv)
    try:
        args.cpu_split = split_cpus(args.advisor_cpus, os.sched_getaffinity(0))
    except ValueError as e:
        parser.error(str(e))
    for flag, value, least in (("--nodes", args.nodes, 1), ("--pods", args.pods, 2), ("--rounds", args.rounds, 1)):
        if value < least:
            parser.error(f"{flag} must be at least {least}, not {value}")
    if args.plugin_baseline is not None and not os.access(args.plugin_baseline, os.X_OK):
        parser.error(f"--plugin-baseline: {args.plugin_baseline} is not an executable file")
    return args


def run_rounds(
    plane: ControlPlane,
    advisor_at: tuple[str, Process],
    kinds: dict[str, tuple[Path, Callable[[str], Obj]]],
    *,
    work: Path,
    args: argparse.Namespace,
    baseline_milli: int,
) -> list[dict[str, Any]]:
    """Every kind's run, `args.rounds` times, in round_order: each round's figures."""
    rounds: list[dict[str, Any]] = []
    for index in range(args.rounds):
        order = round_order(list(kinds), index)
        figures: dict[str, Any] = {}
        if args.rounds > 1:
            print(f"round {index + 1} of {args.rounds}: {', '.join(order)}", file=sys.stderr)
        pprof_dir = args.pprof if args.pprof is None or args.rounds == 1 else args.pprof / f"round-{index + 1}"
        for kind in order:
            binary, config_of = kinds[kind]
            figures |= run_one(
                plane,
                advisor_at,
                kind,
                binary,
                config_of,
                work=work,
                args=args,
                pprof_dir=None if pprof_dir is None else _mkdir(pprof_dir),
            )
            clean(plane.api, f"bench-{kind.replace('_', '-')}", advisor_at[0], baseline_milli)
        figures["load_average_1m"] = os.getloadavg()[0]
        rounds.append(figures)
        if args.rounds > 1:
            rates = ", ".join(f"{k} {figures[f'{k}_pods_per_second']}" for k in kinds)
            print(f"round {index + 1}: {rates} pods/s", file=sys.stderr)
    return rounds


def round_table(rounds: list[dict[str, Any]], kinds: list[str]) -> list[dict[str, Any]]:
    """Each round as the JSON's `rounds` lists it: its order, load, and per kind every figure of its run (keys
    without the kind's prefix)."""
    by_length = sorted(kinds, key=len, reverse=True)  # "plugin_baseline_x" is plugin_baseline's, not plugin's

    def kind_of(key: str) -> str | None:
        return next((k for k in by_length if key.startswith(k + "_")), None)

    table = []
    for i, figures in enumerate(rounds):
        row: dict[str, Any] = {"order": round_order(kinds, i), "load_average_1m": figures["load_average_1m"]}
        for key, value in figures.items():
            kind = kind_of(key)
            if kind is not None:
                row.setdefault(kind, {})[key.removeprefix(kind + "_")] = value
        table.append(row)
    return table


def main() -> None:
    args = parse_args()
    if args.pprof is not None:
        args.pprof.mkdir(parents=True, exist_ok=True)
    bins = bin_dir()
    advisor_cpus, other_cpus = args.cpu_split or (None, None)
    with tempfile.TemporaryDirectory(prefix="sched-bench-") as tmp, pinned(other_cpus):
        work = Path(tmp)
        with (
            control_plane(bins, _mkdir(work / "plane")) as plane,
            advisor(plane, _mkdir(work / "advisor"), advisor_cpus) as (
                url,
                advisor_proc,
            ),
        ):
            t0 = time.monotonic()
            names = make_cluster(plane.api, url, args.nodes, args.seed)
            setup_s = time.monotonic() - t0
            if not wait_until(lambda: allocated_milli(url) > 0, timeout_s=60):
                raise RuntimeError("the advisor holds none of the busy GPUs reported")
            baseline = allocated_milli(url)
            result: dict[str, Any] = {"nodes": len(names), "pods": args.pods, "setup_seconds": round(setup_s, 1)}
            if advisor_cpus is not None:
                result["advisor_cpus"] = sorted(advisor_cpus)
                result["other_cpus"] = sorted(other_cpus or ())
            kinds = configs(
                plane,
                url,
                baseline=args.plugin_baseline,
                with_filter=args.plugin_filter,
                profile_only=args.profile_only,
                binary_only=args.binary_only,
            )
            result["load_average_1m_start"] = os.getloadavg()[0]
            rounds = run_rounds(plane, (url, advisor_proc), kinds, work=work, args=args, baseline_milli=baseline)
            result |= summarise(rounds)
            if args.rounds > 1:
                result["rounds"] = round_table(rounds, list(kinds))
            result["load_average_1m"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")


PPROF_SECONDS = 5


class Profile:
    """The scheduler's CPU profile (its /debug/pprof, on by default) of PPROF_SECONDS from its first binding, fetched
    in a thread while the pods are scheduled; the pods bound within it say what one pod's share of it is."""

    def __init__(self, scheduler: SchedulerProcess, out: Path) -> None:
        self.scheduler, self.out = scheduler, out
        self.started = 0.0
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._fetch, daemon=True)

    def start(self) -> None:
        """Start the profile (once; later calls do nothing)."""
        with self._lock:
            if self.started:
                return
            self.started = time.monotonic()
        self._thread.start()

    def _fetch(self) -> None:
        try:
            response = httpx.get(
                f"{self.scheduler.url}/debug/pprof/profile",
                params={"seconds": PPROF_SECONDS},
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                verify=False,
                timeout=PPROF_SECONDS + 60,
            )
            response.raise_for_status()
            self.out.write_bytes(response.content)
        except BaseException as e:  # handed to join(): the run fails with it
            self.error = e

    def join(self, bindings: Bindings) -> int:
        """Wait for the profile; the pods bound while it was taken."""
        if self.started:
            self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"CPU profile of {self.out.stem}: {self.error}") from self.error
        return bindings.bound_between(self.started, self.started + PPROF_SECONDS) if self.started else 0


def _allocs(scheduler: SchedulerProcess, out: Path) -> None:
    """The scheduler's allocations since it started (its /debug/pprof/allocs): taken when it is ready and again
    after its last binding, so that `go tool pprof -sample_index=alloc_space -diff_base KIND.allocs-start.pprof
    KIND.allocs.pprof` shows what its scheduling allocated (what its garbage collector works on)."""
    response = httpx.get(
        f"{scheduler.url}/debug/pprof/allocs",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        verify=False,
        timeout=60,
    )
    response.raise_for_status()
    out.write_bytes(response.content)


def _pids(processes: dict[str, Process | None]) -> dict[str, int]:
    return {k: p.proc.pid for k, p in processes.items() if p is not None and p.proc is not None}


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


if __name__ == "__main__":
    main()
