"""What a pod asks of the cluster, read from the parts of its manifest that matter (docs/design.md §5).

Pure: the HTTP schemas and the Kubernetes watch both hand over plain values, and get a `PodRequest`
(`advisor.placement.types`) or a `PodSpecError` whose message names the offending field (the API turns it into a 4xx).

The resources and annotations (whole GPUs, GPU shares in every notation, CPU and memory, quantities) are read by
`collector.pod_requests`, shared with the job-history recorder; this module adds what only the scheduler side reads:
* identity: label `gpuadvisor.io/workload`; gang: label (or annotation) `scheduling.x-k8s.io/pod-group`, else
  `volcano.sh/job-name`;
* the GPU models a pod accepts, from its node affinity / selector on `nvidia.com/gpu.product`.
The advisor models a share of one GPU: a share asked on several GPUs is scored by its per-GPU part, and the device
plugin places the rest. The names of `collector.pod_requests` stay importable from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from advisor.gpus import normalize_gpu_model
from advisor.placement.queue import NodePlacement, NodeRequirement, NodeSelectorTerm
from advisor.placement.types import PodRequest, ScoringInputError
from collector.keys import (
    GANG_KEYS,
    GPU_MEMORY_ANNOTATION,
    GPU_MILLI_ANNOTATION,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    WORKLOAD_LABEL,
)
from collector.pod_requests import (
    GPU_MILLI_RESOURCE,
    GPU_RESOURCE_NAMES,
    GPUSHARE_MEMORY_GIB_RESOURCE,
    HAMI_CORES_PERCENT_RESOURCE,
    HAMI_MEMORY_MIB_RESOURCE,
    HAMI_MEMORY_PERCENT_RESOURCE,
    RESTARTABLE,
    VOLCANO_CORES_PERCENT_RESOURCE,
    VOLCANO_MEMORY_MIB_RESOURCE,
    VOLCANO_NUMBER_RESOURCE,
    ContainerResources,
    GpuAsk,
    PodSpecError,
    allocatable_of,
    cpu_memory_request,
    gpu_ask,
    gpu_request,
    parse_quantity,
    pod_amount,
    quantity_value,
)

__all__ = [
    "GPUSHARE_MEMORY_GIB_RESOURCE",
    "GPU_MEMORY_ANNOTATION",
    "GPU_MILLI_ANNOTATION",
    "GPU_MILLI_RESOURCE",
    "GPU_PRODUCT_LABEL",
    "GPU_RESOURCE",
    "GPU_RESOURCE_NAMES",
    "HAMI_CORES_PERCENT_RESOURCE",
    "HAMI_MEMORY_MIB_RESOURCE",
    "HAMI_MEMORY_PERCENT_RESOURCE",
    "RESTARTABLE",
    "VOLCANO_CORES_PERCENT_RESOURCE",
    "VOLCANO_MEMORY_MIB_RESOURCE",
    "VOLCANO_NUMBER_RESOURCE",
    "ContainerResources",
    "GpuAsk",
    "PodSpecError",
    "accepted_gpu_models",
    "allocatable_of",
    "cpu_memory_request",
    "gpu_ask",
    "node_placement",
    "parse_quantity",
    "placement_of_spec",
    "pod_amount",
    "pod_key",
    "pod_request",
    "quantity_value",
    "request_name",
    "rfc3339_seconds",
]


def pod_request(
    *,
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    containers: Sequence[ContainerResources],
    init_containers: Sequence[ContainerResources] = (),
    overhead: Mapping[str, object] | None = None,
    gpu_models: Sequence[str] = (),
) -> PodRequest:
    """The `PodRequest` of a pod manifest (GPUs, share, CPU and memory; `gpu_models` the GPU models it accepts,
    `accepted_gpu_models`); `PodSpecError` names the wrong field."""
    if not containers:
        raise PodSpecError("spec.containers: a pod needs at least one container")
    gpu = gpu_request(annotations, containers, init_containers)
    gang = next((labels.get(k) or annotations.get(k) for k in GANG_KEYS if labels.get(k) or annotations.get(k)), None)
    cpu_milli, memory_mib = cpu_memory_request(containers, init_containers, overhead)
    try:
        return PodRequest(
            name=request_name(namespace, name),
            gpus=gpu.gpus,
            gpu_milli=gpu.milli,
            gpu_memory_bytes=gpu.memory_bytes,
            workload=labels.get(WORKLOAD_LABEL) or None,
            gang=gang,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
            gpu_models=tuple(gpu_models),
        )
    except ScoringInputError as e:
        raise PodSpecError(str(e)) from e


def request_name(namespace: str, name: str) -> str:
    """A manifest's `PodRequest.name`: `namespace/name`, the bare name without a namespace."""
    return f"{namespace}/{name}" if namespace else name


def pod_key(namespace: str, name: str) -> str:
    """How the advisor names a pod everywhere: `namespace/name`."""
    return f"{namespace}/{name}"


# Node placement: the pod's own constraints on nodes (kube-scheduler's NodeAffinity plugin, required part).

_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
_FIELD_OPERATORS = frozenset({"In", "NotIn"})


def node_placement(
    node_selector: Mapping[str, str] | None, required_terms: Sequence[object] | None
) -> NodePlacement | None:
    """The pod's `NodePlacement`, None when it constrains nothing — or when a term uses an operator this reader does not
    know (the API server validates them; an unreadable constraint is better ignored than guessed at: the caller then
    treats every node as one the pod may use)."""
    if not node_selector and required_terms is None:
        return None
    terms: list[NodeSelectorTerm] | None = None
    if required_terms is not None:
        terms = []
        for term in required_terms:
            if not isinstance(term, Mapping):
                return None
            expressions = _requirements(term.get("matchExpressions"), _OPERATORS)
            fields = _requirements(term.get("matchFields"), _FIELD_OPERATORS)
            if expressions is None or fields is None:
                return None
            terms.append(NodeSelectorTerm(expressions, fields))
    return NodePlacement(dict(node_selector or {}), None if terms is None else tuple(terms))


def _requirements(raw: object, operators: frozenset[str]) -> tuple[NodeRequirement, ...] | None:
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        return None
    out: list[NodeRequirement] = []
    for r in raw:
        if not isinstance(r, Mapping):
            return None
        key, operator, values = r.get("key"), r.get("operator"), r.get("values") or ()
        if not isinstance(key, str) or operator not in operators or not isinstance(values, list | tuple):
            return None
        out.append(NodeRequirement(key, str(operator), tuple(str(v) for v in values)))
    return tuple(out)


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def placement_of_spec(spec: Mapping[str, object]) -> NodePlacement | None:
    """`node_placement` of a pod spec (API JSON form): its `nodeSelector` and required node affinity terms."""
    selector = spec.get("nodeSelector")
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = node_affinity.get(_REQUIRED) if isinstance(node_affinity, Mapping) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    return node_placement(
        {str(k): str(v) for k, v in selector.items()} if isinstance(selector, Mapping) else None,
        terms if isinstance(terms, list) else None,
    )


def accepted_gpu_models(placement: NodePlacement | None) -> tuple[str, ...]:
    """The GPU models a pod accepts by its node selector and required node affinity on `GPU_PRODUCT_LABEL`,
    normalised (`advisor.gpus.normalize_gpu_model`), sorted; () when it accepts any.

    The selector pins one model; required terms are alternatives, so the pod accepts the union of their `In` values —
    any model as soon as one term does not restrict the label with `In` (`NotIn`, `Exists` and the like are left to
    kube-scheduler's NodeAffinity filter). Selector and terms must both hold: their intersection. A contradiction
    (no model left) is also left to NodeAffinity, which then passes no node."""
    if placement is None:
        return ()
    allowed: set[str] | None = None
    pinned = placement.selector.get(GPU_PRODUCT_LABEL)
    if pinned is not None:
        allowed = {normalize_gpu_model(pinned)}
    if placement.terms is not None:
        union: set[str] = set()
        for term in placement.terms:
            models: set[str] | None = None
            for r in term.expressions:
                if r.key == GPU_PRODUCT_LABEL and r.operator == "In":
                    values = {normalize_gpu_model(v) for v in r.values}
                    models = values if models is None else models & values
            if models is None:
                break
            union |= models
        else:
            allowed = union if allowed is None else allowed & union
    return tuple(sorted(allowed)) if allowed else ()


def rfc3339_seconds(raw: object) -> float | None:
    """An RFC 3339 time as Kubernetes writes it (`Z`, or `+00:00` as the client's serialiser does; a time without an
    offset is UTC, not this host's local time) as Unix seconds; None when it is not one."""
    if not isinstance(raw, str):
        return None
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        return None
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()
