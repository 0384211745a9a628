"""Nodes that can never host a pod, whatever else leaves them: the extender filter's `FailedAndUnresolvableNodes`.

kube-scheduler's preemption evicts victims only on nodes where that could help; a node the extender rejects as merely
"failed" is a preemption candidate, so lower-priority pods would be evicted from a node the advisor will reject again.
A node never fits when, by the collector's telemetry, it has fewer GPUs than the pod asks for, fewer healthy ones
(a lost GPU), no GPU with the memory a share asks for, or GPUs of a model the pod does not accept
(`PodRequest.gpu_models`, from its node selector / required affinity on `nvidia.com/gpu.product`). Everything else
(GPUs busy, CPU or memory taken, waiting for a faster model) can change. Telemetry that is stale is as good as none:
such a node is judged only under strict staleness (`GPUADVISOR_STRICT_STALENESS`), as the filter judges it.
"""

from __future__ import annotations

from advisor.gpus import normalize_gpu_model
from advisor.placement.config import ScoringConfig
from advisor.placement.scoring import is_stale
from advisor.placement.types import NodeState, PodRequest

_GIB = 2**30


def never_fits(pod: PodRequest, node: NodeState, *, config: ScoringConfig, now_seconds: float | None) -> str | None:
    """Why `node` can never host `pod`, or None when it might (now or once GPUs free up, or its telemetry is stale and
    staleness is not strict)."""
    if not pod.whole_gpus and not pod.is_share:
        return None
    if not config.strict_staleness and is_stale(node, config, now_seconds):
        return None
    total, healthy = len(node.gpus), node.healthy_count
    need = max(pod.whole_gpus, 1)
    if total < need:
        return f"the node has {total} GPUs, the pod asks for {need}"
    if healthy < need:
        return f"the node has {healthy} healthy GPUs of {total} ({total - healthy} lost), the pod asks for {need}"
    if pod.is_share and pod.gpu_memory_bytes:
        largest = max((g.memory_total_bytes for g in node.gpus if g.healthy), default=0)
        if 0 < largest < pod.gpu_memory_bytes:
            return (
                f"no GPU of the node has {pod.gpu_memory_bytes / _GIB:.1f} GiB of memory for the share "
                f"(largest {largest / _GIB:.1f} GiB)"
            )
    if pod.gpu_models and normalize_gpu_model(node.gpu_model) not in pod.gpu_models:
        return f"GPU model {node.gpu_model or 'unknown'} is not one the pod accepts ({', '.join(pod.gpu_models)})"
    return None
