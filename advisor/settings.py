"""Settings of the advisor service. Built in entrypoints and the app factory, never at import time."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from advisor.placement.config import SCORING_DEFAULTS, check_knob
from advisor.placement.fragmentation import TaskMix, TaskMixError, parse_task_mix
from advisor.placement.types import ScoringInputError
from profiler.settings import DEFAULT_DB_URL

PARSE_EXPANSION = 16
"""Bytes of memory a request may take per byte of its body while it is parsed and answered (advisor.api.limits):
issue 40 measured 14x (RSS) for a kube-scheduler NodeList on `/extender/prioritize`; tracemalloc sees 6x for
msgspec + pydantic alone."""
LARGE_SHARE = 0.75
"""The share of the request memory budget that large bodies (> 1 MiB) may hold together; the rest is kept for small
ones, so a flood of large bodies never starves kube-scheduler's 66 KB requests."""


class AdvisorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUADVISOR_", extra="ignore")

    db_url: str = DEFAULT_DB_URL
    # Bearer token of the write routes (telemetry ingest, training, trial runs); empty means none. Without one they
    # answer 401, unless allow_unauthenticated_writes opens them (a local test stack, never a shared cluster).
    api_token: str | None = None
    allow_unauthenticated_writes: bool = False
    # The only tokens `POST /v1/models/train` and `POST /v1/trialruns` take when set (unset: api_token), so that the
    # telemetry token every node holds neither trains models nor runs images (advisor.api.auth; docs/operations.md).
    training_token: str | None = None
    trialrun_token: str | None = None
    # Who may push a node's snapshot (docs/operations.md, "Tokens and credentials"): `token`, anyone with
    # api_token (any node); `serviceaccount`, a collector's own ServiceAccount token (audience telemetry_audience,
    # of collector_service_account), checked with a TokenReview, for the node its pod runs on only.
    telemetry_auth: Literal["token", "serviceaccount"] = "token"
    collector_service_account: str = "system:serviceaccount:gpuadvisor-collector:gpuadvisor-collector"
    telemetry_audience: str = "gpuadvisor"
    # A node that has sent no snapshot for this long leaves the state, its /metrics series and its caches (a node
    # that was drained, scaled away or renamed); it comes back with its next snapshot.
    node_expiry_seconds: float = Field(default=600.0, gt=0)
    # Snapshots stamped further than this ahead of this replica's clock are refused (422): one snapshot from a
    # collector with a broken clock would otherwise freeze its node, as every later real snapshot looks older.
    max_clock_skew_seconds: float = Field(default=300.0, gt=0)
    # One `gpuadvisor_advisor_gpu_link_info` series per GPU pair of every node (the node-detail dashboard's link
    # matrix): 28 series per 8-GPU node, most of /metrics in a large cluster, hence off unless asked for.
    export_gpu_links: bool = False
    # Largest request body of the scheduler routes (/extender/*, /volcano/*), from what real requests need
    # (docs/operations.md, "Limits"): kube-scheduler without nodeCacheCapable sends whole Node objects, 22.7 MB for
    # 5,000 real-sized nodes (4.5 KB each; with nodeCacheCapable, as deploy/ sets, 66 KB of names); Volcano's 5,000
    # NodeInfos without tasks are 13.4 MB, 500 with 8 tasks each 12.8 MB. The native API (/v1/*) takes at most 1 MiB,
    # a snapshot 4 MiB. Raising it needs request_memory_budget_bytes raised with it.
    scheduler_body_limit_bytes: int = Field(default=24 * 1024 * 1024, ge=1024 * 1024)
    # Memory the request bodies in flight may take together while parsed, at 16x their size (advisor.api.limits):
    # 512 MiB admits one 24 MiB scheduler body at a time (large bodies hold at most 3/4 of it) and keeps 128 MiB for
    # small bodies. A body that does not fit now is answered 503 with Retry-After. At least 16x the body limit / 0.75.
    request_memory_budget_bytes: int = Field(default=512 * 1024 * 1024, ge=64 * 1024 * 1024)
    # Open client connections per process (`advisor serve`); one more is answered 503 and closed. Lowered to the
    # descriptor limit (ulimit -n) less 64. Each collector keeps one connection to every replica.
    max_connections: int = Field(default=10_000, ge=16)
    # A request's line and headers must arrive within this long of the connection's start (or of the request's
    # first byte on a kept-alive connection), its body within body_timeout_seconds of its headers; else 408, closed.
    header_timeout_seconds: float = Field(default=10.0, gt=0)
    body_timeout_seconds: float = Field(default=30.0, gt=0)
    # Processes that serve the collectors' connections besides the one that holds the state (`advisor serve` only;
    # docs/design.md §5.1): None = 1 where this process may use two cores or more, else 0 (everything in one process).
    ingest_workers: int | None = Field(default=None, ge=0, le=64)
    # `advisor serve` only: a port where a process of its own answers the kubelet's liveness probe (`GET /healthz`,
    # advisor.api.liveness), so that a 20 MB scheduler body or a collection on the serving process cannot delay it;
    # it fails once the serving event loop has not run for liveness_stall_seconds. None: no such process.
    liveness_port: int | None = Field(default=None, ge=1, le=65535)
    liveness_stall_seconds: float = Field(default=10.0, gt=0)
    model_dir: Path = Path("./.gpuadvisor/models")
    # How often each replica asks the registry which model versions are promoted, and loads them when they changed
    # (a training on another replica, `gpuadvisor models rollback`, `models train --db`); 0 = only at start-up and
    # after this replica's own trainings.
    model_reload_seconds: float = Field(default=60.0, ge=0)
    no_kube: bool = False
    # The scorer's knobs (`ScoringConfig.from_settings` reads them by name): defaults from `ScoringConfig`, each
    # number checked by its rule there (`advisor.placement.config.KNOB_RULES`).
    staleness_seconds: float = SCORING_DEFAULTS["staleness_seconds"]
    strict_staleness: bool = SCORING_DEFAULTS["strict_staleness"]
    weight_packing: float = SCORING_DEFAULTS["weight_packing"]
    weight_affinity: float = SCORING_DEFAULTS["weight_affinity"]
    weight_interference: float = SCORING_DEFAULTS["weight_interference"]
    weight_jct: float = SCORING_DEFAULTS["weight_jct"]
    unknown_node_score: float = SCORING_DEFAULTS["unknown_node_score"]
    # How far (in points of the 0..100 score) a node may be behind the batch's best before the extender's integer
    # drops from 10 to 1: one step per span / 10 points. Smaller = the advisor's ranking weighs more against
    # kube-scheduler's own scores (docs/advisor.md, "Scoring" and "Profiles").
    extender_span_points: float = SCORING_DEFAULTS["extender_span_points"]
    # Of the nodes at the extender's highest integer only the first by name keeps it, the others drop one step, so
    # kube-scheduler does not draw among nodes the advisor rates equal: they fill one after another (the packing
    # profile; docs/advisor.md, "Profiles").
    extender_first_of_equals: bool = SCORING_DEFAULTS["extender_first_of_equals"]
    # The share of the packing component that prefers the fuller node; the rest is the fragmentation gradient
    # (docs/advisor.md, "Scoring"; the packing profile sets 0.1).
    packing_best_fit_share: float = SCORING_DEFAULTS["packing_best_fit_share"]
    # Floor the fragmentation gradient to this many steps (0: continuous), as the FGD authors' integer score floors it
    # to 100: nodes whose fragmentation changes nearly equally tie on it (the packing profile sets 100; docs/advisor.md,
    # "Scoring").
    packing_gradient_steps: int = SCORING_DEFAULTS["packing_gradient_steps"]
    # Within best fit, how much a node whose CPU left does not match what its GPUs left need (at the task mix's CPU
    # per GPU; CPU read at the task mix's grain) loses, per the CPU all its GPUs would need (0: off; the packing profile
    # sets 0.1; docs/advisor.md, "Scoring"). Needs a task mix with CPU.
    packing_cpu_balance: float = SCORING_DEFAULTS["packing_cpu_balance"]
    # With stepped gradients: the share of what the steps floor off that is added back beside best fit (0: none; the
    # packing profile sets 0.05; docs/advisor.md, "Scoring").
    packing_gradient_residual: float = SCORING_DEFAULTS["packing_gradient_residual"]
    # The cluster's typical requests, which packing keeps room for: JSON list of [gpus, milli_per_gpu, share] or
    # [gpus, milli_per_gpu, share, cpu_milli, memory_mib] (CPU/memory may be null; a pod without GPU is
    # [0, 0, share, cpu_milli, memory_mib]), e.g. GPUADVISOR_TASK_MIX='[[1, 500, 0.3], [1, 1000, 0.4, 8000, 32768],
    # [8, 1000, 0.3]]' (advisor.placement.fragmentation). CPU/memory only count on nodes whose free CPU/memory is known.
    task_mix: TaskMix = SCORING_DEFAULTS["task_mix"]
    # Where pods constrain the GPU model (node affinity / selector on nvidia.com/gpu.product): the typical requests as
    # seen from one model's nodes, a JSON object of GPU model -> task mix, e.g. GPUADVISOR_MODEL_TASK_MIX='{"T4":
    # [[1, 1000, 0.7, 8000, 16384], [1, 1000, 0.9, 1e12, 16384]]}'. A request that cannot use the model gets CPU 1e12
    # (it fits none of those nodes); one that constrains the model weighs its share × cluster GPUs / GPUs of the
    # models it accepts (docs/advisor.md, "GPU models"). Nodes of other models are scored with task_mix.
    model_task_mix: dict[str, TaskMix] = Field(default_factory=dict)
    # The extender filter keeps a pod off a node when its predicted run time there exceeds wait_slack × its predicted
    # finish after waiting for room on a faster GPU model (JCT model needed; docs/advisor.md, "Waiting for a faster
    # GPU"); 0 = never wait. Below 1 even the node with the soonest finish would fail, so 0 < value < 1 is refused.
    wait_slack: float = SCORING_DEFAULTS["wait_slack"]
    # The extender filter holds nodes for the first pending GPU pod (queue order: priority, then age) that has no room
    # anywhere, from when it is predicted to start there, and lets others onto them only if they are predicted to
    # finish first (EASY backfilling; docs/advisor.md, "Holding nodes for a blocked pod"). Needs the pod watch. Off by
    # default: on the Gavel traces it helped at high load on two traces and hurt on a third (docs/evaluation.md).
    hold_for_blocked: bool = SCORING_DEFAULTS["hold_for_blocked"]
    # The extender filter serves pending GPU pods by response ratio ((waited + predicted run) / predicted run, highest
    # first) instead of by age: a pod is kept off room that pods with a higher ratio are expected to take. Short pods
    # go first and long ones age until they do (docs/advisor.md, "Shortest first"). Needs the pod watch.
    shortest_first: bool = SCORING_DEFAULTS["shortest_first"]

    @field_validator("api_token", "training_token", "trialrun_token")
    @classmethod
    def _empty_token_is_none(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    @model_validator(mode="after")
    def _budget_admits_the_largest_body(self) -> AdvisorSettings:
        need = self.scheduler_body_limit_bytes * PARSE_EXPANSION / LARGE_SHARE
        if self.request_memory_budget_bytes < need:
            raise ValueError(
                f"request_memory_budget_bytes: {self.request_memory_budget_bytes} cannot admit one body of "
                f"scheduler_body_limit_bytes ({self.scheduler_body_limit_bytes}); it needs at least {int(need)} "
                f"({PARSE_EXPANSION}x the body, of which large bodies may hold {LARGE_SHARE:.0%})"
            )
        return self

    @field_validator(
        "staleness_seconds",
        "weight_packing",
        "weight_affinity",
        "weight_interference",
        "weight_jct",
        "unknown_node_score",
        "extender_span_points",
        "packing_best_fit_share",
        "packing_gradient_steps",
        "packing_cpu_balance",
        "packing_gradient_residual",
    )
    @classmethod
    def _valid_knob(cls, value: float, info: ValidationInfo) -> float:
        try:
            check_knob(str(info.field_name), value)
        except ScoringInputError as e:
            raise ValueError(str(e)) from None
        return value

    @field_validator("wait_slack")
    @classmethod
    def _valid_wait_slack(cls, value: float) -> float:
        if value != 0 and not value >= 1:  # 0: never wait (the environment has no null)
            raise ValueError(f"must be 0 (never wait for a faster GPU) or >= 1, got {value}")
        return value

    @field_validator("model_task_mix", mode="before")
    @classmethod
    def _valid_model_task_mix(cls, raw: object) -> dict[str, TaskMix]:
        if not isinstance(raw, dict):
            raise ValueError(f"must be a JSON object of GPU model -> task mix, got {raw!r}")
        out: dict[str, TaskMix] = {}
        for model, mix in raw.items():
            if not isinstance(model, str) or not model.strip():
                raise ValueError(f"GPU model names must be non-empty strings, got {model!r}")
            try:
                out[model.strip()] = parse_task_mix(mix)
            except TaskMixError as e:
                raise ValueError(f"{model}: {e}") from None
        return out

    @field_validator("task_mix", mode="before")
    @classmethod
    def _valid_task_mix(cls, raw: object) -> TaskMix:
        try:
            return parse_task_mix(raw)
        except TaskMixError as e:
            raise ValueError(str(e)) from None
