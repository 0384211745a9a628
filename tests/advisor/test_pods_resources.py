"""A pod's CPU/memory requests as kube-scheduler counts them, and a node's allocatable CPU/memory."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity

from advisor.api.schemas import PodQuery, V1Node, V1Pod
from advisor.cluster.pods import ContainerResources, PodSpecError, allocatable_of, cpu_memory_request, quantity_value
from tests.advisor.factories import v1_pod


def c(requests: dict[str, object] | None = None, limits: dict[str, object] | None = None) -> ContainerResources:
    return ContainerResources(limits=limits or {}, requests=requests or {})


@pytest.mark.parametrize(
    ("cpu", "memory", "expected"),
    [
        ("500m", "512Mi", (500, 512)),
        ("2", "1Gi", (2000, 1024)),
        (3, 2**30, (3000, 1024)),
        ("1e3", "1e9", (1_000_000, 954)),  # 1e9 bytes = 953.67 MiB, rounded up
        ("0.1m", "1", (1, 1)),  # fractions round up, as the API server rounds a request
        ("1.5", "100M", (1500, 96)),
        ("250m", "1500Ki", (250, 2)),
    ],
)
def test_quantities_are_parsed_like_kubernetes(cpu: object, memory: object, expected: tuple[int, int]) -> None:
    assert cpu_memory_request([c({"cpu": cpu, "memory": memory})]) == expected


def test_init_containers_count_alone_and_overhead_is_added() -> None:
    containers = [c({"cpu": "1", "memory": "1Gi"}), c({"cpu": "500m", "memory": "3Gi"})]
    init = [c({"cpu": "2", "memory": "512Mi"}), c({"cpu": "100m", "memory": "8Gi"})]
    # cpu max(1500, 2000) = 2000, memory max(4096, 8192) = 8192, plus the overhead
    assert cpu_memory_request(containers, init, {"cpu": "250m", "memory": "128Mi"}) == (2250, 8320)
    assert cpu_memory_request(containers) == (1500, 4096)


def test_a_container_with_only_limits_requests_its_limits_and_one_with_neither_nothing() -> None:
    assert cpu_memory_request([c(limits={"cpu": "4", "memory": "2Gi"}), c()]) == (4000, 2048)
    assert cpu_memory_request([c({"cpu": "1"}, {"cpu": "4", "memory": "2Gi"})]) == (1000, 2048)


@pytest.mark.parametrize("bad", ["-1", "lots", "1Zi", True, None, [1]])
def test_an_unreadable_quantity_names_the_field(bad: object) -> None:
    with pytest.raises(PodSpecError, match=r"spec.initContainers\[0\].resources.requests.cpu"):
        cpu_memory_request([c()], [c({"cpu": bad})])


def test_the_extender_pod_carries_its_cpu_and_memory() -> None:
    # main requests cpu 4 / memory 32Gi; the sidecar gives limits only (100m / 64Mi), which are its requests
    pod = V1Pod.model_validate(v1_pod(gpus=2)).to_request()
    assert (pod.gpus, pod.cpu_milli, pod.memory_mib) == (2, 4100, 32832)
    raw = v1_pod(gpus=None)
    raw["spec"]["overhead"] = {"cpu": "100m", "memory": "64Mi"}
    pod = V1Pod.model_validate(raw).to_request()
    assert (pod.gpus, pod.cpu_milli, pod.memory_mib) == (0, 4200, 32896)
    plain = PodQuery.model_validate({"cpu_milli": 1500, "memory_mib": 100}).to_request()
    assert (plain.gpus, plain.cpu_milli, plain.memory_mib) == (0, 1500, 100)
    assert PodQuery.model_validate({"gpus": 1}).to_request().cpu_milli is None


def test_allocatable_rounds_down_and_needs_both() -> None:
    assert allocatable_of({"cpu": "7910m", "memory": "32766568Ki", "nvidia.com/gpu": "8"}) == (7910, 31998)
    assert allocatable_of({"cpu": "8"}) is None
    assert allocatable_of({"cpu": "x", "memory": "1Gi"}) is None
    node = V1Node.model_validate({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "2", "memory": "1Gi"}}})
    assert node.allocatable() == (2000, 1024)
    assert V1Node.model_validate({"metadata": {"name": "n"}, "status": {"capacity": {}}}).allocatable() is None
    assert V1Node.model_validate({"metadata": {"name": "n"}}).allocatable() is None


@settings(max_examples=300, deadline=None)
@given(
    sign=st.sampled_from(["", "+"]),
    whole=st.integers(min_value=0, max_value=10**12),
    fraction=st.one_of(st.none(), st.integers(min_value=0, max_value=999_999)),
    suffix=st.sampled_from(["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])
    | st.integers(min_value=-12, max_value=12).map(lambda e: f"e{e}"),
)
def test_quantity_values_agree_with_the_kubernetes_client(
    sign: str, whole: int, fraction: int | None, suffix: str
) -> None:
    text = f"{sign}{whole}{'' if fraction is None else f'.{fraction}'}{suffix}"
    assert quantity_value(text) == parse_quantity(text)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("text", ["NaN", "Infinity", "1_000", "1 Gi", "1ki", "1Zi", "e3", "1e", "--1", ""])
def test_malformed_quantities_are_refused(text: str) -> None:
    assert quantity_value(text) is None
