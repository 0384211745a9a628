"""Settings of the collector (env prefix GPUADVISOR_, docs/design.md §2); CLI flags override them."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from collector.kubelet_pods import DEFAULT_SOCKET

# The longest pause between two cycles: an hour. Beyond it a node is long gone from the advisor's state
# (GPUADVISOR_NODE_EXPIRY_SECONDS, default 600), and an unbounded float (inf) cannot be waited on.
MAX_INTERVAL_SECONDS = 3600.0


class CollectorSettings(BaseSettings):
    """`GPUADVISOR_NODE_NAME` is set from the downward API in the DaemonSet; the token is shared with the advisor."""

    model_config = SettingsConfigDict(env_prefix="GPUADVISOR_", extra="ignore")

    node_name: str | None = None
    port: int = Field(default=9400, ge=0, le=65535)
    interval_seconds: float = Field(default=5.0, gt=0, le=MAX_INTERVAL_SECONDS)
    proc_root: Path = Path("/proc")
    advisor_url: str | None = None
    api_token: str | None = None
    # A file holding the token to push with, read again on every push (a projected ServiceAccount token rotates):
    # the collector's own credential where the advisor ties telemetry to its node (GPUADVISOR_TELEMETRY_AUTH=
    # serviceaccount, docs/operations.md). Takes precedence over api_token.
    api_token_file: Path | None = None
    nvml_library: str | None = None
    no_kube: bool = False
    push_timeout_seconds: float = Field(default=2.0, gt=0)
    annotation_grace_seconds: float = Field(default=300.0, ge=0)
    pid_labels: bool = False
    # The kubelet's pod-resources socket: where it answers, the pods holding GPUs come from it and each is read by
    # name from the API server; where it does not, this node's pods are listed (collector.kube, docs/design.md §3).
    pod_resources_socket: Path = DEFAULT_SOCKET
    pod_resources_timeout_seconds: float = Field(default=5.0, gt=0, le=60)
