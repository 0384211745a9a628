"""Nodes that can never host a pod, whatever else leaves them: the extender filter's `FailedAndUnresolvableNodes`.

kube-scheduler's preemption evicts victims only on nodes where that could help; a node the extender rejects as merely
"failed" is a preemption candidate, so lower-priority pods would be evicted from a node the advisor will reject again.
A node never fits when, by the collector's telemetry, it has fewer GPUs than the pod asks for, fewer healthy ones
(a lost GPU), no GPU with the memory a share asks for, or GPUs of a model the pod's node selector / required node
affinity on `nvidia.com/gpu.product` excludes (kube-scheduler checks the node's label; the telemetry says what is
really installed). Everything else (GPUs busy, CPU or memory taken, waiting for a faster model) can change.
"""

from __future__ import annotations

from advisor.pods import NodePlacement
from advisor.scoring import NodeState, PodRequest

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
_GIB = 2**30


def gpu_product(model: str) -> str:
    """The `nvidia.com/gpu.product` label value GPU feature discovery gives a GPU model (NVML's name, spaces to
    dashes): "NVIDIA H100 80GB HBM3" → "NVIDIA-H100-80GB-HBM3"."""
    return "-".join(model.split())


def admits_gpu_model(placement: NodePlacement | None, product: str) -> bool:
    """Whether the pod's node selector and required node affinity allow GPUs labelled `product`, reading only their
    requirements on `nvidia.com/gpu.product` (the others are kube-scheduler's to check, on labels it knows)."""
    if placement is None:
        return True
    wanted = placement.selector.get(GPU_PRODUCT_LABEL)
    if wanted is not None and wanted != product:
        return False
    if placement.terms is None:
        return True
    return any(
        all(r.matches(product) for r in term.expressions if r.key == GPU_PRODUCT_LABEL) for term in placement.terms
    )


def never_fits(pod: PodRequest, node: NodeState, placement: NodePlacement | None) -> str | None:
    """Why `node` can never host `pod`, or None when it might (now or once GPUs free up)."""
    if not pod.whole_gpus and not pod.is_share:
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
    product = gpu_product(node.gpu_model)
    if node.gpu_model and not admits_gpu_model(placement, product):
        return f"the node's GPUs are {product}, which the pod's {GPU_PRODUCT_LABEL} selector or affinity excludes"
    return None
