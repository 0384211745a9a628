"""Benchmark: what the collector's pod source costs per cycle where the kubelet answers (issue 40).

Every cycle the collector asks the kubelet's pod-resources API for the node's pods (`PodResourcesClient.list`) and
decodes the answer with our own reader (`collector.kubelet_pods`). This measures that call against
podresources-standin (upstream's generated server, built by `make kube-bin`) for a node of `--pods` pods of which
`--gpu-pods` hold a GPU each, and the decode alone, on the same bytes:

    .venv/bin/python bench/pod_source.py                     # 110 pods (the kubelet's default maximum), 8 with GPUs
    .venv/bin/python bench/pod_source.py --pods 250 --calls 500

Last line: JSON {"pods", "gpu_pods", "answer_bytes", "list_ms_p50", "list_ms_p95", "decode_ms_p50", ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.baseline_trees import print_load  # noqa: E402
from collector.kubelet_pods import decode_list_response  # noqa: E402
from collector.podresources import LIST_METHOD, PodResourcesClient  # noqa: E402


def node_pods(pods: int, gpu_pods: int) -> list[dict[str, object]]:
    """Pods as a busy node's kubelet lists them: two containers each, CPU IDs and memory on all, one GPU on some."""
    listed = []
    for i in range(pods):
        devices = [{"resource_name": "nvidia.com/gpu", "device_ids": [f"GPU-{i:08x}-0000-4000-8000-000000000000"]}]
        main = {"name": "main", "cpu_ids": [i % 64, (i + 1) % 64], "devices": devices if i < gpu_pods else []}
        sidecar = {"name": "sidecar", "memory": [{"memory_type": "memory", "size": 1 << 30}]}
        listed.append({"name": f"pod-{i}", "namespace": f"team-{i % 7}", "containers": [main, sidecar]})
    return listed


def standin_binary() -> Path:
    """podresources-standin from $GPUADVISOR_KUBE_BIN, else from the build cache (`k8s/build.sh --cached`)."""
    folder = os.environ.get("GPUADVISOR_KUBE_BIN", "")
    if not folder:
        built = subprocess.run(
            [str(ROOT / "k8s" / "build.sh"), "--cached"], capture_output=True, text=True, check=False
        )
        lines = built.stdout.strip().splitlines()
        folder = lines[-1] if built.returncode == 0 and lines else ""
    return Path(folder) / "podresources-standin"


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--gpu-pods", type=int, default=8)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    if args.pods < 1 or not 0 <= args.gpu_pods <= args.pods or args.calls < 2:
        parser.error("expected --pods >= 1, 0 <= --gpu-pods <= --pods, --calls >= 2")
    standin = standin_binary()
    if not standin.is_file():
        print("error: podresources-standin not built: run `make kube-bin`", file=sys.stderr)
        raise SystemExit(2)
    print_load()
    with tempfile.TemporaryDirectory(prefix="kubelet-") as folder:
        socket_path, state = Path(folder) / "kubelet.sock", Path(folder) / "state.json"
        state.write_text(json.dumps({"pod_resources": node_pods(args.pods, args.gpu_pods)}))
        argv = [str(standin), f"--socket={socket_path}", f"--state={state}"]
        server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert server.stdout is not None
            assert server.stdout.readline().strip() == "ready"
            client = PodResourcesClient(socket_path, timeout_seconds=10)
            list_ms = []
            for _ in range(args.calls):
                started = time.perf_counter()
                listed = client.list()
                list_ms.append((time.perf_counter() - started) * 1000)
            assert len(listed) == args.pods
            assert sum(p.holds_gpu() for p in listed) == args.gpu_pods
            raw = client._list_call()(None, timeout=10)  # the bytes themselves, for the decode-only figure
            client.close()
        finally:
            server.terminate()
            server.wait(timeout=10)
    decode_ms = []
    for _ in range(args.calls):
        started = time.perf_counter()
        decode_list_response(raw)
        decode_ms.append((time.perf_counter() - started) * 1000)
    result = {
        "method": LIST_METHOD,
        "pods": args.pods,
        "gpu_pods": args.gpu_pods,
        "calls": args.calls,
        "answer_bytes": len(raw),
        "list_ms_p50": round(statistics.median(list_ms), 3),
        "list_ms_p95": round(percentile(list_ms, 95), 3),
        "decode_ms_p50": round(statistics.median(decode_ms), 3),
        "decode_ms_p95": round(percentile(decode_ms, 95), 3),
    }
    print(f"{args.pods} pods ({args.gpu_pods} with a GPU), answer {len(raw)} bytes")
    print(f"List + decode: p50 {result['list_ms_p50']} ms, p95 {result['list_ms_p95']} ms")
    print(f"decode alone:  p50 {result['decode_ms_p50']} ms, p95 {result['decode_ms_p95']} ms")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
