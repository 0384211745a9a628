"""Benchmark: CPU time and peak RSS of one collector cycle (goal: ≤ 10 ms CPU at 8 GPUs × 64 processes).

A cycle = NVML reads through the real nvidia-ml-py bindings against the stand-in libnvidia-ml.so.1 (tests/support),
cgroup parsing of every process from a fixture /proc tree, pod lookup, the NodeSnapshot, and building every metric
family. Rendering the exposition text happens once per Prometheus scrape (every 15-30 s), not per cycle, and is
reported separately. Each case runs in a fresh interpreter so its peak RSS is its own.

    .venv/bin/python bench/collector_cycle.py            # all cases
    .venv/bin/python bench/collector_cycle.py --cycles 50 --case 8x64
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the stand-in library's helper lives in tests/support

from collector.agent import CollectorAgent  # noqa: E402
from collector.cli import render_prometheus  # noqa: E402
from collector.exporter import SnapshotCollector  # noqa: E402
from collector.pods import PodInfo, StaticPods  # noqa: E402
from tests.support.fake_nvml import (  # noqa: E402
    FakeGpu,
    FakeNvmlConfig,
    FakeProcess,
    FakeSample,
    build_library,
    fake_nvml_env,
    write_config,
)

# (GPUs, processes on the node); the last case reads "8 × 64" as 64 processes on every GPU.
CASES = {"8x64": (8, 64), "16x256": (16, 256), "8x512": (8, 512)}
GIB = 1024**3


def _setup(workdir: Path, gpus: int, processes: int) -> tuple[dict[str, str], Path, StaticPods]:
    proc = workdir / "proc"
    pods: dict[str, PodInfo] = {}
    per_gpu: list[list[FakeProcess]] = [[] for _ in range(gpus)]
    samples: list[list[FakeSample]] = [[] for _ in range(gpus)]
    for n in range(processes):
        pid = 10_000 + n
        pod_uid = str(uuid.UUID(int=n + 1))
        container_id = f"{n:064x}"
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(
            "0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{pod_uid.replace('-', '_')}.slice/cri-containerd-{container_id}.scope\n"
        )
        pods[pod_uid] = PodInfo(
            uid=pod_uid,
            namespace="ml",
            name=f"train-{n}",
            labels={"gpuadvisor.io/workload": "resnet50-bs64"},
            owner_kind="Job",
            owner_name=f"train-{n // 4}",
            containers={container_id: "main"},
        )
        per_gpu[n % gpus].append(FakeProcess(pid, GIB))
        samples[n % gpus].append(FakeSample(pid, 40, timestamp_us=1_000_000))
    config = FakeNvmlConfig(
        gpus=[
            FakeGpu(
                uuid=f"GPU-{i:08d}",
                memory_used_bytes=len(per_gpu[i]) * GIB,
                utilization_percent=80,
                power_milliwatts=300_000,
                energy_millijoules=10**9,
                processes=per_gpu[i],
                samples=samples[i],
                nvlink_peers=[i ^ 1] if i ^ 1 < gpus else [],
            )
            for i in range(gpus)
        ]
    )
    env = fake_nvml_env(build_library(), write_config(config, workdir / "nvml.conf"))
    return env, proc, StaticPods(pods)


def run_case(name: str, cycles: int) -> dict[str, float | int | str]:
    gpus, processes = CASES[name]
    with tempfile.TemporaryDirectory() as tmp:
        env, proc, pods = _setup(Path(tmp), gpus, processes)
        os.environ.update(env)
        from collector.nvml import NvmlBackend

        backend = NvmlBackend()
        agent = CollectorAgent(backend=backend, node="bench", proc_root=proc, pods=pods)
        families = SnapshotCollector(lambda: agent.latest, agent.stats, agent.node)
        for _ in range(5):  # warm-up: first reads load identities and topology
            agent.collect_once()
            list(families.collect())
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        for _ in range(cycles):
            snapshot = agent.collect_once()
            metric_families = list(families.collect())
        cpu_ms = (time.process_time() - cpu_start) * 1000 / cycles
        wall_ms = (time.perf_counter() - wall_start) * 1000 / cycles
        scrape_start = time.process_time()
        for _ in range(cycles):
            text = render_prometheus(agent)
        scrape_ms = (time.process_time() - scrape_start) * 1000 / cycles
        backend.close()
    attributed = sum(1 for g in snapshot.gpus for p in g.processes if p.pod is not None and p.pod.name)
    assert attributed == processes, f"only {attributed} of {processes} processes attributed"
    return {
        "case": name,
        "gpus": gpus,
        "processes": processes,
        "cycles": cycles,
        "cpu_ms_per_cycle": round(cpu_ms, 2),
        "wall_ms_per_cycle": round(wall_ms, 2),
        "metric_families": len(metric_families),
        "scrape_cpu_ms": round(scrape_ms, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "metrics_bytes": len(text),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), help="run one case in this process (default: every case)")
    parser.add_argument("--cycles", type=int, default=200)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.cycles)))
        return
    print(
        f"{'case':>8} {'GPUs':>5} {'procs':>6} {'CPU ms/cycle':>13} {'wall ms/cycle':>14} "
        f"{'scrape CPU ms':>14} {'peak RSS MB':>12}"
    )
    for name in CASES:
        out = subprocess.run(
            [sys.executable, __file__, "--case", name, "--cycles", str(args.cycles)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        row = json.loads(out.strip().splitlines()[-1])
        print(
            f"{row['case']:>8} {row['gpus']:>5} {row['processes']:>6} {row['cpu_ms_per_cycle']:>13} "
            f"{row['wall_ms_per_cycle']:>14} {row['scrape_cpu_ms']:>14} {row['peak_rss_mb']:>12}"
        )


if __name__ == "__main__":
    main()
