"""The advisor's share of an extender call with whole Node objects (`nodeCacheCapable: false`): a 12 MB-class
ExtenderArgs body of real-sized GPU nodes (the Nodes of tests/kube/test_large_node_list.py), against the shipped
profile's `httpTimeout` (300 ms), which must also cover the scheduler sending the body and decoding the answer.

In-process, same body, side by side in one run: the filter's fast path (`fast_filter`: names and labels read per
Node, the passing Nodes handed back as the bytes sent), the filter route's own handling (the body validated into
pydantic models, the answer rebuilt from them, as every filter call was answered before the fast path), and the
prioritize fast path (`fast_prioritize`). Wall time per call, median and max.

Run from the repository root: python bench/extender_full_nodes.py [--megabytes 12.5] [--iterations 5].
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from advisor.api import create_app
from advisor.api.routes.extender import fast_filter, fast_prioritize, filter_
from advisor.api.schemas import ExtenderArgs
from advisor.cluster.state import ClusterState
from advisor.settings import AdvisorSettings
from tests.advisor.factories import v1_pod
from tests.kube.test_large_node_list import real_sized_node


def timed(call: Callable[[], object], iterations: int) -> dict[str, float]:
    seconds = []
    for _ in range(iterations):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return {"median_ms": round(statistics.median(seconds) * 1000, 1), "max_ms": round(max(seconds) * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=12.5, help="size of the ExtenderArgs body")
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()

    count = math.ceil(args.megabytes * 1e6 / len(json.dumps(real_sized_node("large-0000"))))
    items = [real_sized_node(f"large-{i:04d}") for i in range(count)]
    body = json.dumps({"Pod": v1_pod(gpus=1), "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}).encode()
    with tempfile.TemporaryDirectory() as tmp:
        settings = AdvisorSettings(db_url=f"sqlite:///{tmp}/a.db", no_kube=True, api_token="bench")
        app = create_app(settings, state=ClusterState())
        ctx = app.state.ctx  # no telemetry: the handling of the body itself

        def route() -> object:
            answer = filter_(ExtenderArgs.model_validate_json(body), ctx)
            return answer.model_dump_json(exclude_none=True)

        results = {
            "nodes": count,
            "body_megabytes": round(len(body) / 1e6, 2),
            "filter_fast_path": timed(lambda: fast_filter(body, ctx), args.iterations),
            "filter_route": timed(route, args.iterations),
            "prioritize_fast_path": timed(lambda: fast_prioritize(body, ctx), args.iterations),
            "http_timeout_ms": 300,
        }
    print(f"{count} nodes, ExtenderArgs body {results['body_megabytes']} MB")
    for key in ("filter_fast_path", "filter_route", "prioritize_fast_path"):
        figures = results[key]
        assert isinstance(figures, dict)
        print(f"  {key:22s} median {figures['median_ms']:8.1f} ms   max {figures['max_ms']:8.1f} ms")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
