"""The advisor's own Prometheus metrics (one registry per app) and the ASGI middleware that times every request.

Per-app `CollectorRegistry` rather than the global one, so that several apps in one process (tests, benchmarks)
never share or collide on series. A plain ASGI middleware (not `BaseHTTPMiddleware`) keeps the per-request cost
to a few microseconds on the scheduler's hot path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Fine buckets below 10 ms: the extender's goal is p99 <= 5 ms.
MODEL_KINDS = ("interference", "jct")
LATENCY_BUCKETS_SECONDS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
# 1 KiB … 64 MiB: a scheduler extender call with node names is a few KiB; with full Node objects
# (nodeCacheCapable: false) it grows to megabytes with the cluster.
BODY_BUCKETS_BYTES = tuple(float(1 << shift) for shift in range(10, 27, 2))


class AdvisorMetrics:
    """Every series the advisor exports on `/metrics`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], Any] = {}
        r = self.registry
        self.request_duration = Histogram(
            "gpuadvisor_advisor_request_duration_seconds",
            "Time to answer one HTTP request, by route template.",
            ["route", "method", "status"],
            buckets=LATENCY_BUCKETS_SECONDS,
            registry=r,
        )
        self.request_body = Histogram(
            "gpuadvisor_advisor_request_body_bytes",
            "Size of one HTTP request's body (its Content-Length), by route template.",
            ["route", "method"],
            buckets=BODY_BUCKETS_BYTES,
            registry=r,
        )
        self.scores = Counter(
            "gpuadvisor_advisor_scores",
            "Node scores served, by endpoint and outcome (scored, infeasible, unknown).",
            ["endpoint", "outcome"],
            registry=r,
        )
        self.score_answers = Counter(
            "gpuadvisor_advisor_score_answers",
            "/v1/score answers to requests with `since` (a scheduler plugin), by kind: `delta` (only the entries "
            "changed since the caller's token) or `full` (every candidate: no, an old or another shape's token).",
            ["kind"],
            registry=r,
        )
        self.score_state_reads = Counter(
            "gpuadvisor_advisor_score_state_reads",
            "Candidates' node states looked up by /v1/score answers to requests with `since`: every candidate on a "
            "full answer or where the node table's change log could not be followed, else only those logged since "
            "the caller's last answer (per call about the nodes bound or reported since; far more means the delta "
            "check re-reads every candidate).",
            registry=r,
        )
        self.fallbacks = Counter(
            "gpuadvisor_advisor_fallbacks",
            "Scoring calls that used a heuristic because no model of this kind (interference, jct) is promoted.",
            ["kind"],
            registry=r,
        )
        self.unknown_gpu_models = Counter(
            "gpuadvisor_advisor_unknown_gpu_models",
            "Answers about a GPU model that is not in the data-sheet table (advisor.gpus), by endpoint: its speed and "
            "JCT are reported unknown, never taken from another GPU.",
            ["endpoint"],
            registry=r,
        )
        self.snapshots = Counter(
            "gpuadvisor_advisor_snapshots",
            "NodeSnapshots received, by result: accepted, out_of_order (older than the one held, dropped), future "
            "(stamped beyond the allowed clock skew, refused), invalid (refused), foreign_node (for another node "
            "than the sender's credential, refused).",
            ["result"],
            registry=r,
        )
        self.ingest_handoffs = Counter(
            "gpuadvisor_advisor_ingest_connections_handed_off",
            "Collector connections handed to an ingest worker after their first snapshot (GPUADVISOR_INGEST_WORKERS).",
            registry=r,
        )
        self.ingest_workers = Gauge(
            "gpuadvisor_advisor_ingest_workers",
            "Ingest workers serving collectors' connections now (started, and not exited since).",
            registry=r,
        )
        self.ingest_worker_exits = Counter(
            "gpuadvisor_advisor_ingest_worker_exits",
            "Ingest workers that exited while the advisor ran; each is restarted, its connections reconnect.",
            registry=r,
        )
        self.refused = Counter(
            "gpuadvisor_advisor_requests_refused",
            'Requests and connections turned away by the advisor\'s limits (docs/operations.md, "Limits"), by reason: '
            "memory_budget (503), connections (503, over the cap), header_timeout, body_timeout (408, closed), "
            "header_too_large (431).",
            ["reason"],
            registry=r,
        )
        self.nodes = Gauge(
            "gpuadvisor_advisor_nodes",
            "Nodes in the advisor's state, by freshness (fresh, stale).",
            ["freshness"],
            registry=r,
        )
        self.allocations = Gauge(
            "gpuadvisor_advisor_pod_allocations",
            "GPU-holding pods known from the Kubernetes API.",
            registry=r,
        )
        self.watch_errors = Counter(
            "gpuadvisor_advisor_kube_watch_errors",
            "Failed lists or watches of the Kubernetes API, by watch (pods, nodes, pending) and kind (temporary, "
            "permanent); each is retried with backoff.",
            ["watch", "kind"],
            registry=r,
        )

    def refresh_nodes(self, received_at_seconds: list[float], now_seconds: float, staleness_seconds: float) -> None:
        """Set the node gauges (called on every scrape, so they never lag the state)."""
        fresh = sum(1 for t in received_at_seconds if now_seconds - t <= staleness_seconds)
        self.nodes.labels("fresh").set(fresh)
        self.nodes.labels("stale").set(len(received_at_seconds) - fresh)

    def refuse(self, reason: str) -> None:
        """One request or connection turned away by a limit (`advisor.api.limits`)."""
        self.refused.labels(reason).inc()

    def set_allocations(self, count: int) -> None:
        self.allocations.set(count)

    def count_watch_error(self, watch: str, kind: str) -> None:
        self.watch_errors.labels(watch, kind).inc()

    def child(self, metric: MetricWrapperBase, *labels: str) -> Any:
        """`metric.labels(*labels)`, kept: `labels` costs microseconds, and the scheduler's routes count and time
        every call under the same few label sets."""
        key = (metric, labels)
        got = self._children.get(key)
        if got is None:
            got = self._children[key] = metric.labels(*labels)
        return got

    def count_scores(self, endpoint: str, scored: int, infeasible: int, unknown: int) -> None:
        if scored:
            self.child(self.scores, endpoint, "scored").inc(scored)
        if infeasible:
            self.child(self.scores, endpoint, "infeasible").inc(infeasible)
        if unknown:
            self.child(self.scores, endpoint, "unknown").inc(unknown)

    def count_fallbacks(self, models: dict[str, str]) -> None:
        """Count the learned-model questions (interference, jct) that a heuristic answered.

        GPU speed is always the data-sheet heuristic and a workload's usage comes from profiles, not a model: neither
        is counted, so the series means "a model could be trained and is not there".
        """
        for kind in MODEL_KINDS:
            if models.get(kind, "").startswith("heuristic"):
                self.child(self.fallbacks, kind).inc()


class TimingMiddleware:
    """Observe every HTTP request's duration, and its body's declared size, under its route template (unmatched
    paths as `<unmatched>`)."""

    def __init__(self, app: ASGIApp, *, metrics: AdvisorMetrics, clock: Callable[[], float] = time.perf_counter):
        self.app = app
        self.metrics = metrics
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = self.clock()
        status = [500]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path", None) or "<unmatched>"
            metrics = self.metrics
            method = scope["method"]
            metrics.child(metrics.request_duration, template, method, str(status[0])).observe(self.clock() - start)
            length = _content_length(scope)
            if length is not None:
                metrics.child(metrics.request_body, template, method).observe(length)


def _content_length(scope: Scope) -> int | None:
    """The request's Content-Length header, None when absent or not a number (a chunked body)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None
