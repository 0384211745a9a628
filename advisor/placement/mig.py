"""MIG instances as placement capacity: profile names, what a pod asks in them, and the fragmentation they leave.

A GPU partitioned with Multi-Instance GPU offers fixed instances, each of one profile (`1g.10gb`, `3g.40gb`, …: compute
slices `g` of the GPU's seven, then its memory). A pod asks for instances by profile — under the device plugin's
mixed strategy as extended resources `nvidia.com/mig-<profile>`, through Dynamic Resource Allocation as a claim whose
selector names the profile (`advisor.cluster.dra`) — and can run only on an instance of that very profile: the device
plugin and NVIDIA's DRA driver hand out the instance asked for, never a larger one in its place. Free instances that
no pending pod's profile fits are stranded: the packing score counts them as fragmentation, as FGD counts GPU shares
no task of the mix fits.

Pure: callers give the free instances of a node (from the collector's snapshot or from DRA's partitionable devices)
and the profiles that pods ask for.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from advisor.placement.types import WHOLE_GPU_MILLI, MigInstance

MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
"""The device plugin's mixed-strategy resource of one profile: `nvidia.com/mig-1g.10gb`."""
COMPUTE_SLICES = 7
"""Compute slices of a MIG-capable GPU (A100, H100, H200, B200 all have seven)."""

# `1g.10gb`, `3g.40gb`, `1c.3g.40gb` (a compute instance of a larger one), and the variants NVIDIA's driver names
# with a suffix: `+me` (with a media engine), `+me.all` (all of them), `+gfx` (graphics), `-me` (without media
# engines). The device plugin's mixed-strategy resource names write `+` as `.` (`nvidia.com/mig-1g.10gb.me`), since a
# resource name cannot hold a `+`; both spellings are one profile, named as NVML names it (`1g.10gb+me`).
_PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(?:[+.](me\.all|me|gfx)|(-me))?$")


# The GPU instance profiles of NVIDIA's MIG-capable GPUs (A30, A100, H100, H200, GH200, B200, GB200, B300, GB300),
# as NVIDIA's MIG partition editor's default configuration lists them (2026-08). The extender's `managedResources`
# must name each mixed-strategy resource, since kube-scheduler sends a pod to an extender only when it asks for one
# of them by name (tests/deploy checks deploy/ lists exactly `MIG_RESOURCE_NAMES`). Scoring reads any well-formed
# profile, listed here or not.
KNOWN_PROFILES = (
    "1g.5gb",
    "1g.5gb+me",
    "1g.6gb",
    "1g.6gb+me",
    "1g.10gb",
    "1g.10gb+me",
    "1g.12gb",
    "1g.12gb+me",
    "1g.18gb",
    "1g.18gb+me",
    "1g.20gb",
    "1g.23gb",
    "1g.23gb+me",
    "1g.24gb",
    "1g.24gb-me",
    "1g.24gb+gfx",
    "1g.24gb+me",
    "1g.24gb+me.all",
    "1g.34gb",
    "1g.34gb+me",
    "1g.35gb",
    "1g.35gb+me",
    "1g.36gb",
    "1g.45gb",
    "1g.47gb",
    "1g.67gb",
    "1g.70gb",
    "2g.10gb",
    "2g.12gb",
    "2g.12gb+me",
    "2g.20gb",
    "2g.24gb",
    "2g.35gb",
    "2g.36gb",
    "2g.45gb",
    "2g.47gb",
    "2g.48gb",
    "2g.48gb-me",
    "2g.48gb+gfx",
    "2g.48gb+me.all",
    "2g.67gb",
    "2g.70gb",
    "3g.20gb",
    "3g.40gb",
    "3g.47gb",
    "3g.48gb",
    "3g.71gb",
    "3g.72gb",
    "3g.90gb",
    "3g.93gb",
    "3g.95gb",
    "3g.135gb",
    "3g.139gb",
    "4g.20gb",
    "4g.24gb",
    "4g.40gb",
    "4g.47gb",
    "4g.48gb",
    "4g.71gb",
    "4g.72gb",
    "4g.90gb",
    "4g.93gb",
    "4g.95gb",
    "4g.96gb",
    "4g.96gb+gfx",
    "4g.135gb",
    "4g.139gb",
    "7g.40gb",
    "7g.80gb",
    "7g.94gb",
    "7g.96gb",
    "7g.141gb",
    "7g.144gb",
    "7g.180gb",
    "7g.186gb",
    "7g.189gb",
    "7g.269gb",
    "7g.278gb",
)


class MigProfileError(ValueError):
    """A MIG profile name that is not `<g>g.<memory>gb` (optionally `<c>c.` first, or a suffix such as `+me`)."""


@dataclass(frozen=True, slots=True, order=True)
class MigProfile:
    """One MIG profile: `compute_slices` of the GPU's seven, `memory_gb` of its memory; `name` as NVIDIA writes it."""

    compute_slices: int
    memory_gb: int
    name: str

    @property
    def milli(self) -> int:
        """The share of its GPU the instance takes, in thousandths (its compute slices of seven, rounded down)."""
        return min(WHOLE_GPU_MILLI, self.compute_slices * WHOLE_GPU_MILLI // COMPUTE_SLICES)


def parse_profile(name: str) -> MigProfile:
    """`1g.10gb` → MigProfile(1, 10, "1g.10gb"); `1g.10gb.me` (a resource name's spelling) → MigProfile(1, 10,
    "1g.10gb+me"); `MigProfileError` naming the value when it is not a profile."""
    text = name.strip().lower()
    m = _PROFILE.match(text)
    if m is None:
        raise MigProfileError(f"MIG profile {name!r} is not of the form <slices>g.<memory>gb (e.g. 1g.10gb)")
    compute, slices, memory, extension, without = m.groups()
    g = int(slices)
    if not 1 <= g <= COMPUTE_SLICES or (compute is not None and not 1 <= int(compute) <= g):
        raise MigProfileError(f"MIG profile {name!r} has {g} compute slices; a GPU has 1..{COMPUTE_SLICES}")
    suffix = f"+{extension}" if extension else (without or "")
    canonical = f"{compute}c.{g}g.{memory}gb{suffix}" if compute else f"{g}g.{memory}gb{suffix}"
    return MigProfile(int(compute) if compute else g, int(memory), canonical)


def profile_of_resource(resource: str) -> MigProfile | None:
    """The profile of a mixed-strategy resource name (`nvidia.com/mig-3g.40gb`), None for any other resource;
    `MigProfileError` when the name has the prefix but no valid profile."""
    if not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    return parse_profile(resource[len(MIG_RESOURCE_PREFIX) :])


def mig_asks(resources: Mapping[str, int]) -> dict[str, int]:
    """The MIG instances a pod asks per profile name from its summed resources (`nvidia.com/mig-*` with a count)."""
    asks: dict[str, int] = {}
    for name, count in resources.items():
        profile = profile_of_resource(name)
        if profile is not None and count > 0:
            asks[profile.name] = asks.get(profile.name, 0) + count
    return asks


def take(instances: Iterable[MigInstance], held: Iterable[Iterable[tuple[str, int]]]) -> tuple[MigInstance, ...]:
    """`instances` with those that pods holding `held` (each pod's (profile, count)) occupy marked taken: per pod and
    profile, free instances of that profile on the GPUs with the fewest free instances first (as `choose` places
    them). A pod holding more than the node has free of a profile takes what there is."""
    listed = list(instances)
    for asks in held:
        for profile, count in sorted(asks):
            free_on_gpu = Counter(i.gpu for i in listed if not i.taken)
            candidates = sorted(
                (pos for pos, i in enumerate(listed) if not i.taken and i.profile == profile),
                key=lambda pos: (free_on_gpu[listed[pos].gpu], listed[pos].gpu, pos),
            )
            for pos in candidates[:count]:
                listed[pos] = MigInstance(listed[pos].gpu, listed[pos].profile, True)
    return tuple(listed)


def free_counts(instances: Iterable[MigInstance]) -> Counter[str]:
    """Free instances of a node per profile name."""
    return Counter(i.profile for i in instances if not i.taken)


def fits(instances: Iterable[MigInstance], asks: Mapping[str, int]) -> bool:
    """Whether the node's free instances hold every profile `asks` wants, as many as it wants."""
    free = free_counts(instances)
    return all(free[profile] >= count for profile, count in asks.items())


def stranded(instances: Iterable[MigInstance], pending_profiles: Iterable[str]) -> int:
    """Free instances whose profile no pending pod asks for: MIG fragmentation (instances nobody waiting can use)."""
    wanted = set(pending_profiles)
    return sum(1 for i in instances if not i.taken and i.profile not in wanted)


def mig_packing_ratio(
    instances: Iterable[MigInstance], asks: Mapping[str, int], pending_profiles: Iterable[str]
) -> float | None:
    """How well placing `asks` on this node packs its MIG instances, 0..1 (None when it cannot hold them): 1 when
    the node keeps no free instance that no pending profile fits and it takes instances that would otherwise stay
    free; lower the more free instances would remain stranded after the placement."""
    listed = list(instances)
    if not fits(listed, asks):
        return None
    remaining = free_counts(listed)
    for profile, count in asks.items():
        remaining[profile] -= count
    free_after = sum(remaining.values())
    if free_after == 0:
        return 1.0
    wanted = set(pending_profiles) | set(asks)
    stranded_after = sum(n for profile, n in remaining.items() if profile not in wanted)
    # Fewer free instances left behind packs tighter (best fit); stranded ones count double (nobody can use them).
    total = len(listed)
    return max(0.0, 1.0 - (free_after + stranded_after) / (2 * total))


def choose(instances: Iterable[MigInstance], asks: Mapping[str, int]) -> tuple[int, ...] | None:
    """The parent GPU of each instance a pod asking `asks` would get (sorted), None when the node cannot hold it.
    Of a profile's free instances, those on the GPUs with the fewest free instances go first (best fit per GPU:
    emptier GPUs stay whole for larger profiles)."""
    listed = list(instances)
    if not fits(listed, asks):
        return None
    free_on_gpu = Counter(i.gpu for i in listed if not i.taken)
    chosen: list[int] = []
    for profile, count in sorted(asks.items()):
        candidates = sorted(
            (i for i in listed if not i.taken and i.profile == profile), key=lambda i: (free_on_gpu[i.gpu], i.gpu)
        )
        chosen.extend(i.gpu for i in candidates[:count])
    return tuple(sorted(chosen))


def mig_verdict(
    instances: Iterable[MigInstance], asks: Mapping[str, int], pending_profiles: Iterable[str] = ()
) -> tuple[bool, tuple[int, ...], float, str]:
    """A node's verdict for a pod asking MIG instances: (feasible, parent GPUs of the instances it gets, packing
    0..1, the reason's detail). Free instances of a profile neither `asks` nor `pending_profiles` (the pending
    queue's) names are stranded."""
    listed = list(instances)
    wanted = ", ".join(f"{n} x {p}" for p, n in sorted(asks.items()))
    gpus = choose(listed, asks)
    if gpus is None:
        free = free_counts(listed)
        have = ", ".join(f"{n} x {p}" for p, n in sorted(free.items())) or "none"
        return False, (), 0.0, f", no free MIG instance for {wanted} (free: {have})"
    profiles = set(pending_profiles) | set(asks)
    packing = mig_packing_ratio(listed, asks, profiles) or 0.0
    left = stranded(take(listed, [asks.items()]), profiles)
    return (
        True,
        gpus,
        packing,
        f", MIG {wanted} on GPU {', '.join(map(str, gpus))}; {left} free instance(s) no pending pod's profile fits",
    )


def resource_name(profile: str) -> str:
    """The device plugin's mixed-strategy resource of a profile: `1g.10gb+me` → `nvidia.com/mig-1g.10gb.me`."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


MIG_RESOURCE_NAMES = tuple(resource_name(p) for p in KNOWN_PROFILES)
"""Every mixed-strategy resource name of `KNOWN_PROFILES`, as the extender's `managedResources` lists them."""
