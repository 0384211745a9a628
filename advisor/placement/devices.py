"""Which device IDs a device plugin should hand a container: the advisor's answer to GetPreferredAllocation.

The kubelet asks a device plugin, per container, for `allocation_size` devices out of `available_deviceIDs`, always
including `must_include_deviceIDs` (devices the pod's init containers already hold); it names no pod. The NVIDIA
device plugin's device IDs are GPU UUIDs, `UUID::n` for the n-th replica of a time-sliced GPU. This module maps them
to the node's GPUs as the collector reported them and picks the set with the best links between its GPUs (worst
link, then mean link), spreading over distinct GPUs before doubling up on one, preferring less-used GPUs. Pure: the
route hands over the node's state and its GPU UUIDs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from advisor.placement.types import WORST_LINK_RANK, NodeState

REPLICA_SEPARATOR = "::"


class DeviceRequestError(ValueError):
    """A preferred-allocation request that cannot be answered; the message starts with the field path."""


@dataclass(frozen=True, slots=True)
class _Device:
    device_id: str
    order: int
    position: int | None  # the GPU's position in NodeState.gpus; None when the collector did not report it


def gpu_uuid(device_id: str) -> str:
    """The GPU UUID of a device ID (a time-sliced replica `UUID::n` is on GPU `UUID`)."""
    return device_id.split(REPLICA_SEPARATOR, 1)[0]


def check_request(available: Sequence[str], must_include: Sequence[str], size: int, field: str) -> None:
    """The kubelet's guarantees, checked: must-include devices are available and fit in `size`, `size` devices exist.
    `DeviceRequestError` names the field."""
    if size < 0:
        raise DeviceRequestError(f"{field}.allocation_size: must be >= 0, got {size}")
    offered = set(available)
    for i, device in enumerate(must_include):
        if device not in offered:
            raise DeviceRequestError(f"{field}.must_include_deviceIDs[{i}]: {device!r} is not in available_deviceIDs")
    if size < len(set(must_include)):
        raise DeviceRequestError(
            f"{field}.allocation_size: {size} is fewer than the {len(set(must_include))} must_include_deviceIDs"
        )
    if size > len(offered):
        raise DeviceRequestError(f"{field}.allocation_size: {size} exceeds the {len(offered)} available_deviceIDs")


def preferred_devices(
    node: NodeState | None,
    uuids: Mapping[int, str],
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
) -> list[str]:
    """`size` device IDs out of `available`, `must_include` first, then the best-connected, least-used GPUs.

    `uuids` maps a GPU's index (`GpuState.index`) to its UUID. Devices of GPUs the collector did not report (or all,
    without telemetry for the node) come last, in the kubelet's order. Call `check_request` first.
    """
    positions = {}
    if node is not None:
        by_index = {g.index: pos for pos, g in enumerate(node.gpus)}
        positions = {uuid: by_index[i] for i, uuid in uuids.items() if i in by_index}
    devices = [_Device(d, order, positions.get(gpu_uuid(d))) for order, d in enumerate(dict.fromkeys(available))]
    must = set(must_include)
    chosen = [d for d in devices if d.device_id in must]
    rest = [d for d in devices if d.device_id not in must]
    if node is None or size <= len(chosen):
        return [d.device_id for d in (chosen + rest)[:size]]
    # Without must-include devices, grow from every device and keep the best set; with them, from them.
    seeds = [[d] for d in rest] if not chosen else [[]]
    candidates = [_grow(node, chosen + seed, [d for d in rest if d not in seed], size) for seed in seeds]
    return [d.device_id for d in min(candidates, key=lambda picked: _cost(node, picked))]


def _link(node: NodeState, a: int | None, b: int | None) -> int:
    if a is None or b is None:
        return WORST_LINK_RANK
    return node.topology.ranks[a][b]


def _used_milli(node: NodeState, device: _Device) -> int:
    return node.gpus[device.position].allocated_milli if device.position is not None else 0


def _grow(node: NodeState, picked: list[_Device], rest: list[_Device], size: int) -> list[_Device]:
    """Add devices one at a time: a GPU not yet in the set, then the best worst link and total link to the set,
    then the least-used GPU, then the kubelet's order (unknown GPUs sort last on links)."""
    picked, rest = list(picked), list(rest)
    while len(picked) < size:
        taken = {d.position for d in picked if d.position is not None}

        def key(d: _Device, taken: set[int] = taken) -> tuple[int, int, int, int, int]:
            links = [_link(node, d.position, p.position) for p in picked]
            repeat = int(d.position is not None and d.position in taken)
            unknown = int(d.position is None)
            return (repeat, unknown, max(links, default=0), sum(links), _used_milli(node, d) * 10**6 + d.order)

        nxt = min(rest, key=key)
        picked.append(nxt)
        rest.remove(nxt)
    return picked


def _cost(node: NodeState, picked: Sequence[_Device]) -> tuple[int, float, int]:
    """Worst link, mean link, then how much of the chosen GPUs others already use: lower is better."""
    pairs = [_link(node, a.position, b.position) for i, a in enumerate(picked) for b in picked[i + 1 :]]
    worst = max(pairs, default=0)
    mean = sum(pairs) / len(pairs) if pairs else 0.0
    return worst, mean, sum(_used_milli(node, d) for d in picked)
