"""MIG instances a pod asks for by resource name, as the NVIDIA device plugin's mixed strategy advertises them
(`nvidia.com/mig-1g.10gb: 1`): summed as kube-scheduler sums any resource (`advisor.cluster.pods.pod_amount`), per
profile (`advisor.placement.mig`). Kept apart from `advisor.cluster.pods`, which reads whole GPUs and shares."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from advisor.cluster.pods import ContainerResources, PodSpecError, pod_amount
from advisor.placement.mig import MigProfileError, profile_of_resource
from advisor.placement.types import PodRequest


def with_mig_resources(
    request: PodRequest, containers: Sequence[ContainerResources], init_containers: Sequence[ContainerResources] = ()
) -> PodRequest:
    """`request` with the MIG instances its containers ask for by resource name; `PodSpecError` naming the resource
    when its profile is not one."""
    names = sorted(
        {k for c in (*containers, *init_containers) for k in (*c.limits, *c.requests) if profile_of_resource_name(k)}
    )
    if not names:
        return request
    asks = dict(request.mig)
    for name in names:
        try:
            profile = profile_of_resource(name)
        except MigProfileError as e:
            raise PodSpecError(f"spec.containers[].resources: {name}: {e}") from e
        assert profile is not None
        count = pod_amount(containers, init_containers, name)
        if count > 0:
            asks[profile.name] = asks.get(profile.name, 0) + count
    return replace(request, mig=tuple(sorted(asks.items()))) if asks else request


def profile_of_resource_name(name: str) -> bool:
    """Whether a resource name is a mixed-strategy MIG resource (its profile may still be malformed)."""
    return name.startswith("nvidia.com/mig-")
