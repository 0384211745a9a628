"""A 12 MB-class Node list against the shipped `httpTimeout`, with the real components: a scheduler that cannot cache
nodes (`nodeCacheCapable: false`) sends the extender every candidate Node in full on each filter and prioritize call,
and the filter hands the passing Nodes back. Does the call fit the timeout the profile ships (300 ms), measured where
the scheduler measures it?

A real etcd, kube-apiserver and kube-scheduler on loopback (tests/support/kube.py) and `gpuadvisor advisor serve`
(bench/scheduler_throughput.py's), the real-sized Nodes of tests/kube/test_large_node_list.py (the kubelet's 50
images, feature-discovery labels and annotations: 748 Nodes, 12.5 MB), each with a collector's snapshot at the
advisor (0..6 GPUs busy at random, seeded). kube-scheduler runs the profile of deploy/scheduler/ as shipped, with
its `httpTimeout`, but for `nodeCacheCapable: false` and `percentageOfNodesToScore: 100` (every Node in the list, as
the test does; by default a scheduler scores about 45 % of 748 Nodes); then a second one the same with
`--long-timeout` (10 s) instead, which no call reaches, so that the time the calls take where the scheduler waits for
them all is seen. Each schedules `--pods` pods of one GPU, one at a time: each pod is created, bound, and the figures
of its scheduling cycle are read:

* the calls the scheduler gave up on: kube-scheduler logs "Skipping extender as it returned error and has ignorable
  flag set" for a filter call that failed (a timeout included) and, at `--vmodule=schedule_one=5`, "Failed to run
  extender's priority function" for a prioritize call; such a call's verdict was not applied. Go's http.Client says
  which phase the timeout hit: "awaiting headers" (the advisor had not answered) or "reading body" (its answer was
  arriving and being decoded);
* the advisor's own time per call (its request-duration histogram's sum; one call per verb per pod) and the body the
  scheduler sent (its request-body histogram);
* the scheduler's time in its extender calls: its scheduling-algorithm duration less its PreFilter, Filter, PreScore
  and Score extension points. What remains is the two extender calls, including the scheduler marshalling the Nodes
  into each body (which its timeout does not cover) and decoding the answers (which it does).

The first pod's calls are the first time the advisor sees each Node (`*_first`); the later ones see the same Nodes
again (no kubelet changes their status here; in a cluster each Node's status changes every few minutes). Everything
runs on this machine: on a shared machine the figures move with its load (printed at the start, in the JSON).

Usage: python bench/large_node_list.py [--pods 30] [--long-timeout 10s|none] [--seed 1] [--json]
Needs the binaries of `make kube-bin` (or $GPUADVISOR_KUBE_BIN). With --json the last line is {"nodes",
"shipped_http_timeout", "shipped_filter_calls", "shipped_filter_gave_up", "shipped_prioritize_gave_up",
"shipped_advisor_filter_ms_p50", ..., "long_...": the same for the second scheduler}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the Nodes and the control plane's helpers live in tests/
import scheduler_throughput as st  # noqa: E402
from baseline_trees import print_load  # noqa: E402

from tests.advisor.factories import process, snapshot  # noqa: E402
from tests.kube.test_large_node_list import NOT_READY, TARGET_BODY_BYTES, real_sized_node  # noqa: E402
from tests.support.kube import ControlPlane, KubeApi, control_plane, namespace, scheduler_config  # noqa: E402
from tests.support.net import wait_until  # noqa: E402
from tests.support.plugin import SchedulerProcess  # noqa: E402

SCHEDULER = "gpuadvisor-full-nodes"
NAMESPACE = "bench-large"
ROUTES = {"filter": "/extender/filter", "prioritize": "/extender/prioritize"}
SKIPPED_FILTER = "Skipping extender as it returned error and has ignorable flag set"
FAILED_PRIORITIZE = "Failed to run extender's priority function"
CYCLE_POINTS = ("PreFilter", "Filter", "PreScore", "Score")
WHY = re.compile(r"\(Client\.Timeout (?:exceeded|or context cancellation) while ([a-z ]+)\)")
Obj = dict[str, Any]
Cycle = dict[str, Any]


def make_nodes(api: KubeApi, advisor_url: str, seed: int) -> int:
    """The test's real-sized Nodes up to TARGET_BODY_BYTES, registered with their status, and a snapshot of each at
    the advisor (0..6 GPUs busy at random); how many."""
    count = math.ceil(TARGET_BODY_BYTES / len(json.dumps(real_sized_node("large-0000"))))  # as the test counts
    names = [f"large-{i:04d}" for i in range(count)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: api.create("/api/v1/nodes", real_sized_node(n)), names))
    rng = random.Random(seed)
    with httpx.Client(base_url=advisor_url, headers={"Authorization": f"Bearer {st.TOKEN}"}, timeout=30) as client:
        for name in names:
            busy = {g: [process(f"{name}-{g}", namespace="outside")] for g in rng.sample(range(8), rng.randint(0, 6))}
            client.post("/v1/telemetry", json=snapshot(name, busy=busy)).raise_for_status()
    return len(names)


def advisor_sums(advisor_url: str) -> dict[str, tuple[float, float, float]]:
    """{verb: (seconds, calls, body bytes)} of the advisor's request-duration and request-body histograms."""
    text = httpx.get(f"{advisor_url}/metrics", timeout=10).text
    series = (
        "gpuadvisor_advisor_request_duration_seconds_sum",
        "gpuadvisor_advisor_request_duration_seconds_count",
        "gpuadvisor_advisor_request_body_bytes_sum",
    )
    sums = {verb: [0.0, 0.0, 0.0] for verb in ROUTES}
    for line in text.splitlines():
        for verb, route in ROUTES.items():
            for i, name in enumerate(series):
                if line.startswith(name + "{") and f'route="{route}"' in line:
                    sums[verb][i] += float(line.rsplit(" ", 1)[1])
    return {verb: (s, c, b) for verb, (s, c, b) in sums.items()}


def scheduler_sums(scheduler: SchedulerProcess, profile: str) -> dict[str, float]:
    """The scheduler's cumulative algorithm and extension-point seconds, and its attempts (this profile only)."""
    sums = {"algorithm": scheduler.metric("scheduler_scheduling_algorithm_duration_seconds_sum")}
    sums["attempts"] = scheduler.metric("scheduler_schedule_attempts_total", profile=profile)
    for point in CYCLE_POINTS:
        sums[point] = scheduler.metric(
            "scheduler_framework_extension_point_duration_seconds_sum", extension_point=point, profile=profile
        )
    return sums


def log_lines(log: Path) -> list[str]:
    """The scheduler's lines saying it gave up on a call (filter or prioritize)."""
    return [
        line
        for line in log.read_text(errors="replace").splitlines()
        if SKIPPED_FILTER in line or FAILED_PRIORITIZE in line
    ]


def gave_up(lines: list[str]) -> dict[str, int]:
    """How many filter and prioritize calls the scheduler gave up on, by why (Go's http.Client names the phase the
    timeout hit: "awaiting headers" = the advisor had not answered yet, "reading body" = the answer was arriving)."""
    counts: dict[str, int] = {}
    for line in lines:
        verb = "filter" if SKIPPED_FILTER in line else "prioritize"
        why = WHY.search(line)
        key = f"{verb}_gave_up_{why.group(1).replace(' ', '_') if why else 'other'}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def gpu_pod(name: str, scheduler: str) -> Obj:
    pod = st.gpu_pod(name, scheduler)
    pod["spec"]["tolerations"] = [{"key": NOT_READY, "operator": "Exists", "effect": "NoSchedule"}]
    return pod


def schedule_one(api: KubeApi, advisor_url: str, scheduler: SchedulerProcess, profile: str, name: str) -> Cycle:
    """Create one pod, wait for its binding and for the advisor to have finished both calls; that cycle's figures."""
    advisor_before, sched_before = advisor_sums(advisor_url), scheduler_sums(scheduler, profile)
    lines_before = len(log_lines(scheduler.process.log))
    api.create(f"/api/v1/namespaces/{NAMESPACE}/pods", gpu_pod(name, profile))
    api.wait_for(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", lambda p: bool(p["spec"].get("nodeName")), 120)
    # A call the scheduler gave up on is still answered (and counted) by the advisor a little later.
    wait_until(lambda: all(advisor_sums(advisor_url)[v][1] > advisor_before[v][1] for v in ROUTES), timeout_s=30)
    advisor_after, sched_after = advisor_sums(advisor_url), scheduler_sums(scheduler, profile)
    cycle: Cycle = {"gave_up": gave_up(log_lines(scheduler.process.log)[lines_before:])}
    for verb in ROUTES:
        calls = advisor_after[verb][1] - advisor_before[verb][1]
        cycle[f"{verb}_calls"] = int(calls)
        if calls:
            cycle[f"advisor_{verb}_ms"] = 1000 * (advisor_after[verb][0] - advisor_before[verb][0]) / calls
            cycle[f"{verb}_body_bytes"] = (advisor_after[verb][2] - advisor_before[verb][2]) / calls
    cycle["attempts"] = int(sched_after["attempts"] - sched_before["attempts"])
    algorithm = sched_after["algorithm"] - sched_before["algorithm"]
    cycle["scheduler_algorithm_ms"] = 1000 * algorithm
    cycle["scheduler_extenders_ms"] = 1000 * (algorithm - sum(sched_after[p] - sched_before[p] for p in CYCLE_POINTS))
    return cycle


def percentile(values: list[float], q: float) -> float:
    """The q-quantile by the nearest rank (few samples: p99 of 30 is the largest)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summarise(cycles: list[Cycle], timeout: str) -> dict[str, Any]:
    """One scheduler's figures: calls, calls given up, and p50/p99 of the times (the first call apart)."""
    result: dict[str, Any] = {"http_timeout": timeout, "pods": len(cycles)}
    for key in ("filter_calls", "prioritize_calls", "attempts"):
        result[key] = sum(c[key] for c in cycles)
    for verb in ROUTES:
        result[f"{verb}_gave_up"] = sum(n for c in cycles for k, n in c["gave_up"].items() if k.startswith(verb))
    for c in cycles:
        for key, n in c["gave_up"].items():
            result[key] = result.get(key, 0) + n
    for verb in ROUTES:
        sizes = [c[f"{verb}_body_bytes"] for c in cycles if f"{verb}_body_bytes" in c]
        result[f"{verb}_body_mb"] = round(statistics.median(sizes) / 1e6, 2) if sizes else None
    for key in ("advisor_filter_ms", "advisor_prioritize_ms", "scheduler_extenders_ms", "scheduler_algorithm_ms"):
        values = [float(c[key]) for c in cycles if key in c]
        if not values:
            continue
        result[f"{key}_first"] = round(values[0], 1)
        later = values[1:] or values
        result[f"{key}_p50"] = round(statistics.median(later), 1)
        result[f"{key}_p99"] = round(percentile(later, 0.99), 1)
    return result


def run_scheduler(
    plane: ControlPlane, advisor_url: str, work: Path, profile: str, *, http_timeout: str | None, pods: int
) -> dict[str, Any]:
    """kube-scheduler with the shipped profile (`nodeCacheCapable: false`, every Node scored, and `http_timeout`
    instead of the shipped one where given) scheduling `pods` pods one at a time; its summary."""
    changes: dict[str, Any] = {"extender.nodeCacheCapable": False, "percentageOfNodesToScore": 100}
    if http_timeout is not None:
        changes["extender.httpTimeout"] = http_timeout
    config = scheduler_config(plane.kubeconfig, f"{advisor_url}/extender", profile, changes)
    (extender,) = config["extenders"]
    path = work / f"{profile}.yaml"
    path.write_text(yaml.safe_dump(config))
    cycles = []
    with st.scheduler_process(
        plane,
        plane.bin_dir / "kube-scheduler",
        path,
        work / f"{profile}.log",
        on_start=lambda _kind, _pid: None,
        extra_args=("--vmodule=schedule_one=5",),  # its V(5) line for a failed prioritize call
    ) as scheduler:
        for i in range(pods):
            cycles.append(schedule_one(plane.api, advisor_url, scheduler, profile, f"{profile}-{i:03d}"))
            shown = {k: round(v, 1) if isinstance(v, float) else v for k, v in cycles[-1].items()}
            print(json.dumps({"scheduler": profile, "pod": i, **shown}))
    return summarise(cycles, extender["httpTimeout"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=30, help="pods per scheduler")
    parser.add_argument(
        "--long-timeout",
        default="10s",
        help="the second scheduler's httpTimeout (one no call reaches: every verdict applied), or 'none' to skip it",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on the last line")
    args = parser.parse_args()
    if args.pods < 1:
        sys.exit("error: --pods must be at least 1")
    if args.long_timeout != "none" and not re.fullmatch(r"\d+(ms|s)", args.long_timeout):
        sys.exit(f"error: --long-timeout {args.long_timeout!r}: expected a duration such as 10s or 800ms, or none")
    load = print_load()
    bins = st.bin_dir()
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="large-node-list-") as tmp:
        work = Path(tmp)
        (work / "plane").mkdir()
        (work / "advisor").mkdir()
        with control_plane(bins, work / "plane") as plane, st.advisor(plane, work / "advisor") as (url, _):
            namespace(plane.api, NAMESPACE)
            t0 = time.monotonic()
            result["nodes"] = make_nodes(plane.api, url, args.seed)
            print(f"{result['nodes']} Nodes made in {time.monotonic() - t0:.0f} s")
            runs = {"shipped": None} | ({} if args.long_timeout == "none" else {"long": args.long_timeout})
            for kind, timeout in runs.items():
                summary = run_scheduler(plane, url, work, f"{SCHEDULER}-{kind}", http_timeout=timeout, pods=args.pods)
                result |= {f"{kind}_{key}": value for key, value in summary.items()}
    result["load_average_1m_start"], result["load_average_1m_end"] = round(load[0], 1), round(os.getloadavg()[0], 1)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
