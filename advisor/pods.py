"""What a pod asks of the GPUs, read from the parts of its manifest that matter (DESIGN §5).

Pure: the HTTP schemas and the Kubernetes watch both hand over plain values, and get a `scoring.PodRequest` or a
`PodSpecError` whose message names the offending field (the API turns it into a 4xx).

* whole GPUs: `resources.limits["nvidia.com/gpu"]` (or `requests` when no limit), summed over containers; an init
  container runs alone, so the pod needs the larger of that sum and the biggest init container;
* a GPU share: annotations `gpuadvisor.io/gpu-milli` (1..1000) and/or `gpuadvisor.io/gpu-memory-bytes` (bytes or a
  Kubernetes quantity such as `10Gi`);
* identity: label `gpuadvisor.io/workload`; gang: label (or annotation) `scheduling.x-k8s.io/pod-group`, else
  `volcano.sh/job-name`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from advisor.scoring import WHOLE_GPU_MILLI, PodRequest, ScoringInputError

GPU_RESOURCE = "nvidia.com/gpu"
GPU_MILLI_ANNOTATION = "gpuadvisor.io/gpu-milli"
GPU_MEMORY_ANNOTATION = "gpuadvisor.io/gpu-memory-bytes"
WORKLOAD_LABEL = "gpuadvisor.io/workload"
GANG_KEYS = ("scheduling.x-k8s.io/pod-group", "volcano.sh/job-name")

_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTPE]i?|k|m)?\s*$")
_FACTORS: dict[str | None, Decimal | int] = {
    None: Decimal(1),
    "m": Decimal("0.001"),
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


class PodSpecError(ValueError):
    """A pod manifest the advisor cannot read; the message starts with the field path."""


@dataclass(frozen=True, slots=True)
class ContainerResources:
    """The resource maps of one container (`resources.limits` / `resources.requests`), values as in the JSON."""

    limits: Mapping[str, object]
    requests: Mapping[str, object]


def parse_quantity(value: object, field: str) -> int:
    """A non-negative Kubernetes quantity (`4`, `"4"`, `"10Gi"`, `"1500m"` rounds up) as an integer."""
    if isinstance(value, bool):
        raise PodSpecError(f"{field}: expected a quantity, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise PodSpecError(f"{field}: must be >= 0, got {value}")
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or value < 0:
            raise PodSpecError(f"{field}: must be >= 0, got {value}")
        return math.ceil(value)
    if not isinstance(value, str):
        raise PodSpecError(f"{field}: expected a quantity, got {type(value).__name__}")
    m = _QUANTITY.match(value)
    if m is None:
        raise PodSpecError(f"{field}: {value!r} is not a non-negative quantity")
    scaled = Decimal(m.group(1)) * _FACTORS[m.group(2)]
    return int(scaled.to_integral_value(rounding=ROUND_CEILING))


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


def pod_request(
    *,
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    containers: Sequence[ContainerResources],
    init_containers: Sequence[ContainerResources] = (),
) -> PodRequest:
    """The `PodRequest` of a pod manifest; `PodSpecError` names the field that is wrong."""
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
    try:
        return PodRequest(
            name=f"{namespace}/{name}" if namespace else name,
            gpus=gpus,
            gpu_milli=0 if gpus else (milli or 0),
            gpu_memory_bytes=memory,
            workload=labels.get(WORKLOAD_LABEL) or None,
            gang=gang,
        )
    except ScoringInputError as e:
        raise PodSpecError(str(e)) from e


def pod_key(namespace: str, name: str) -> str:
    """How the advisor names a pod everywhere: `namespace/name`."""
    return f"{namespace}/{name}"
