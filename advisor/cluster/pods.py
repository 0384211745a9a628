"""What a pod asks of the GPUs, read from the parts of its manifest that matter (docs/design.md §5).

Pure: the HTTP schemas and the Kubernetes watch both hand over plain values, and get a `PodRequest`
(`advisor.placement.types`) or a `PodSpecError` whose message names the offending field (the API turns it into a 4xx).

* whole GPUs: `resources.limits["nvidia.com/gpu"]` (or `requests` when no limit), summed over containers; an init
  container runs alone, so the pod needs the larger of that sum and the biggest init container;
* a GPU share: annotations `gpuadvisor.io/gpu-milli` (1..1000) and/or `gpuadvisor.io/gpu-memory-bytes` (bytes or a
  Kubernetes quantity such as `10Gi`);
* identity: label `gpuadvisor.io/workload`; gang: label (or annotation) `scheduling.x-k8s.io/pod-group`, else
  `volcano.sh/job-name`;
* CPU and memory (`cpu_memory_request`): kube-scheduler's resource accounting, max(sum over containers, largest
  init container) + `spec.overhead`, each container's `requests` (its `limits` where it gives no request, as the
  API server defaults them), in milli-CPU and MiB rounded up.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

from advisor.gpus import normalize_gpu_model
from advisor.placement.queue import NodePlacement, NodeRequirement, NodeSelectorTerm
from advisor.placement.types import WHOLE_GPU_MILLI, PodRequest, ScoringInputError
from collector.keys import (
    GANG_KEYS,
    GPU_MEMORY_ANNOTATION,
    GPU_MILLI_ANNOTATION,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    WORKLOAD_LABEL,
)

# apimachinery's quantity grammar (resource.Quantity): a signed decimal number, then an exponent (`1e3`, `5E-1`) or
# one SI suffix, binary (`Ki`..`Ei`) or decimal (`n`, `u`, `m`, `k`, `M`..`E`). Parsed here rather than with the
# kubernetes client's `parse_quantity`, which is looser (it takes `NaN`, `Infinity`, `1_000`) and would load the whole
# client (0.4 s) into the scoring path; tests check both agree on every valid quantity.
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$")
_SUFFIX: dict[str, Decimal] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def quantity_value(text: str) -> Decimal | None:
    """A Kubernetes quantity string (`"500m"`, `"2"`, `"1e3"`, `"1.5Gi"`) as an exact Decimal; None if malformed."""
    m = _QUANTITY.match(text.strip())
    if m is None:
        return None
    number, exponent, suffix = m.groups()
    value = Decimal(number)
    if exponent is not None:
        return value.scaleb(int(exponent))
    return value * _SUFFIX[suffix] if suffix else value


class PodSpecError(ValueError):
    """A pod manifest the advisor cannot read; the message starts with the field path."""


@dataclass(frozen=True, slots=True)
class ContainerResources:
    """The resource maps of one container (`resources.limits` / `resources.requests`), values as in the JSON."""

    limits: Mapping[str, object]
    requests: Mapping[str, object]


def parse_quantity(value: object, field: str) -> int:
    """A non-negative Kubernetes quantity (`4`, `"4"`, `"10Gi"`, `"1500m"` rounds up) as an integer."""
    return _scaled_quantity(value, field, _ONE)


def _gpus_of(resources: ContainerResources, field: str) -> int:
    if GPU_RESOURCE in resources.limits:
        return parse_quantity(resources.limits[GPU_RESOURCE], f"{field}.resources.limits.{GPU_RESOURCE}")
    if GPU_RESOURCE in resources.requests:
        return parse_quantity(resources.requests[GPU_RESOURCE], f"{field}.resources.requests.{GPU_RESOURCE}")
    return 0


def _int_annotation(annotations: Mapping[str, str], key: str, *, quantity: bool) -> int | None:
    raw = annotations.get(key)
    if raw is None:
        return None
    field = f"metadata.annotations.{key}"
    if quantity:
        return parse_quantity(raw, field)
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise PodSpecError(f"{field}: expected an integer, got {raw!r}") from None
    if value < 0:
        raise PodSpecError(f"{field}: must be >= 0, got {value}")
    return value


_ONE = Decimal(1)
_MIB = Decimal(2**20)


def _scaled_quantity(value: object, field: str, scale: Decimal, *, rounding: str = ROUND_CEILING) -> int:
    """A non-negative quantity (JSON number or string: "500m", "2", "1e3", "512Mi", …) times `scale`, rounded up
    (by default) to an integer."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PodSpecError(f"{field}: expected a quantity, got {value!r}")
    if isinstance(value, str):
        amount = quantity_value(value)
        if amount is None:
            raise PodSpecError(f"{field}: {value!r} is not a quantity")
    elif isinstance(value, float) and not math.isfinite(value):
        raise PodSpecError(f"{field}: {value!r} is not a quantity")
    else:
        amount = Decimal(value)
    if amount < 0:
        raise PodSpecError(f"{field}: must be >= 0, got {value!r}")
    return int((amount * scale).to_integral_value(rounding=rounding))


def _cpu_memory_of(resources: ContainerResources, field: str) -> tuple[int, int]:
    out = []
    for name, scale in (("cpu", Decimal(1000)), ("memory", 1 / _MIB)):
        if name in resources.requests:
            out.append(_scaled_quantity(resources.requests[name], f"{field}.resources.requests.{name}", scale))
        elif name in resources.limits:
            out.append(_scaled_quantity(resources.limits[name], f"{field}.resources.limits.{name}", scale))
        else:
            out.append(0)
    return out[0], out[1]


def cpu_memory_request(
    containers: Sequence[ContainerResources],
    init_containers: Sequence[ContainerResources] = (),
    overhead: Mapping[str, object] | None = None,
) -> tuple[int, int]:
    """(milli-CPU, MiB) a pod requests as kube-scheduler counts it; `PodSpecError` names a wrong field.

    Per resource: max(sum over `containers`, largest of `init_containers`) plus the pod's `spec.overhead`. Sidecar
    init containers (`restartPolicy: Always`) are counted like the others (not modelled).
    """
    cpu = memory = 0
    for i, c in enumerate(containers):
        c_cpu, c_memory = _cpu_memory_of(c, f"spec.containers[{i}]")
        cpu += c_cpu
        memory += c_memory
    for i, c in enumerate(init_containers):
        c_cpu, c_memory = _cpu_memory_of(c, f"spec.initContainers[{i}]")
        cpu, memory = max(cpu, c_cpu), max(memory, c_memory)
    if overhead:
        o_cpu, o_memory = _cpu_memory_of(ContainerResources(limits={}, requests=overhead), "spec.overhead")
        cpu, memory = cpu + o_cpu, memory + o_memory
    return cpu, memory


def allocatable_of(allocatable: Mapping[str, object]) -> tuple[int, int] | None:
    """A node's `status.allocatable` cpu and memory as (milli-CPU, MiB, rounded down); None when either is missing
    or unreadable."""
    if "cpu" not in allocatable or "memory" not in allocatable:
        return None
    try:
        cpu = _scaled_quantity(allocatable["cpu"], "status.allocatable.cpu", Decimal(1000), rounding=ROUND_FLOOR)
        memory = _scaled_quantity(allocatable["memory"], "status.allocatable.memory", 1 / _MIB, rounding=ROUND_FLOOR)
    except PodSpecError:
        return None
    return cpu, memory


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
    gpus = sum(_gpus_of(c, f"spec.containers[{i}]") for i, c in enumerate(containers))
    init = max((_gpus_of(c, f"spec.initContainers[{i}]") for i, c in enumerate(init_containers)), default=0)
    gpus = max(gpus, init)
    milli = _int_annotation(annotations, GPU_MILLI_ANNOTATION, quantity=False)
    memory = _int_annotation(annotations, GPU_MEMORY_ANNOTATION, quantity=True)
    if milli is not None and not 1 <= milli <= WHOLE_GPU_MILLI:
        raise PodSpecError(f"metadata.annotations.{GPU_MILLI_ANNOTATION}: must be within 1..1000, got {milli}")
    if gpus and milli is not None and milli != WHOLE_GPU_MILLI:
        raise PodSpecError(
            f"metadata.annotations.{GPU_MILLI_ANNOTATION}: a GPU share cannot be combined with "
            f"{GPU_RESOURCE}={gpus} whole GPUs"
        )
    gang = next((labels.get(k) or annotations.get(k) for k in GANG_KEYS if labels.get(k) or annotations.get(k)), None)
    cpu_milli, memory_mib = cpu_memory_request(containers, init_containers, overhead)
    try:
        return PodRequest(
            name=f"{namespace}/{name}" if namespace else name,
            gpus=gpus,
            gpu_milli=0 if gpus else (milli or 0),
            gpu_memory_bytes=memory,
            workload=labels.get(WORKLOAD_LABEL) or None,
            gang=gang,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
            gpu_models=tuple(gpu_models),
        )
    except ScoringInputError as e:
        raise PodSpecError(str(e)) from e


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
