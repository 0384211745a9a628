"""What the kubelet says about the pods of its node and the devices they hold (pure: no socket, no gRPC).

The kubelet's pod-resources API (k8s.io/kubelet/pkg/apis/podresources/v1, served on
/var/lib/kubelet/pod-resources/kubelet.sock) answers `List` with every active pod of the node, its containers and
the device IDs each container was allocated by a device plugin. That is the authority on which pod holds which
GPU, and it names only pods of this node — so the collector asks the API server only about those pods, by name,
instead of listing pods.

The messages are decoded here from protobuf's wire format, reading only the fields the collector uses (numbers from
upstream's api.proto; every other field — CPU IDs, memory, topology, dynamic resources — is skipped as the wire
format allows): `decode_list_response` is total — any bytes give pods or a `PodResourcesDecodeError`.

NVIDIA's device plugin (k8s-device-plugin, internal/rm) names devices by UUID: a whole GPU `GPU-<uuid>`, a MIG
device `MIG-<uuid>` (or, from older drivers, `MIG-GPU-<parent uuid>/<gi>/<ci>`), and a time-sliced or MPS replica
`<id>::<n>` (its AnnotatedID). `device_uuid` strips the replica; `holds_gpu` tells a GPU resource from any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from collector.snapshot import GpuSnapshot

# Where the kubelet serves the API (pkg/kubelet/apis/podresources: the kubelet's root dir + pod-resources/).
DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")

# The resources NVIDIA's device plugin advertises: whole GPUs (also renamed time-sliced or MPS replicas, e.g.
# `nvidia.com/gpu.shared`) and MIG devices under the mixed strategy (`nvidia.com/mig-1g.10gb`).
GPU_RESOURCE_NAME = "nvidia.com/gpu"
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu.", "nvidia.com/mig-")
REPLICA_SEPARATOR = "::"


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    """The devices of one resource allocated to one container."""

    resource_name: str
    device_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class KubeletContainer:
    name: str
    devices: tuple[ContainerDevices, ...] = ()


@dataclass(frozen=True, slots=True)
class KubeletPod:
    """A pod as the kubelet lists it: namespace and name (no UID, labels or owners: those are the API server's)."""

    namespace: str
    name: str
    containers: tuple[KubeletContainer, ...] = ()

    def gpu_devices(self) -> Iterator[tuple[str, str, str]]:
        """(container, resource, device ID) of every GPU device the pod holds."""
        for container in self.containers:
            for devices in container.devices:
                if is_gpu_resource(devices.resource_name):
                    for device_id in devices.device_ids:
                        yield container.name, devices.resource_name, device_id

    def holds_gpu(self) -> bool:
        return next(self.gpu_devices(), None) is not None


def is_gpu_resource(resource_name: str) -> bool:
    """Whether a device plugin resource is a GPU (or a share or slice of one)."""
    return resource_name == GPU_RESOURCE_NAME or resource_name.startswith(GPU_RESOURCE_PREFIXES)


def device_uuid(device_id: str) -> str:
    """The GPU or MIG UUID a device ID names: `GPU-a::3` → `GPU-a` (a replica of a shared GPU); a legacy MIG ID
    `MIG-GPU-<uuid>/<gi>/<ci>` is kept whole (its parent GPU is `parent_gpu_uuid`'s)."""
    return device_id.partition(REPLICA_SEPARATOR)[0]


def parent_gpu_uuid(device_id: str) -> str | None:
    """The GPU UUID in a legacy MIG device ID (`MIG-GPU-<uuid>/<gi>/<ci>` → `GPU-<uuid>`); None for other IDs."""
    uuid = device_uuid(device_id)
    if not uuid.startswith("MIG-GPU-"):
        return None
    return uuid.removeprefix("MIG-").partition("/")[0]


@dataclass(frozen=True, slots=True)
class DeviceAllocation:
    """One GPU device (a whole GPU, a replica of a shared one, a MIG device) the kubelet allocated to a container."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str


def gpu_allocations(pods: Iterable[KubeletPod]) -> tuple[DeviceAllocation, ...]:
    return tuple(
        DeviceAllocation(pod.namespace, pod.name, container, resource, device_id)
        for pod in pods
        for container, resource, device_id in pod.gpu_devices()
    )


def gpu_of_device(device_id: str, gpus: Sequence[GpuSnapshot]) -> GpuSnapshot | None:
    """The GPU of this node a device ID names (a MIG device's parent GPU); None when NVML does not show it."""
    uuid = device_uuid(device_id)
    parent = parent_gpu_uuid(device_id)
    for gpu in gpus:
        if gpu.uuid in (uuid, parent) or any(mig.uuid == uuid for mig in gpu.mig_devices):
            return gpu
    return None


class PodResourcesUnavailableError(OSError):
    """The kubelet's pod-resources API did not give a pod list (the message says why)."""


class PodResourcesDecodeError(ValueError):
    """The kubelet's answer is not a ListPodResourcesResponse (truncated, or not protobuf at all)."""


# Field numbers of upstream's api.proto (package v1) for what is read; everything else is skipped.
_LIST_POD_RESOURCES = 1  # ListPodResourcesResponse.pod_resources
_POD_NAME, _POD_NAMESPACE, _POD_CONTAINERS = 1, 2, 3  # PodResources
_CONTAINER_NAME, _CONTAINER_DEVICES = 1, 2  # ContainerResources
_DEVICES_RESOURCE_NAME, _DEVICES_IDS = 1, 2  # ContainerDevices

_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = 0
    for shift_index in range(_MAX_VARINT_BYTES):
        if position >= len(data):
            raise PodResourcesDecodeError("truncated varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << (7 * shift_index)
        if not byte & 0x80:
            return value, position
    raise PodResourcesDecodeError("varint longer than 10 bytes")


def _fields(data: bytes) -> Iterator[tuple[int, bytes | None]]:
    """(field number, payload) of each field of one message; payload None for the numeric wire types (which no
    field read here has)."""
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise PodResourcesDecodeError("field number 0")
        if wire_type == _VARINT:
            _, position = _varint(data, position)
            yield number, None
        elif wire_type in (_FIXED64, _FIXED32):
            position += 8 if wire_type == _FIXED64 else 4
            if position > len(data):
                raise PodResourcesDecodeError("truncated fixed-size field")
            yield number, None
        elif wire_type == _LENGTH_DELIMITED:
            length, position = _varint(data, position)
            end = position + length
            if end > len(data):
                raise PodResourcesDecodeError(f"field {number}: length {length} runs past the message")
            yield number, data[position:end]
            position = end
        else:  # 3 and 4 (groups) are not used by proto3; 6 and 7 do not exist
            raise PodResourcesDecodeError(f"field {number}: wire type {wire_type} not expected")


def _text(number: int, payload: bytes | None) -> str:
    if payload is None:
        raise PodResourcesDecodeError(f"field {number}: expected a string, got a number")
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PodResourcesDecodeError(f"field {number}: not UTF-8") from e


def _message(number: int, payload: bytes | None) -> bytes:
    if payload is None:
        raise PodResourcesDecodeError(f"field {number}: expected a message, got a number")
    return payload


def _devices(data: bytes) -> ContainerDevices:
    resource_name = ""
    device_ids: list[str] = []
    for number, payload in _fields(data):
        if number == _DEVICES_RESOURCE_NAME:
            resource_name = _text(number, payload)
        elif number == _DEVICES_IDS:
            device_ids.append(_text(number, payload))
    return ContainerDevices(resource_name, tuple(device_ids))


def _container(data: bytes) -> KubeletContainer:
    name = ""
    devices: list[ContainerDevices] = []
    for number, payload in _fields(data):
        if number == _CONTAINER_NAME:
            name = _text(number, payload)
        elif number == _CONTAINER_DEVICES:
            devices.append(_devices(_message(number, payload)))
    return KubeletContainer(name, tuple(devices))


def _pod(data: bytes) -> KubeletPod:
    name = namespace = ""
    containers: list[KubeletContainer] = []
    for number, payload in _fields(data):
        if number == _POD_NAME:
            name = _text(number, payload)
        elif number == _POD_NAMESPACE:
            namespace = _text(number, payload)
        elif number == _POD_CONTAINERS:
            containers.append(_container(_message(number, payload)))
    return KubeletPod(namespace, name, tuple(containers))


def decode_list_response(data: bytes) -> tuple[KubeletPod, ...]:
    """The pods of a serialized ListPodResourcesResponse; raises PodResourcesDecodeError for anything else."""
    return tuple(_pod(_message(number, payload)) for number, payload in _fields(data) if number == _LIST_POD_RESOURCES)
