"""Garbage-collector pauses and memory per node of the advisor's cluster state at 10,000 nodes.

One command, prints the figures recorded in docs/benchmarks.md:
  * memory per node (RSS growth while the state is built, over the nodes) and the objects the collector tracks per
    node, for the typical mix of `cluster.synthetic_snapshot` (≈ half the GPUs busy, some shared) or, with
    `--procs-per-gpu 8`, eight processes on every GPU;
  * collector pauses while snapshots keep arriving (`--seconds` of ingest as the service does it: each body parsed
    and validated from JSON, then `ClusterState.ingest`) and, after every 10th snapshot, one prioritize over 500
    random candidates for one of 24 pod shapes (the scorer's memo fills as in service), timed by `gc.callbacks`:
    count, p50/p99/max per generation;
    the longest single step of that loop (one ingest or one
    prioritize, collections inside it included: the longest a request waits behind the state), wall and CPU (on a
    loaded machine the wall time of a step is mostly waiting for a core), and the eight longest steps by CPU named
    (which node's ingest; which prioritize call, its pod, how many candidates it asked about for the first time or
    changed since they were last asked about, how many rows it computed); with `--profile`, every prioritize call
    is profiled (cProfile, by CPU) and the three longest steps' profiles are printed; and the frozen
    objects per node at the start and the end (garbage frozen with the state would make them grow);
  * one full collection (`gc.collect()`) of the state as it stands, and a full collection after `gc.unfreeze()`:
    the stall the state no longer causes (it once ran one to reclaim cyclic garbage a freeze caught; there is none,
    bench/frozen_garbage.py).

The process is set up as `gpuadvisor advisor serve` sets itself up (`gc.freeze()` after start-up, its thresholds).

Usage: python bench/state_gc.py [--nodes 10000] [--procs-per-gpu N] [--seconds 20] [--profile]   (JSON last line)
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import heapq
import io
import json
import os
import pstats
import random
import time
from pathlib import Path

from cluster import machine_note, percentiles_ms, synthetic_snapshot

from advisor.api.app import STATE_FREEZE_AFTER_NODES
from advisor.cli.serve import GC_THRESHOLDS
from advisor.cluster.state import ClusterState
from advisor.placement.config import ScoringConfig
from advisor.placement.scorer import Scorer
from advisor.placement.types import PodRequest
from advisor.predictors import prepare_turn_taking
from collector.snapshot import NodeSnapshot


def rss_bytes() -> int:
    fields = Path("/proc/self/statm").read_text().split()
    return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")


_NAMED_STEPS = 8
"""The longest steps the report names."""


def _keep(
    named: list[tuple[float, int, str, cProfile.Profile | None]],
    cpu: float,
    order: int,
    what: str,
    profile: cProfile.Profile | None,
) -> None:
    """Keep the step among the `_NAMED_STEPS` longest (a heap, shortest first)."""
    if len(named) < _NAMED_STEPS:
        heapq.heappush(named, (cpu, order, what, profile))
    elif cpu > named[0][0]:
        heapq.heapreplace(named, (cpu, order, what, profile))


def main() -> None:  # noqa: PLR0912, PLR0915 - a benchmark's steps in the order it reports them
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--procs-per-gpu", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="cProfile every prioritize call (timed by CPU) and print the profiles of the three longest (their times "
        "inflated by the profiler: compare the steps' parts, not their totals)",
    )
    args = parser.parse_args()
    print(f"machine: {machine_note()}")
    rng = random.Random(11)
    names = [f"node-{i:05d}" for i in range(args.nodes)]
    # Two bodies per node (the second a later snapshot with other readings), encoded up front: the loop below
    # measures the advisor, not the benchmark's JSON encoding.
    bodies = [
        [json.dumps(synthetic_snapshot(n, rng, processes_per_gpu=args.procs_per_gpu)).encode() for n in names]
        for _ in range(2)
    ]
    state = ClusterState(freeze_after_nodes=STATE_FREEZE_AFTER_NODES)  # as the service builds it
    gc.collect()
    gc.freeze()  # as `gpuadvisor advisor serve` does before serving
    gc.set_threshold(*GC_THRESHOLDS)
    tracked0, frozen0, rss0 = len(gc.get_objects()), gc.get_freeze_count(), rss_bytes()
    for body in bodies[0]:
        state.ingest(NodeSnapshot.model_validate_json(body), body)
    gc.collect()
    # Objects of the state, frozen or not: what a full collection would scan without the freezes.
    tracked = len(gc.get_objects()) + gc.get_freeze_count() - tracked0 - frozen0
    rss = rss_bytes() - rss0
    residents = sum(len(g.residents) for n in state.nodes.values() for g in n.gpus)
    print(
        f"state: {args.nodes} nodes, {residents} residents; {rss / args.nodes / 1e3:.1f} KB per node (RSS growth), "
        f"{tracked / args.nodes:.0f} tracked objects per node ({tracked / 1e6:.2f} M)"
    )

    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    started: list[float] = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses[info["generation"]].append(time.perf_counter() - started[0])

    prepare_turn_taking()  # as the service does before it serves
    scorer = Scorer(ScoringConfig(), clock=state.now)
    shapes = [PodRequest(gpus=k, workload=w) for k in (1, 2, 4, 8) for w in ("a", "b", "c")]
    shapes += [PodRequest(gpu_milli=m, workload=w) for m in (250, 500) for w in ("a", "b", "c", "d", "e", "f")]
    calls = 0
    gc.callbacks.append(on_gc)
    ingested = 0
    longest = 0.0
    steps_cpu: list[float] = []  # each step's CPU time: under load a step's wall time is mostly waiting for a core
    # the longest steps by CPU, named: (CPU seconds, order, what the step was, its profile if taken)
    named: list[tuple[float, int, str, cProfile.Profile | None]] = []
    changed_at = dict.fromkeys(names, 0)  # each node's last ingest (its place in the loop: 1, 2, ...)
    asked_at: dict[str, int] = {}  # the ingest count when each node was last a candidate
    frozen_start = gc.get_freeze_count()
    stop = time.perf_counter() + args.seconds
    t0 = time.perf_counter()
    while time.perf_counter() < stop:
        for name, body in zip(names, bodies[(ingested // args.nodes + 1) % 2], strict=True):  # alternate: every
            # ingest changes the node
            step, step_cpu = time.perf_counter(), time.thread_time()
            state.ingest(NodeSnapshot.model_validate_json(body), body)
            longest = max(longest, time.perf_counter() - step)
            steps_cpu.append(time.thread_time() - step_cpu)
            ingested += 1
            changed_at[name] = ingested
            _keep(named, steps_cpu[-1], len(steps_cpu), f"ingest of {name}", None)
            if ingested % 10 == 0:
                candidates = rng.sample(names, 500)
                pod = shapes[calls % len(shapes)]
                rows = scorer.vectors.computed_rows
                profile = cProfile.Profile(time.thread_time) if args.profile else None  # CPU, as the steps
                step, step_cpu = time.perf_counter(), time.thread_time()
                if profile is not None:
                    profile.enable()
                scorer.extender_priorities(pod, candidates, state.nodes)
                if profile is not None:
                    profile.disable()
                longest = max(longest, time.perf_counter() - step)
                steps_cpu.append(time.thread_time() - step_cpu)
                first = sum(1 for n in candidates if n not in asked_at)
                new = sum(1 for n in candidates if n in asked_at and changed_at[n] > asked_at[n])
                kind = f"{pod.whole_gpus} GPU(s)" if pod.whole_gpus else f"share {pod.share_milli} milli"
                what = (
                    f"prioritize #{calls} ({kind}, workload {pod.workload}): {first} candidates asked about for the "
                    f"first time, {new} changed since last asked, {scorer.vectors.computed_rows - rows} rows computed"
                )
                _keep(named, steps_cpu[-1], len(steps_cpu), what, profile)
                asked_at.update(dict.fromkeys(candidates, ingested))
                calls += 1
            if ingested % 1000 == 0 and time.perf_counter() >= stop:
                break
    elapsed = time.perf_counter() - t0
    gc.callbacks.remove(on_gc)
    print(f"ingest: {ingested} snapshots and {calls} prioritize calls in {elapsed:.1f} s (one core)")
    print(f"longest single step (one ingest or one prioritize, collections inside it included): {longest * 1e3:.1f} ms")
    step_p50, step_p99 = percentiles_ms(steps_cpu)
    print(
        f"  its CPU: longest step {max(steps_cpu) * 1e3:.1f} ms CPU; p50 {step_p50:.2f} ms, p99 {step_p99:.2f} ms "
        "(the longest step's CPU is the stall the work itself causes; its wall time adds waiting for a core)"
    )
    print("  the longest steps (CPU):")
    for cpu, _, what, _ in sorted(named, reverse=True):
        print(f"    {cpu * 1e3:.1f} ms: {what}")
    for cpu, _, what, profile in sorted(named, reverse=True)[:3]:
        if profile is not None:
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(14)
            print(f"\n  profile of the {cpu * 1e3:.1f} ms step, {what} (by own time):\n{out.getvalue()}")
    print(
        f"frozen objects per node: {frozen_start / args.nodes:.0f} before the ingest loop, "
        f"{gc.get_freeze_count() / args.nodes:.0f} after it"
    )
    every = [p for ps in pauses.values() for p in ps]
    if every:
        p50, p99 = percentiles_ms(every)
        worst = max(every) * 1e3
        print(
            f"collector pauses, all generations: {len(every)}, p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {worst:.1f} ms"
        )
    for generation, samples in pauses.items():
        if samples:
            p50, p99 = percentiles_ms(samples)
            print(
                f"  generation {generation}: {len(samples)} collections, p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
                f"max {max(samples) * 1e3:.1f} ms"
            )
    t = time.perf_counter()
    gc.collect()
    full_ms = (time.perf_counter() - t) * 1e3
    print(f"one full collection now: {full_ms:.1f} ms")
    gc.unfreeze()
    t = time.perf_counter()
    gc.collect()
    print(
        f"a full collection of everything (gc.unfreeze(), then gc.collect(); the state no longer runs one, "
        f"see bench/frozen_garbage.py): {(time.perf_counter() - t) * 1e3:.1f} ms"
    )
    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "kb_per_node": rss / args.nodes / 1e3,
                "collections": len(every),
                "max_pause_ms": max(every) * 1e3 if every else 0.0,
                "longest_step_ms": longest * 1e3,
                "longest_step_cpu_ms": max(steps_cpu) * 1e3,
                "step_cpu_p50_ms": step_p50,
                "full_collection_ms": full_ms,
            }
        )
    )


if __name__ == "__main__":
    main()
