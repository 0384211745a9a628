"""Digests of every placement answer: proof that a refactor of the placement core changed no number.

    .venv/bin/python bench/digest.py [--part all|scores|sim] [--records FILE]

`scores`: two in-process advisor apps (the service's default settings, and a packing profile whose task mix gives
CPU/memory, per-model task mixes and first-of-equals) over a fixed 160-node cluster (bench/cluster.py's synthetic
nodes plus nodes with shared GPUs, unhealthy GPUs, CPU/memory known on half of them, a stale one) answer a fixed
list of pods (whole GPUs 1-8, shares, GPU-memory requests, GPU-model constraints, gangs, CPU-heavy and GPU-less pods)
on `/v1/score` (full and `detail: brief`, with and without an assumed pod), `/extender/prioritize`,
`/extender/filter`, `/volcano/prioritize` and `/v1/allocate`, each request twice (cold, then warm: the memo and the
score vectors must answer the same).

`sim`: the simulator figures the evaluation reports, with the advisor policy only (the others do not call the
scorer): experiment 1 seed 0 (`simulate --mode fragmentation` on openb's default trace), one experiment-2 point
(Gavel trace msr_vc_6c71a0 at the published load, seed 1, advisor and oracle, job lengths from history) and the FGD
suite's five traces at seed 1 (the packing profile, the authors' node order), every figure but run times; each
one's digest is printed as soon as it is known, the experiment-2 point last (the longest).

Prints one SHA-256 per part and, last, a JSON line of them; `--records` writes every answer (to diff two runs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from cluster import synthetic_snapshot, v1_pod

ROOT = Path(__file__).resolve().parents[1]
SHARED = next(
    (p / "shared" / "data" for p in ROOT.parents if (p / "shared" / "data" / "openb").exists()),
    ROOT.parent / "shared" / "data",
)
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
GIB = 1 << 30


def _cluster() -> list[dict[str, Any]]:
    rng = random.Random(11)
    snaps = [synthetic_snapshot(f"node-{i:04d}", rng) for i in range(120)]
    for i in range(40):
        # Shared GPUs: small residents on most GPUs, so shares and GPU-memory requests have choices to make.
        snaps.append(synthetic_snapshot(f"shared-{i:03d}", rng, gpus=(4, 8)[i % 2], processes_per_gpu=1))
        for gpu in snaps[-1]["gpus"]:
            for proc in gpu["processes"]:
                proc["memory_used_bytes"] = rng.randrange(1, 12) * GIB
            gpu["memory_used_bytes"] = sum(p["memory_used_bytes"] for p in gpu["processes"])
    for snap in snaps:
        snap["timestamp"] = NOW.isoformat()
    snaps[3]["timestamp"] = datetime(2026, 11, 27, 9, 0, tzinfo=UTC).isoformat()  # stale
    return snaps


def _pods() -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = []
    for gpus in (1, 2, 3, 4, 8):
        pods.append(v1_pod(gpus))
    for milli in (100, 250, 500, 750, 900):
        pods.append(v1_pod(0, share_milli=milli))
    memory = v1_pod(0, share_milli=300)
    memory["metadata"]["annotations"]["gpuadvisor.io/gpu-memory-bytes"] = str(20 * GIB)
    pods.append(memory)
    hami = v1_pod(1)
    hami["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "30000"
    pods.append(hami)
    model = v1_pod(2)
    model["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    pods.append(model)
    for gpus, gang in ((2, "job-a"), (1, "job-b")):
        pod = v1_pod(gpus)
        pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = gang
        pods.append(pod)
    cpu_heavy = v1_pod(1)
    cpu_heavy["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "60", "memory": "400Gi"}
    pods.append(cpu_heavy)
    no_gpu = v1_pod(0)
    del no_gpu["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    pods.append(no_gpu)
    for i, workload in enumerate(("bert-base-bs32", "gpt2-bs8", "never-profiled")):
        pod = v1_pod((1, 4, 0)[i], share_milli=None if i < 2 else 400)
        pod["metadata"]["labels"]["gpuadvisor.io/workload"] = workload
        pods.append(pod)
    return pods


@contextmanager
def _app(tmp: Path, env: dict[str, Any]) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    from advisor.api import create_app
    from advisor.cluster.state import ClusterState
    from advisor.settings import AdvisorSettings

    settings = AdvisorSettings(
        db_url=f"sqlite:///{tmp}-digest.db",
        no_kube=True,
        allow_unauthenticated_writes=True,
        staleness_seconds=600,
        **env,
    )
    state = ClusterState(clock=lambda: NOW.timestamp() + 5)
    with TestClient(create_app(settings, state=state)) as client:
        yield client


PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    "packing": {
        "weight_affinity": 0.0,
        "weight_interference": 0.0,
        "weight_jct": 0.0,
        "extender_span_points": 20.0,
        "extender_first_of_equals": True,
        "packing_best_fit_share": 0.005,
        "packing_gradient_steps": 100,
        "packing_cpu_balance": 0.1,
        "packing_gradient_residual": 0.05,
        "task_mix": [
            [1, 1000, 0.4, 8000, 32768],
            [1, 500, 0.2, 4000, 16384],
            [8, 1000, 0.2, 64000, 262144],
            [0, 0, 0.2, 16000, 65536],
        ],
        "model_task_mix": {"A100": [[2, 1000, 0.6, 16000, 65536], [1, 1000, 0.4, 8000, 32768]]},
    },
}


def score_records() -> list[Any]:
    from advisor.cluster.state import PodResources

    snaps = _cluster()
    names = [s["node"] for s in snaps] + ["never-seen"]
    records: list[Any] = []
    with tempfile.TemporaryDirectory() as tmp:
        for profile, env in PROFILES.items():
            with _app(Path(tmp) / profile, env) as client:
                for snap in snaps:
                    got = client.post("/v1/telemetry", json=snap)
                    assert got.status_code == 202, got.text
                state = client.app.state.ctx.state
                known = [s["node"] for s in snaps[::2]]
                state.replace_allocatable(dict.fromkeys(known, (64000, 512 * 1024)))
                held = sorted(
                    {(r.pod, n) for n in known for g in state.nodes[n].gpus for r in g.residents if r.pod != "host"}
                )
                state.replace_pods([], [PodResources(pod, node, 2000 + 500 * (i % 7), 16 * 1024) for i, (pod, node)
                                        in enumerate(held)])  # fmt: skip
                volcano_nodes = [{"Name": n} for n in names]
                pods = _pods()
                for i, pod in enumerate(pods):
                    # a scheduler plugin's assumed pod: the next one of the list, placed on a node of the batch
                    placed = [{"node": names[(5 * i) % 120], "pod": pods[(i + 1) % len(pods)]}]
                    for attempt in ("cold", "warm"):
                        tag = [profile, i, attempt]
                        for path, body in (
                            ("/extender/prioritize", {"Pod": pod, "Nodes": None, "NodeNames": names}),
                            ("/extender/filter", {"Pod": pod, "Nodes": None, "NodeNames": names}),
                            ("/volcano/prioritize", {"task": {"Pod": pod}, "nodes": volcano_nodes}),
                            ("/v1/score", {"pod": pod, "nodes": names, "unknown_nodes": "neutral"}),
                            ("/v1/score", {"pod": pod, "nodes": names, "unknown_nodes": "neutral", "detail": "brief"}),
                            ("/v1/score", {"pod": pod, "nodes": names, "unknown_nodes": "neutral", "assumed": placed}),
                            (
                                "/v1/score",
                                {
                                    "pod": pod,
                                    "nodes": names,
                                    "unknown_nodes": "neutral",
                                    "assumed": placed,
                                    "detail": "brief",
                                },
                            ),
                            ("/v1/allocate", {"pod": pod, "node": names[(7 * i) % 120]}),
                        ):
                            got = client.post(path, json=body)
                            records.append([*tag, path, got.status_code, got.json()])
    return records


def _strip_seconds(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_seconds(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_strip_seconds(v) for v in value]
    return value


def _simulate(*args: str) -> Any:
    command = [sys.executable, "-m", "advisor.cli", "simulate", *args, "--json"]
    done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
    return _strip_seconds(json.loads(done.stdout)["policies"])


def sim_records() -> list[Any]:
    from sim_gavel import CLUSTER, history_of, split_traces

    from advisor.sim.baselines import authors_node_rank, fragmentation_milli, typical_pods
    from advisor.sim.loaders import load_cluster, load_trace
    from advisor.sim.model import Pod
    from advisor.sim.packing import MAX_ARRIVED_RATIO, SEQUENCES, run_fragmentation
    from advisor.sim.run import fragmentation_policy, fragmentation_scoring_config, with_model_task_mixes

    openb = SHARED / "openb"
    records: list[Any] = []
    records.append(
        [
            "experiment 1 seed 0",
            _simulate(
                "--cluster",
                str(openb / "openb_node_list_gpu_node.csv"),
                "--trace",
                str(openb / "openb_pod_list_default.csv"),
                "--policies",
                "advisor",
                "--mode",
                "fragmentation",
                "--seed",
                "0",
            ),
        ]
    )
    _done(records[-1])
    cluster = load_cluster(openb / "openb_node_list_gpu_node.csv")
    for name in ("default", "gpushare40", "multigpu30", "gpuspec20", "cpu100"):
        pods = [p for p in load_trace(openb / f"openb_pod_list_{name}.csv") if isinstance(p, Pod)]
        typical = typical_pods(pods, coverage_ratio=0.95)
        config = with_model_task_mixes(cluster, pods, fragmentation_scoring_config(pods))
        sequence = SEQUENCES["authors"](pods, cluster.total_gpus, 1, MAX_ARRIVED_RATIO)
        policy = fragmentation_policy("advisor", cluster, config, 1, typical)
        result = run_fragmentation(
            cluster,
            pods,
            sequence,
            policy,
            partial(fragmentation_milli, typical, cluster),
            node_rank=authors_node_rank(cluster, 1),
        )
        figures = {k: v for k, v in asdict(result).items() if k != "seconds"}
        records.append([f"fgd suite {name} seed 1", figures])
        _done(records[-1])
    with tempfile.TemporaryDirectory() as tmp:
        traces = split_traces(SHARED / "gavel" / "traces_seed0_top3.csv", Path(tmp), 1.0)
        trace = next(t for t in traces if t.stem == "msr_vc_6c71a0")
        records.append(
            [
                "experiment 2 msr_vc_6c71a0 x1 seed 1",
                _simulate(
                    "--cluster",
                    str(CLUSTER),
                    "--trace",
                    str(trace),
                    "--throughputs",
                    str(SHARED / "gavel" / "simulation_throughputs.json"),
                    "--policies",
                    "advisor,oracle",
                    "--mode",
                    "jct",
                    "--seed",
                    "1",
                    "--advisor-knowledge",
                    "cold",
                    "--advisor-history",
                    str(history_of(trace, traces, Path(tmp))),
                ),
            ]
        )
    _done(records[-1])
    return records


def _done(record: list[Any]) -> None:
    """Each simulator figure's own digest as soon as it is known (a long run cut short keeps what it finished)."""
    print(f"  {record[0]}: sha256 {digest(record[1:])}", flush=True)


def digest(records: list[Any]) -> str:
    return hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("all", "scores", "sim"), default="all")
    parser.add_argument("--records", type=Path, default=None, help="write every answer here (JSON)")
    args = parser.parse_args()
    parts = ("scores", "sim") if args.part == "all" else (args.part,)
    out: dict[str, str] = {}
    everything: dict[str, list[Any]] = {}
    for part in parts:
        records = score_records() if part == "scores" else sim_records()
        everything[part] = records
        out[part] = digest(records)
        print(f"{part}: {len(records)} records, sha256 {out[part]}", flush=True)
    if args.records is not None:
        args.records.write_text(json.dumps(everything, sort_keys=True, indent=1))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
