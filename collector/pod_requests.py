"""What a pod asks of the GPUs, CPU and memory, read from its containers' resources and our annotations: the one
reading of a pod's request that the scheduler side (`advisor.cluster.pods`, which adds identity, gang and node
affinity) and the job-history recorder (`profiler.recorder`, the JCT model's labels) share. In the lowest layer so
that every package may import it; pure (plain values in, dataclasses or `PodSpecError` out).

* every resource as kube-scheduler sums it (component-helpers `PodRequests`): each container's `requests` (its
  `limits` where it gives no request), summed over the containers; a restartable (sidecar) init container,
  `restartPolicy: Always`, keeps running beside them and adds to that sum; an ordinary init container runs alone
  (beside the sidecars started before it), so the pod needs the larger of the two;
* whole GPUs: `nvidia.com/gpu`, or Volcano vGPU's `volcano.sh/vgpu-number`, alone;
* a GPU share, in the names users already give it (`GPU_RESOURCE_NAMES`, docs/advisor.md "GPU requests"): HAMi's
  `nvidia.com/gpu` with `nvidia.com/gpumem` (MiB), `nvidia.com/gpumem-percentage` or `nvidia.com/gpucores` (percent
  of the GPU's memory or SMs), Volcano vGPU's `volcano.sh/vgpu-number` with `volcano.sh/vgpu-memory` (MiB) or
  `volcano.sh/vgpu-cores` (percent), Alibaba gpushare's `aliyun.com/gpu-mem` (GiB), our resource
  `gpuadvisor.io/gpu-milli` (thousandths of a GPU), or our annotations `gpuadvisor.io/gpu-milli` (1..1000) and/or
  `gpuadvisor.io/gpu-memory-bytes` (bytes or a Kubernetes quantity such as `10Gi`). A share asked on several GPUs
  (HAMi `nvidia.com/gpu: 2` with `nvidia.com/gpumem`) is read as its per-GPU part;
* CPU and memory (`cpu_memory_request`): kube-scheduler's resource accounting, max(sum over containers, largest
  init container) + `spec.overhead`, in milli-CPU and MiB rounded up.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

from collector.keys import GPU_MEMORY_ANNOTATION, GPU_MILLI_ANNOTATION, GPU_RESOURCE

WHOLE_GPU_MILLI = 1000
"""Thousandths of a GPU in a whole one (a share's `milli` is within 1..this)."""

# GPU shares in the names other systems give them (docs/advisor.md "GPU requests").
HAMI_MEMORY_MIB_RESOURCE = "nvidia.com/gpumem"
HAMI_MEMORY_PERCENT_RESOURCE = "nvidia.com/gpumem-percentage"
HAMI_CORES_PERCENT_RESOURCE = "nvidia.com/gpucores"
GPUSHARE_MEMORY_GIB_RESOURCE = "aliyun.com/gpu-mem"
VOLCANO_NUMBER_RESOURCE = "volcano.sh/vgpu-number"
VOLCANO_MEMORY_MIB_RESOURCE = "volcano.sh/vgpu-memory"
VOLCANO_CORES_PERCENT_RESOURCE = "volcano.sh/vgpu-cores"
GPU_MILLI_RESOURCE = "gpuadvisor.io/gpu-milli"
# Every resource name a GPU pod may carry, whole or shared: deploy/scheduler/ lists them as the extender's
# managedResources, since kube-scheduler sends a pod to the extender only if a container names one of them.
GPU_RESOURCE_NAMES = (
    GPU_RESOURCE,
    HAMI_MEMORY_MIB_RESOURCE,
    HAMI_MEMORY_PERCENT_RESOURCE,
    HAMI_CORES_PERCENT_RESOURCE,
    GPUSHARE_MEMORY_GIB_RESOURCE,
    VOLCANO_NUMBER_RESOURCE,
    VOLCANO_MEMORY_MIB_RESOURCE,
    VOLCANO_CORES_PERCENT_RESOURCE,
    GPU_MILLI_RESOURCE,
)
RESTARTABLE = "Always"  # an init container's restartPolicy that makes it a sidecar

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
    """The resource maps of one container (`resources.limits` / `resources.requests`), values as in the JSON;
    `restartable` for an init container with `restartPolicy: Always` (a sidecar)."""

    limits: Mapping[str, object]
    requests: Mapping[str, object]
    restartable: bool = False


def parse_quantity(value: object, field: str) -> int:
    """A non-negative Kubernetes quantity (`4`, `"4"`, `"10Gi"`, `"1500m"` rounds up) as an integer."""
    return _scaled_quantity(value, field, _ONE)


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
_MILLI_PER_CPU = Decimal(1000)
_PERCENT_TO_MILLI = Decimal(10)


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


def _amount_of(resources: ContainerResources, name: str, field: str, scale: Decimal) -> int:
    """One container's amount of resource `name` (its request, else its limit, else 0) times `scale`, rounded up.
    A limit is checked even where the request decides: a malformed one is still bad input."""
    limit = (
        _scaled_quantity(resources.limits[name], f"{field}.resources.limits.{name}", scale)
        if name in resources.limits
        else 0
    )
    if name in resources.requests:
        return _scaled_quantity(resources.requests[name], f"{field}.resources.requests.{name}", scale)
    return limit


def pod_amount(
    containers: Sequence[ContainerResources],
    init_containers: Sequence[ContainerResources],
    name: str,
    scale: Decimal = _ONE,
) -> int:
    """What the pod asks of resource `name` as kube-scheduler counts it (component-helpers `PodRequests`), times
    `scale`: the containers' sum plus the restartable (sidecar) init containers', or — if larger — what an ordinary
    init container needs while it runs beside the sidecars started before it. `PodSpecError` names a wrong field."""
    total = sum(_amount_of(c, name, f"spec.containers[{i}]", scale) for i, c in enumerate(containers))
    sidecars = init_peak = 0
    for i, c in enumerate(init_containers):
        amount = _amount_of(c, name, f"spec.initContainers[{i}]", scale)
        if c.restartable:
            sidecars += amount
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + amount)
    return max(total + sidecars, init_peak)


def cpu_memory_request(
    containers: Sequence[ContainerResources],
    init_containers: Sequence[ContainerResources] = (),
    overhead: Mapping[str, object] | None = None,
) -> tuple[int, int]:
    """(milli-CPU, MiB) a pod requests as kube-scheduler counts it (`pod_amount`) plus its `spec.overhead`;
    `PodSpecError` names a wrong field."""
    cpu = pod_amount(containers, init_containers, "cpu", _MILLI_PER_CPU)
    memory = pod_amount(containers, init_containers, "memory", 1 / _MIB)
    if overhead:
        extra = ContainerResources(limits={}, requests=overhead)
        cpu += _amount_of(extra, "cpu", "spec.overhead", _MILLI_PER_CPU)
        memory += _amount_of(extra, "memory", "spec.overhead", 1 / _MIB)
    return cpu, memory


@dataclass(frozen=True, slots=True)
class GpuAsk:
    """A pod's GPU request read from its resources: `gpus` whole GPUs, or a share of one GPU (`milli`, thousandths
    of its SMs, and/or `memory_bytes`), and the resource it was read from (for error messages)."""

    gpus: int = 0
    milli: int | None = None
    memory_bytes: int | None = None
    source: str = ""


def _percent(containers: Sequence[ContainerResources], init: Sequence[ContainerResources], name: str) -> int:
    """A percent-of-one-GPU resource (HAMi, Volcano) as milli-GPU, checked to be within 0..100 percent."""
    milli = pod_amount(containers, init, name, _PERCENT_TO_MILLI)
    if milli > WHOLE_GPU_MILLI:
        raise PodSpecError(f"spec.containers[*].resources.limits.{name}: must be within 0..100 (percent of one GPU)")
    return milli


def gpu_ask(containers: Sequence[ContainerResources], init: Sequence[ContainerResources] = ()) -> GpuAsk:
    """The GPU request a pod's resources make in any of `GPU_RESOURCE_NAMES` (see the module docstring); one
    notation per pod. `PodSpecError` names the wrong field."""
    amounts = {n: pod_amount(containers, init, n) for n in (GPU_RESOURCE, VOLCANO_NUMBER_RESOURCE)}
    hami = {
        "memory": pod_amount(containers, init, HAMI_MEMORY_MIB_RESOURCE, _MIB),
        "percent": _percent(containers, init, HAMI_MEMORY_PERCENT_RESOURCE),
        "cores": _percent(containers, init, HAMI_CORES_PERCENT_RESOURCE),
    }
    volcano = {
        "memory": pod_amount(containers, init, VOLCANO_MEMORY_MIB_RESOURCE, _MIB),
        "cores": _percent(containers, init, VOLCANO_CORES_PERCENT_RESOURCE),
    }
    gpushare_bytes = pod_amount(containers, init, GPUSHARE_MEMORY_GIB_RESOURCE, Decimal(2**30))
    ours = pod_amount(containers, init, GPU_MILLI_RESOURCE)
    asks: list[GpuAsk] = []
    if any(hami.values()):
        # a memory percentage is a fraction of the GPU like cores are; SMs, when given, are the share's milli
        milli = hami["cores"] or hami["percent"] or None
        asks.append(GpuAsk(milli=milli, memory_bytes=hami["memory"] or None, source=GPU_RESOURCE + " (HAMi)"))
    elif amounts[GPU_RESOURCE]:
        asks.append(GpuAsk(gpus=amounts[GPU_RESOURCE], source=GPU_RESOURCE))
    if any(volcano.values()):
        milli = volcano["cores"] or None
        asks.append(GpuAsk(milli=milli, memory_bytes=volcano["memory"] or None, source=VOLCANO_NUMBER_RESOURCE))
    elif amounts[VOLCANO_NUMBER_RESOURCE]:
        asks.append(GpuAsk(gpus=amounts[VOLCANO_NUMBER_RESOURCE], source=VOLCANO_NUMBER_RESOURCE))
    if gpushare_bytes:
        asks.append(GpuAsk(memory_bytes=gpushare_bytes, source=GPUSHARE_MEMORY_GIB_RESOURCE))
    if ours:
        if ours > WHOLE_GPU_MILLI:
            raise PodSpecError(f"spec.containers[*].resources.limits.{GPU_MILLI_RESOURCE}: must be within 1..1000")
        asks.append(GpuAsk(milli=ours, source=GPU_MILLI_RESOURCE))
    if len(asks) > 1:
        raise PodSpecError(
            f"spec.containers[*].resources: GPUs asked in several notations ({', '.join(a.source for a in asks)}); "
            "use one"
        )
    return asks[0] if asks else GpuAsk()


def allocatable_of(allocatable: Mapping[str, object]) -> tuple[int, int] | None:
    """A node's `status.allocatable` cpu and memory as (milli-CPU, MiB, rounded down); None when either is missing
    or unreadable."""
    if "cpu" not in allocatable or "memory" not in allocatable:
        return None
    try:
        cpu = _scaled_quantity(allocatable["cpu"], "status.allocatable.cpu", _MILLI_PER_CPU, rounding=ROUND_FLOOR)
        memory = _scaled_quantity(allocatable["memory"], "status.allocatable.memory", 1 / _MIB, rounding=ROUND_FLOOR)
    except PodSpecError:
        return None
    return cpu, memory


def container_resources(
    containers: object, served: frozenset[tuple[str, str]] = frozenset()
) -> list[ContainerResources]:
    """The `ContainerResources` of a pod manifest's `spec.containers` or `spec.initContainers` (plain JSON; a missing
    list is empty), without the (container name, resource) pairs in `served` (served by a ResourceClaim, KEP-5004)."""
    out: list[ContainerResources] = []
    for raw in containers if isinstance(containers, list) else []:
        c: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        r = c.get("resources") or {}
        limits, requests = r.get("limits") or {}, r.get("requests") or {}
        if served:
            name = c.get("name")
            limits = {k: v for k, v in limits.items() if (name, k) not in served}
            requests = {k: v for k, v in requests.items() if (name, k) not in served}
        out.append(
            ContainerResources(limits=limits, requests=requests, restartable=c.get("restartPolicy") == RESTARTABLE)
        )
    return out


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What a pod asks of the GPUs: `gpus` whole GPUs, or a share of one GPU (`milli` thousandths of it, 0 when only
    memory is named; 0 with whole GPUs) and/or `memory_bytes` of its memory."""

    gpus: int = 0
    milli: int = 0
    memory_bytes: int | None = None

    @property
    def asks_gpu(self) -> bool:
        """Whether the pod asks for any GPU at all, whole or a share."""
        return bool(self.gpus or self.milli or self.memory_bytes)


def gpu_request(
    annotations: Mapping[str, str],
    containers: Sequence[ContainerResources],
    init_containers: Sequence[ContainerResources] = (),
) -> GpuRequest:
    """A pod's GPU request from its resources (`gpu_ask`) and our annotations, which fill in what the resources leave
    out (a memory need, say); `PodSpecError` names the wrong field."""
    ask = gpu_ask(containers, init_containers)
    gpus = ask.gpus
    milli = _int_annotation(annotations, GPU_MILLI_ANNOTATION, quantity=False)
    memory = _int_annotation(annotations, GPU_MEMORY_ANNOTATION, quantity=True)
    if milli is not None and not 1 <= milli <= WHOLE_GPU_MILLI:
        raise PodSpecError(f"metadata.annotations.{GPU_MILLI_ANNOTATION}: must be within 1..1000, got {milli}")
    if gpus and milli is not None and milli != WHOLE_GPU_MILLI:
        raise PodSpecError(
            f"metadata.annotations.{GPU_MILLI_ANNOTATION}: a GPU share cannot be combined with "
            f"{ask.source}={gpus} whole GPUs"
        )
    milli = ask.milli if ask.milli is not None else milli
    memory = ask.memory_bytes if ask.memory_bytes is not None else memory
    return GpuRequest(gpus=gpus, milli=0 if gpus else (milli or 0), memory_bytes=memory)


def gpu_request_of_pod(pod: Mapping[str, Any]) -> GpuRequest:
    """`gpu_request` of a pod object as the API server returns it (plain JSON); `PodSpecError` names the wrong
    field."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    return gpu_request(
        annotations, container_resources(spec.get("containers")), container_resources(spec.get("initContainers"))
    )
