"""GPUs from Dynamic Resource Allocation (resource.k8s.io/v1): which devices each node has, which pod holds which
device, and what a pod's claims ask for.

NVIDIA's DRA driver (`gpu.nvidia.com`) publishes every GPU of a node as a device of a ResourceSlice (pool = the node's
name) with attributes `type` (`gpu`, or `mig` for a MIG instance), `uuid`, `productName`, `architecture`, and for MIG
`parentUUID` and `profile`, and capacity `memory`. The scheduler's DynamicResources plugin allocates devices to a
ResourceClaim (`status.allocation.devices.results`: driver, pool, device) and reserves the claim for its pods
(`status.reservedFor`). Here those objects (API JSON form) become:

* `Device`s per slice, `Claim`s with their requests and allocation, `DeviceClass`es with their selectors and
  `extendedResourceName` (KEP-5004: a pod asking `nvidia.com/gpu` on a node without that allocatable gets a claim
  the scheduler makes for it, annotated `resource.kubernetes.io/extended-resource-claim`, and the pod's
  `status.extendedResourceClaimStatus` maps its container resources onto that claim's requests);
* `DraIndex.held_by_pods`: per pod the GPUs its allocated claims hold (`PodAllocation`: whole GPUs pinned by UUID,
  MIG instances as their compute share of the parent GPU). The cluster state merges it with what the pod's own
  resources say; `served_by_claim` names the resources a claim serves, which the pod's side leaves out, so a GPU is
  never counted twice;
* `DraIndex.claim_ask`: what a pod's `spec.resourceClaims` (claims by name or from templates) ask of GPUs, for
  scoring a pod before the scheduler allocates: whole GPUs counted, MIG profiles, and the GPU models the selectors
  accept. Selectors are CEL: the device class's and the request's are evaluated (cel-python) against the devices the
  cluster publishes; an expression the evaluator cannot judge (a function it lacks) leaves the model open, and
  `ClaimAsk.notes` says so (the scorer puts it in its reason).

Pure apart from a lock: the Kubernetes watch (`advisor.cluster.kube`) feeds it objects.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import celpy
from celpy import celtypes

from advisor.cluster.pods import PodSpecError, pod_key, quantity_value
from advisor.cluster.state import PodAllocation
from advisor.gpus import normalize_gpu_model
from advisor.placement.mig import MigProfileError, parse_profile
from advisor.placement.types import WHOLE_GPU_MILLI, PodRequest

MigSlot = tuple[str, str, bool]
"""A MIG instance as the state takes it: (parent GPU UUID, profile, taken)."""

log = logging.getLogger(__name__)

NVIDIA_GPU_DRIVER = "gpu.nvidia.com"
GPU_TYPE = "gpu"
MIG_TYPE = "mig"
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
ALL_DEVICES = -1
"""`Request.count` of `allocationMode: All` (every matching device of the node)."""

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice. `attributes` and `capacity` are keyed by fully qualified name
    (`gpu.nvidia.com/uuid`: an unqualified name in the slice belongs to its driver's domain); capacity values are
    numbers (bytes for memory). `consumes` are the shared counters it uses ((counter set, counter) → amount)."""

    driver: str
    pool: str
    name: str
    node: str | None
    attributes: Mapping[str, object]
    capacity: Mapping[str, int]
    consumes: Mapping[tuple[str, str], int] = field(default_factory=dict)

    def attribute(self, name: str) -> object:
        return self.attributes.get(f"{self.driver}/{name}")

    @property
    def ref(self) -> DeviceRef:
        return DeviceRef(self.driver, self.pool, self.name)

    @property
    def kind(self) -> str:
        """`gpu`, `mig`, or "" for a device that is neither (another driver's, or NVIDIA's VFIO devices)."""
        kind = self.attribute("type")
        if self.driver == NVIDIA_GPU_DRIVER and kind in (GPU_TYPE, MIG_TYPE):
            return str(kind)
        return ""

    @property
    def uuid(self) -> str | None:
        value = self.attribute("uuid")
        return value if isinstance(value, str) else None

    @property
    def gpu_uuid(self) -> str | None:
        """The UUID of the whole GPU the device is or lives on (a MIG instance's parent)."""
        parent = self.attribute("parentUUID")
        return parent if isinstance(parent, str) and self.kind == MIG_TYPE else self.uuid

    @property
    def profile(self) -> str | None:
        """A MIG instance's profile (`1g.10gb`), None for anything else or a profile that does not parse."""
        value = self.attribute("profile")
        if self.kind != MIG_TYPE or not isinstance(value, str):
            return None
        try:
            return parse_profile(value).name
        except MigProfileError:
            return None

    @property
    def product(self) -> str | None:
        value = self.attribute("productName")
        return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True, order=True)
class DeviceRef:
    """A device as an allocation result names it."""

    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class Request:
    """One device request of a claim: its device class, how many devices (`ALL_DEVICES` for all), and its CEL
    selectors. A prioritised list (`firstAvailable`) is read as its first alternative, the one the scheduler tries
    first."""

    name: str
    device_class: str
    count: int
    selectors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Claim:
    """A ResourceClaim: its requests, the devices allocated to it (empty while unallocated), the node those are on
    (from the allocation's node selector), the pods it is reserved for (keys `namespace/name`) and whether the
    scheduler made it for a pod's extended resources (KEP-5004)."""

    namespace: str
    name: str
    requests: tuple[Request, ...]
    allocated: tuple[DeviceRef, ...] = ()
    node: str | None = None
    pods: tuple[str, ...] = ()
    extended: bool = False

    @property
    def key(self) -> str:
        return pod_key(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """A DeviceClass: its CEL selectors and the extended resource it backs (KEP-5004), if any."""

    name: str
    selectors: tuple[str, ...] = ()
    extended_resource: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimAsk:
    """What a pod's claims ask of GPUs: `gpus` whole GPUs, `mig` instances per profile, the GPU models the selectors
    accept (canonical names; empty: any), the claim names it could not resolve (not created yet, or of an unknown
    template) and notes for the scorer's reason (an expression not evaluated, a claim not found)."""

    gpus: int = 0
    mig: Mapping[str, int] = field(default_factory=dict)
    gpu_models: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def asks_gpus(self) -> bool:
        return self.gpus > 0 or bool(self.mig)


def _quantity(raw: object, path: str) -> int:
    value = quantity_value(str(raw)) if isinstance(raw, str | int) else None
    if value is None:
        raise PodSpecError(f"{path}: {raw!r} is not a Kubernetes quantity")
    return int(value.to_integral_value())


def _attribute_value(raw: Obj) -> object:
    for kind in ("string", "int", "bool", "version"):
        if kind in raw:
            return raw[kind]
    return None


def _qualified(driver: str, name: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def devices_of_slice(obj: Obj) -> tuple[Device, ...]:
    """The devices of a ResourceSlice object; `PodSpecError` naming the field when one cannot be read."""
    spec = obj.get("spec") or {}
    driver = str(spec.get("driver") or "")
    pool = str((spec.get("pool") or {}).get("name") or "")
    node = spec.get("nodeName") if isinstance(spec.get("nodeName"), str) else None
    out = []
    for i, d in enumerate(spec.get("devices") or []):
        path = f"spec.devices[{i}]"
        attributes = {_qualified(driver, k): _attribute_value(v or {}) for k, v in (d.get("attributes") or {}).items()}
        capacity = {
            _qualified(driver, k): _quantity((v or {}).get("value"), f"{path}.capacity.{k}.value")
            for k, v in (d.get("capacity") or {}).items()
        }
        consumes: dict[tuple[str, str], int] = {}
        for j, c in enumerate(d.get("consumesCounters") or []):
            for counter, amount in (c.get("counters") or {}).items():
                consumes[(str(c.get("counterSet")), counter)] = _quantity(
                    (amount or {}).get("value"), f"{path}.consumesCounters[{j}].counters.{counter}.value"
                )
        out.append(Device(driver, pool, str(d.get("name") or ""), node, attributes, capacity, consumes))
    return tuple(out)


def counters_of_slice(obj: Obj) -> dict[tuple[str, str, str], int]:
    """The shared counters a slice publishes (partitionable devices): (pool, counter set, counter) → amount."""
    spec = obj.get("spec") or {}
    pool = str((spec.get("pool") or {}).get("name") or "")
    out = {}
    for i, s in enumerate(spec.get("sharedCounters") or []):
        for counter, amount in (s.get("counters") or {}).items():
            out[(pool, str(s.get("name")), counter)] = _quantity(
                (amount or {}).get("value"), f"spec.sharedCounters[{i}].counters.{counter}.value"
            )
    return out


def _selectors(raw: object) -> tuple[str, ...]:
    out = []
    for s in raw if isinstance(raw, list) else []:
        expression = ((s or {}).get("cel") or {}).get("expression")
        if isinstance(expression, str):
            out.append(expression)
    return tuple(out)


def _request(raw: Obj, path: str) -> Request:
    name = str(raw.get("name") or "")
    exact = raw.get("exactly")
    if exact is None and raw.get("firstAvailable"):
        exact = raw["firstAvailable"][0]
    if not isinstance(exact, Mapping):
        raise PodSpecError(f"{path}: neither exactly nor firstAvailable is given")
    mode = exact.get("allocationMode") or "ExactCount"
    count = ALL_DEVICES if mode == "All" else exact.get("count", 1)
    if not isinstance(count, int) or (count < 1 and count != ALL_DEVICES):
        raise PodSpecError(f"{path}.exactly.count: {count!r} is not a positive integer")
    return Request(name, str(exact.get("deviceClassName") or ""), count, _selectors(exact.get("selectors")))


def requests_of_spec(spec: Obj) -> tuple[Request, ...]:
    """The device requests of a claim's (or a template's claim's) `spec`."""
    raw = (spec.get("devices") or {}).get("requests") or []
    return tuple(_request(r or {}, f"spec.devices.requests[{i}]") for i, r in enumerate(raw))


def _node_of_selector(selector: object) -> str | None:
    """The node an allocation's node selector names (`metadata.name In [node]`, as the scheduler writes it)."""
    for term in (selector or {}).get("nodeSelectorTerms") or [] if isinstance(selector, Mapping) else []:
        for f in term.get("matchFields") or []:
            values = f.get("values") or []
            if f.get("key") == "metadata.name" and f.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return None


def claim_of(obj: Obj) -> Claim:
    """A ResourceClaim object as a `Claim`; `PodSpecError` naming the field when it cannot be read."""
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    status = obj.get("status") or {}
    allocation = status.get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    refs = tuple(DeviceRef(str(r.get("driver")), str(r.get("pool")), str(r.get("device"))) for r in results)
    pods = tuple(
        pod_key(namespace, str(r.get("name")))
        for r in status.get("reservedFor") or []
        if r.get("resource") == "pods" and not r.get("apiGroup")
    )
    annotations = meta.get("annotations") or {}
    return Claim(
        namespace=namespace,
        name=str(meta.get("name") or ""),
        requests=requests_of_spec(obj.get("spec") or {}),
        allocated=refs,
        node=_node_of_selector(allocation.get("nodeSelector")) if allocation else None,
        pods=pods,
        extended=annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true",
    )


def device_class_of(obj: Obj) -> DeviceClass:
    spec = obj.get("spec") or {}
    extended = spec.get("extendedResourceName")
    return DeviceClass(
        str((obj.get("metadata") or {}).get("name") or ""),
        _selectors(spec.get("selectors")),
        extended if isinstance(extended, str) and extended else None,
    )


def served_by_claim(status: Obj | None) -> frozenset[tuple[str, str]]:
    """(container name, resource name) pairs of a pod that a claim serves (`status.extendedResourceClaimStatus`):
    the claim holds those devices, so the pod's own resources must not count them again."""
    extended = (status or {}).get("extendedResourceClaimStatus")
    mappings = extended.get("requestMappings") if isinstance(extended, Mapping) else None
    return frozenset(
        (str(m.get("containerName")), str(m.get("resourceName")))
        for m in (mappings if isinstance(mappings, list) else [])
        if isinstance(m, Mapping)
    )


def pod_claim_names(namespace: str, spec: Obj, status: Obj | None) -> tuple[list[str], list[str]]:
    """The ResourceClaims a pod refers to (keys `namespace/name`): by name, or generated from a template (its name
    from `status.resourceClaimStatuses`, written by the claim controller once it has made the claim); and the
    template keys of those not made yet."""
    statuses = (status or {}).get("resourceClaimStatuses")
    generated = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in (statuses if isinstance(statuses, list) else [])
        if isinstance(s, Mapping)
    }
    claims, templates = [], []
    for i, ref in enumerate(spec.get("resourceClaims") or []):
        name = ref.get("name")
        if ref.get("resourceClaimName"):
            claims.append(pod_key(namespace, str(ref["resourceClaimName"])))
        elif ref.get("resourceClaimTemplateName"):
            made = generated.get(str(name))
            if made:
                claims.append(pod_key(namespace, str(made)))
            else:
                templates.append(pod_key(namespace, str(ref["resourceClaimTemplateName"])))
        else:
            raise PodSpecError(
                f"spec.resourceClaims[{i}]: neither resourceClaimName nor resourceClaimTemplateName is given"
            )
    return claims, templates


# CEL ------------------------------------------------------------------------------------------------------------------

_ENV = celpy.Environment()


class _UnjudgedError(Exception):
    """A selector the evaluator cannot judge (syntax or a function it lacks)."""


def _cel_value(value: object) -> Any:
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    return celtypes.StringType(str(value))


def _device_activation(device: Device) -> Any:
    """The `device` variable of a DRA CEL selector: driver, attributes and capacity by domain."""
    attributes: dict[str, dict[str, object]] = {}
    for key, value in device.attributes.items():
        domain, _, name = key.rpartition("/")
        if value is not None:
            attributes.setdefault(domain, {})[name] = value
    capacity: dict[str, dict[str, object]] = {}
    for key, amount in device.capacity.items():
        domain, _, name = key.rpartition("/")
        capacity.setdefault(domain, {})[name] = amount
    return celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(device.driver),
            celtypes.StringType("attributes"): celtypes.MapType(
                {
                    celtypes.StringType(d): celtypes.MapType(
                        {celtypes.StringType(k): _cel_value(v) for k, v in values.items()}
                    )
                    for d, values in attributes.items()
                }
            ),
            celtypes.StringType("capacity"): celtypes.MapType(
                {
                    celtypes.StringType(d): celtypes.MapType(
                        {celtypes.StringType(k): celtypes.IntType(v) for k, v in values.items()}
                    )
                    for d, values in capacity.items()
                }
            ),
        }
    )


def _quantity_function(text: Any) -> Any:
    value = quantity_value(str(text))
    if value is None:
        raise _UnjudgedError(f"quantity({text!r}) is not a Kubernetes quantity")
    return celtypes.IntType(int(value.to_integral_value()))


def _compare_to(a: Any, b: Any) -> Any:
    left, right = Decimal(int(a)), Decimal(int(b))
    return celtypes.IntType((left > right) - (left < right))


# Kubernetes' CEL quantity library, as far as capacity selectors use it: capacity is handed over as an integer, so
# `quantity("40Gi")` is one too and `compareTo` compares them (`isGreaterThan`, `isLessThan` alike).
_FUNCTIONS: dict[str, Any] = {
    "quantity": _quantity_function,
    "compareTo": _compare_to,
    "isGreaterThan": lambda a, b: celtypes.BoolType(int(a) > int(b)),
    "isLessThan": lambda a, b: celtypes.BoolType(int(a) < int(b)),
}


class Selectors:
    """Compiled CEL selectors (cached per expression); `matches` judges one device."""

    def __init__(self) -> None:
        self._programs: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _program(self, expression: str) -> Any:
        program = self._programs.get(expression)
        if program is None:
            try:
                program = _ENV.program(_ENV.compile(expression), functions=_FUNCTIONS)
            except Exception as e:  # celpy's parse errors have no common base beyond Exception
                raise _UnjudgedError(f"{expression!r} does not compile: {_first_line(e)}") from e
            with self._lock:
                self._programs[expression] = program
        return program

    def matches(self, expressions: Iterable[str], device: Device) -> bool:
        """Whether every expression holds for `device`; `_UnjudgedError` when one cannot be evaluated. A lookup of an
        attribute or domain the device lacks makes the expression false for that device (it is no device of the
        kind the selector looks for)."""
        activation = {"device": _device_activation(device)}
        for expression in expressions:
            program = self._program(expression)
            try:
                result = program.evaluate(activation)
            except Exception as e:  # celpy raises its CELEvalError, or a Python error from a function
                result = e
            if isinstance(result, Exception):
                if _missing_key(result):
                    return False
                raise _UnjudgedError(f"{expression!r}: {_first_line(result)}") from result
            if not isinstance(result, celtypes.BoolType):
                raise _UnjudgedError(f"{expression!r} gives {type(result).__name__}, not a bool")
            if not bool(result):
                return False
        return True


def _missing_key(error: Exception) -> bool:
    """A lookup of a key the device's map lacks; not a function or name the evaluator does not know."""
    if "undeclared reference" in _first_line(error):
        return False
    return isinstance(error, KeyError) or any(a is KeyError for a in error.args)


def _first_line(error: Exception) -> str:
    """A short message of a celpy error (whose full text dumps the whole activation)."""
    head = error.args[0] if error.args else error
    return str(head).splitlines()[0].split(" (in activation")[0][:200]


# The index ------------------------------------------------------------------------------------------------------------


class DraIndex:
    """Every ResourceSlice, ResourceClaim, DeviceClass and ResourceClaimTemplate the watch has seen (replace on a
    re-list, set or remove per event). Writers hold a lock; readers take the current mappings."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slices: dict[str, tuple[Device, ...]] = {}
        self._counters: dict[str, dict[tuple[str, str, str], int]] = {}
        self._claims: dict[str, Claim] = {}
        self._classes: dict[str, DeviceClass] = {}
        self._templates: dict[str, tuple[Request, ...]] = {}
        self._by_ref: dict[DeviceRef, Device] = {}
        self.selectors = Selectors()

    # writers

    def _reindex(self) -> None:
        self._by_ref = {d.ref: d for devices in self._slices.values() for d in devices}

    def _put_slice(self, name: str, obj: Obj | None) -> None:
        self._slices.pop(name, None)
        self._counters.pop(name, None)
        if obj is not None:
            try:
                self._slices[name] = devices_of_slice(obj)
                self._counters[name] = counters_of_slice(obj)
            except PodSpecError as e:
                log.warning("ResourceSlice %s unreadable: %s", name, e)

    def set_slice(self, name: str, obj: Obj | None) -> None:
        """A ResourceSlice object (None: deleted); an unreadable one is logged and its devices dropped."""
        with self._lock:
            self._put_slice(name, obj)
            self._reindex()

    def replace_slices(self, objs: Iterable[Obj]) -> None:
        """Every ResourceSlice (a re-list), indexed once."""
        with self._lock:
            self._slices, self._counters = {}, {}
            for obj in objs:
                self._put_slice(str((obj.get("metadata") or {}).get("name")), obj)
            self._reindex()

    def set_claim(self, key: str, obj: Obj | None) -> None:
        """A ResourceClaim object under key `namespace/name` (None: deleted)."""
        with self._lock:
            self._claims.pop(key, None)
            if obj is not None:
                try:
                    self._claims[key] = claim_of(obj)
                except PodSpecError as e:
                    log.warning("ResourceClaim %s unreadable: %s", key, e)

    def replace_claims(self, objs: Iterable[Obj]) -> None:
        with self._lock:
            self._claims = {}
        for obj in objs:
            meta = obj.get("metadata") or {}
            self.set_claim(pod_key(str(meta.get("namespace") or ""), str(meta.get("name") or "")), obj)

    def set_class(self, name: str, obj: Obj | None) -> None:
        with self._lock:
            self._classes.pop(name, None)
            if obj is not None:
                self._classes[name] = device_class_of(obj)

    def replace_classes(self, objs: Iterable[Obj]) -> None:
        with self._lock:
            self._classes = {}
        for obj in objs:
            self.set_class(str((obj.get("metadata") or {}).get("name")), obj)

    def set_template(self, key: str, obj: Obj | None) -> None:
        with self._lock:
            self._templates.pop(key, None)
            if obj is not None:
                try:
                    self._templates[key] = requests_of_spec(((obj.get("spec") or {}).get("spec")) or {})
                except PodSpecError as e:
                    log.warning("ResourceClaimTemplate %s unreadable: %s", key, e)

    def replace_templates(self, objs: Iterable[Obj]) -> None:
        with self._lock:
            self._templates = {}
        for obj in objs:
            meta = obj.get("metadata") or {}
            self.set_template(pod_key(str(meta.get("namespace") or ""), str(meta.get("name") or "")), obj)

    # readers

    def devices(self) -> list[Device]:
        return list(self._by_ref.values())

    def held_by_pods(self) -> dict[str, PodAllocation]:
        """Per pod key, the GPUs its allocated claims hold: whole GPUs (count, pinned by UUID) and MIG instances
        (their compute share, pinned to the parent GPU). Several pods sharing one claim share its devices: the first
        of them holds them. An allocated claim reserved for no pod (its pod gone, the claim not yet deallocated)
        still holds its devices, as the scheduler counts them, under the key `claim:<namespace>/<name>`; deleting
        it frees them."""
        by_ref = self._by_ref
        out: dict[str, PodAllocation] = {}
        for claim in self._claims.values():
            if not claim.allocated:
                continue
            whole = 0
            milli = 0
            pinned: list[tuple[str, int]] = []
            node = claim.node
            for ref in claim.allocated:
                device = by_ref.get(ref)
                if device is None or not device.kind:
                    continue
                node = node or device.node or device.pool
                uuid = device.gpu_uuid
                if device.kind == GPU_TYPE:
                    whole += 1
                    if uuid:
                        pinned.append((uuid, WHOLE_GPU_MILLI))
                elif (profile := device.profile) is not None:
                    share = parse_profile(profile).milli
                    milli += share
                    if uuid:
                        pinned.append((uuid, share))
            if (whole == 0 and milli == 0) or node is None:
                continue
            pod = claim.pods[0] if claim.pods else f"claim:{claim.key}"
            previous = out.get(pod)
            if previous is not None:
                whole += previous.gpus
                milli += previous.gpu_milli
                pinned = [*previous.pinned, *pinned]
            out[pod] = PodAllocation(
                pod=pod,
                node=node,
                gpus=whole,
                gpu_milli=0 if whole else min(WHOLE_GPU_MILLI, milli),
                pinned=tuple(pinned),
            )
        return out

    def mig_by_node(self) -> dict[str, tuple[MigSlot, ...]]:
        """Per node, the MIG instances NVIDIA's driver publishes (partitionable devices included): parent GPU UUID,
        profile, and whether taken — allocated to a claim, or, for a partitionable device, no longer fitting the
        shared counters the allocated devices leave (another placement of the same memory slices is in use)."""
        allocated = {ref for c in self._claims.values() for ref in c.allocated}
        left: dict[tuple[str, str, str], int] = {}
        for counters in self._counters.values():
            left.update(counters)
        for ref in allocated:
            device = self._by_ref.get(ref)
            if device is not None:
                for (counter_set, counter), amount in device.consumes.items():
                    key = (device.pool, counter_set, counter)
                    if key in left:
                        left[key] -= amount
        out: dict[str, list[MigSlot]] = {}
        for device in sorted(self._by_ref.values(), key=lambda d: d.ref):
            profile, parent = device.profile, device.gpu_uuid
            if profile is None or parent is None:
                continue
            fits = all(left.get((device.pool, s, c), amount) >= amount for (s, c), amount in device.consumes.items())
            taken = device.ref in allocated or not fits
            out.setdefault(device.node or device.pool, []).append((parent, profile, taken))
        return {node: tuple(slots) for node, slots in out.items()}

    def _class_selectors(self, request: Request) -> tuple[str, ...] | None:
        device_class = self._classes.get(request.device_class)
        return None if device_class is None else device_class.selectors

    def claim_ask(  # noqa: PLR0912, PLR0915 - one pass over a pod's claims: by name, by template, allocated or not
        self, namespace: str, spec: Obj, status: Obj | None = None
    ) -> ClaimAsk:
        """What a pod's `spec.resourceClaims` ask of GPUs (see the module doc); `PodSpecError` for a malformed
        reference."""
        claims, templates = pod_claim_names(namespace, spec, status)
        notes: list[str] = []
        requests: list[Request] = []
        for key in claims:
            claim = self._claims.get(key)
            if claim is None:
                notes.append(f"ResourceClaim {key} not found")
            else:
                requests.extend(claim.requests)
        for key in templates:
            template = self._templates.get(key)
            if template is None:
                notes.append(f"ResourceClaimTemplate {key} not found")
            else:
                requests.extend(template)
        gpus = 0
        mig: dict[str, int] = {}
        models: set[str] | None = None
        devices = [d for d in self._by_ref.values() if d.kind]
        for request in requests:
            class_selectors = self._class_selectors(request)
            if class_selectors is None:
                notes.append(f"DeviceClass {request.device_class} not found")
                continue
            expressions = (*class_selectors, *request.selectors)
            matched: list[Device] = []
            judged = True
            for device in devices:
                try:
                    if self.selectors.matches(expressions, device):
                        matched.append(device)
                except _UnjudgedError as e:
                    judged = False
                    notes.append(f"selector not evaluated ({e}); any GPU model taken as acceptable")
                    break
            # A request whose selectors cannot be judged counts as one for whole GPUs (it asks for some GPU).
            kinds = {d.kind for d in matched} if judged else {GPU_TYPE}
            if not kinds:
                continue  # a request for devices that are no GPUs (a NIC, say), or that no GPU matches
            count = request.count
            if MIG_TYPE in kinds and GPU_TYPE not in kinds:
                profiles = {d.profile for d in matched if d.profile}
                if len(profiles) == 1:
                    (profile,) = profiles
                    mig[profile] = mig.get(profile, 0) + max(1, count)
                else:
                    notes.append(f"request {request.name} matches MIG instances of several profiles")
                    smallest = min(profiles, key=parse_profile) if profiles else None
                    if smallest:
                        mig[smallest] = mig.get(smallest, 0) + max(1, count)
                continue
            if count == ALL_DEVICES:
                notes.append(f"request {request.name} asks for all matching devices; counted as one GPU")
                count = 1
            gpus += count
            if judged:
                accepted = {m for d in matched if d.product and (m := normalize_gpu_model(d.product))}
                models = accepted if models is None else models & accepted
        return ClaimAsk(gpus=gpus, mig=mig, gpu_models=tuple(sorted(models or ())), notes=tuple(dict.fromkeys(notes)))


def with_claims(request: PodRequest, ask: ClaimAsk) -> PodRequest:
    """A pod's request from its own resources (`request`) with what its claims ask added: the whole GPUs summed, the
    MIG instances added to its own, the GPU models both accept (either's where the other sets none)."""
    if ask.mig:
        mig = dict(request.mig)
        for profile, count in ask.mig.items():
            mig[profile] = mig.get(profile, 0) + count
        request = replace(request, mig=tuple(sorted(mig.items())))
    if not ask.gpus:
        return request
    if request.gpu_models and ask.gpu_models:
        models = tuple(m for m in request.gpu_models if m in ask.gpu_models)
        if not models:
            raise PodSpecError(
                f"spec.resourceClaims: the claims accept GPU models {', '.join(ask.gpu_models)}, the node "
                f"selector {', '.join(request.gpu_models)}: no GPU can satisfy both"
            )
    else:
        models = request.gpu_models or ask.gpu_models
    return replace(
        request,
        gpus=request.whole_gpus + ask.gpus,
        gpu_milli=0,
        gpu_memory_bytes=None,
        gpu_models=models,
    )
