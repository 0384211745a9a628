"""Extender filter latency with the wait-for-a-faster-GPU rule (`advisor.placement.waiting.wait_verdicts`), in process.

The rule looks at every fresh node of a faster GPU model, not only the candidates, so its cost grows with the busy
nodes of the faster models. Worst case measured here: `--nodes` nodes × 8 GPUs, half H100 and every H100 full (8
residents each, with start times), half T4 with random occupancy; the pod asks one GPU; the candidates are the first
500 T4 nodes with a free GPU. The JCT predictor answers from a table, as the served model's cache does once warm.
Prints p50/p99 of `filter_nodes` with the rule and without it, and with shortest first on top
(`advisor.placement.shortest.queue_claims`): `--pending` pending one-GPU pods, all older than the filtered one, of a
workload that runs about as fast on a T4 as on an H100, so every one of them is laid on the T4 nodes with room before
the filter answers.

Usage: python bench/filter_wait.py [--nodes 5000] [--iterations 50] [--pending 256]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

from advisor.placement.config import ScoringConfig
from advisor.placement.filter import FilterRequest, QueueRules, filter_nodes
from advisor.placement.queue import PendingPod
from advisor.placement.shortest import queue_claims
from advisor.placement.types import GpuState, NodeState, PodRequest, Resident, Topology
from advisor.placement.waiting import jct_leave_times
from advisor.predictors import Predictors
from collector.snapshot import LinkLevel

FAST, SLOW = "NVIDIA H100 80GB HBM3", "Tesla T4"
NOW = 10_000.0


class TableJct:
    name = "table"

    def jct_seconds(self, workload: str | None, gpu_model: str, gpu_count: int) -> float | None:
        table = {FAST: 1_000.0, SLOW: 1_200.0} if workload == "v" else {FAST: 3_000.0, SLOW: 12_000.0}
        return table[gpu_model] / gpu_count


def cluster(size: int, rng: random.Random) -> dict[str, NodeState]:
    topology = Topology.uniform(8, LinkLevel.NVLINK)
    nodes = {}
    for i in range(size):
        model = FAST if i % 2 == 0 else SLOW
        busy = 8 if model == FAST else rng.randint(0, 8)
        gpus = tuple(
            GpuState(
                index=g,
                model=model,
                memory_total_bytes=80 << 30,
                allocated_milli=1000 if g < busy else 0,
                residents=(Resident(pod=f"n{i}-{g}", workload="w", started_seconds=NOW - rng.uniform(0, 2_900)),)
                if g < busy
                else (),
            )
            for g in range(8)
        )
        nodes[f"n{i}"] = NodeState(name=f"n{i}", gpus=gpus, topology=topology, observed_at_seconds=NOW)
    return nodes


def timed(call: Callable[[], object], iterations: int) -> tuple[float, float]:
    samples = []
    for _ in range(iterations):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1e3)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(0.99 * len(samples)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--pending", type=int, default=256)
    args = parser.parse_args()
    nodes = cluster(args.nodes, random.Random(0))
    names = [n for n, s in nodes.items() if s.free_gpus >= 1][:500]
    pod = PodRequest(name="p", gpus=1, workload="w")
    predictors = replace(Predictors.heuristic(), jct=TableJct())
    config, off = ScoringConfig(), ScoringConfig(wait_slack=None)

    def with_rule() -> tuple[list[str], dict[str, str]]:
        leaving = jct_leave_times(predictors, NOW)
        return filter_nodes(
            FilterRequest(pod, names, nodes, config, now_seconds=NOW, predictors=predictors, leaving=leaving)
        )

    rng = random.Random(1)
    pending = [
        PendingPod(f"q{i}", PodRequest(name=f"q{i}", gpus=1, workload="v"), created_seconds=NOW - rng.uniform(60, 6000))
        for i in range(args.pending)
    ]
    ordered = replace(config, shortest_first=True)

    def with_shortest_first() -> tuple[list[str], dict[str, str]]:
        leaving = jct_leave_times(predictors, NOW)
        log, rank = queue_claims(
            pod, (0, NOW, pod.name), "default-scheduler", pending, nodes,
            labels=lambda _: None, config=ordered, predictors=predictors, now_seconds=NOW,
        )  # fmt: skip
        return filter_nodes(
            FilterRequest(
                pod, names, nodes, ordered, now_seconds=NOW, predictors=predictors, leaving=leaving,
                queue=QueueRules(claim_log=log, rank=rank),
            )
        )  # fmt: skip

    passed, failed = with_rule()
    print(f"{args.nodes} nodes, {len(names)} candidates: {len(failed)} passed over for a faster GPU, {len(passed)} not")
    passed, failed = with_shortest_first()
    yielded = sum(reason.startswith("room kept") for reason in failed.values())
    print(f"with shortest first and {args.pending} older pending pods: {yielded} candidates yielded to them")
    for label, call in (
        ("filter with the wait rule", with_rule),
        ("filter without it", lambda: filter_nodes(FilterRequest(pod, names, nodes, off, now_seconds=NOW))),
        ("filter with the wait rule and shortest first", with_shortest_first),
    ):
        p50, p99 = timed(call, args.iterations)
        print(f"{label:<44} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms")


if __name__ == "__main__":
    main()
