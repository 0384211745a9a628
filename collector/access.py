"""Does this collector see the GPUs its node has? Detects a DaemonSet pod that got no GPU access (issue 20).

The collector takes no GPU from the scheduler; the container runtime has to hand it the NVML library and device
nodes. Where the runtime refuses that to unprivileged pods (`NVIDIA_VISIBLE_DEVICES` ignored: Bottlerocket's
default, the NVIDIA Container Toolkit's `accept-nvidia-visible-devices-envvar-when-unprivileged = false`), NVML is
absent or sees no GPU, and every node would silently become "unknown" to the advisor. The node object says whether
GPUs are there (GPU feature discovery labels, or the device plugin's allocatable `nvidia.com/gpu`); a mismatch is
reported loudly: `gpuadvisor_collector_gpu_access_missing`, a `/healthz` reason, one log line, and no snapshot is
pushed or annotated (an empty one would tell the advisor the node has no GPUs). docs/install.md#gpu-access says how
to grant access.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from collector.backend import NodeReading
from collector.keys import GPU_COUNT_LABEL, GPU_PRESENT_LABEL, GPU_RESOURCE
from collector.stats import CollectorStats

log = logging.getLogger(__name__)

HELP = "grant the collector GPU access: docs/install.md#gpu-access"


@dataclass(frozen=True, slots=True)
class GpuAccessProblem:
    """Why this collector cannot report its node's GPUs: `reason` is a metric label, `message` the log/healthz text."""

    reason: str
    message: str


def _positive(value: Any) -> bool:
    try:
        return int(str(value)) > 0
    except ValueError:
        return False


def node_gpu_evidence(node: Mapping[str, Any]) -> str | None:
    """What in a Node object says it has NVIDIA GPUs (a label or an allocatable resource), or None."""
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if str(labels.get(GPU_PRESENT_LABEL, "")).lower() == "true":
        return f"label {GPU_PRESENT_LABEL}=true"
    if _positive(labels.get(GPU_COUNT_LABEL)):
        return f"label {GPU_COUNT_LABEL}={labels[GPU_COUNT_LABEL]}"
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    if _positive(allocatable.get(GPU_RESOURCE)):
        return f"allocatable {GPU_RESOURCE}={allocatable[GPU_RESOURCE]}"
    return None


def gpu_access_problem(evidence: str | None, gpus_seen: int, nvml_error: str | None) -> GpuAccessProblem | None:
    """The problem, if any: NVML could not be opened at all, or it sees no GPU on a node that has some."""
    where = f"the node has GPUs ({evidence}) but " if evidence else ""
    if nvml_error is not None:
        return GpuAccessProblem("nvml_unavailable", f"no GPU access: {where}NVML is unavailable ({nvml_error}); {HELP}")
    if evidence is not None and gpus_seen == 0:
        return GpuAccessProblem("no_gpu_visible", f"no GPU access: {where}NVML sees no GPU; {HELP}")
    return None


class NoGpuBackend:
    """The `GpuBackend` of a collector whose NVML could not be opened: no GPUs, so it keeps serving its health."""

    def read(self) -> NodeReading:
        return NodeReading(driver_version="", gpus=())

    def close(self) -> None:
        """Nothing to release."""


class GpuAccessMonitor:
    """Checks every cycle whether the GPUs NVML sees match the node's. The node object is read only while NVML sees
    none (a collector that sees GPUs has access, whatever the labels say), again every `recheck_seconds` (labels
    arrive after install), and after a failed read no sooner than `retry_seconds`: an unreachable API server must
    not slow every cycle down by its request timeout.

    `read_node` returns the Node object, or None when the API could not be reached (it counts that itself).
    """

    def __init__(
        self,
        read_node: Callable[[], Mapping[str, Any] | None],
        *,
        stats: CollectorStats,
        nvml_error: str | None = None,
        recheck_seconds: float = 300.0,
        retry_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read_node = read_node
        self._stats = stats
        self.nvml_error = nvml_error
        self._recheck_seconds = recheck_seconds
        self._retry_seconds = retry_seconds
        self._clock = clock
        self._evidence: str | None = None
        self._next_read_seconds: float | None = None
        self.problem: GpuAccessProblem | None = None

    def _refresh_evidence(self) -> None:
        now = self._clock()
        if self._next_read_seconds is not None and now < self._next_read_seconds:
            return
        node = self._read_node()
        if node is None:
            self._next_read_seconds = now + self._retry_seconds
            return
        self._evidence = node_gpu_evidence(node)
        self._next_read_seconds = now + self._recheck_seconds

    def check(self, reading: NodeReading) -> GpuAccessProblem | None:
        """The problem of this cycle (counted as `gpu_access`); logs once when it appears and when it is gone."""
        if self.nvml_error is None and reading.gpus:
            problem = None
        else:
            self._refresh_evidence()
            problem = gpu_access_problem(self._evidence, len(reading.gpus), self.nvml_error)
        if problem != self.problem:
            if problem is not None:
                log.error("%s", problem.message)
            else:
                log.info("GPU access restored: NVML sees %d GPU(s)", len(reading.gpus))
        self.problem = problem
        self._stats.set_gpu_access_problem(problem.reason if problem else None, problem.message if problem else None)
        if problem is not None:
            self._stats.add_error("gpu_access")
        return problem
