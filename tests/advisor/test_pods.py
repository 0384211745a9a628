"""Reading a pod's GPU needs from its manifest, with errors that name the field."""

from __future__ import annotations

import pytest

from advisor.api.schemas import V1Pod
from advisor.pods import ContainerResources, PodSpecError, parse_quantity, pod_request
from tests.advisor.factories import v1_pod


def request(**overrides: object) -> V1Pod:
    return V1Pod.model_validate(v1_pod(**overrides))  # type: ignore[arg-type]


def test_a_real_pod_reads_gpus_workload_and_name() -> None:
    pod = request(gpus=4).to_request()
    assert (pod.name, pod.gpus, pod.workload, pod.gang, pod.is_share) == ("ml/train-0", 4, "resnet50-bs64", None, False)


def test_gpus_are_summed_over_containers_and_init_containers_count_alone() -> None:
    gpu = ContainerResources(limits={"nvidia.com/gpu": "2"}, requests={})
    pod = pod_request(
        namespace="a",
        name="b",
        labels={},
        annotations={},
        containers=[gpu, gpu],
        init_containers=[ContainerResources(limits={"nvidia.com/gpu": 3}, requests={})],
    )
    assert pod.gpus == 4
    only_requests = ContainerResources(limits={}, requests={"nvidia.com/gpu": "1"})
    assert pod_request(namespace="", name="x", labels={}, annotations={}, containers=[only_requests]).gpus == 1


def test_a_gpu_share_comes_from_annotations() -> None:
    pod = request(
        gpus=None, annotations={"gpuadvisor.io/gpu-milli": "250", "gpuadvisor.io/gpu-memory-bytes": "10Gi"}
    ).to_request()
    assert pod.is_share
    assert (pod.gpu_milli, pod.gpu_memory_bytes, pod.share_milli) == (250, 10 * 2**30, 250)


@pytest.mark.parametrize("key", ["scheduling.x-k8s.io/pod-group", "volcano.sh/job-name"])
def test_the_gang_comes_from_either_label(key: str) -> None:
    assert request(labels={key: "job-7"}).to_request().gang == "job-7"


@pytest.mark.parametrize(
    ("manifest", "field"),
    [
        ({"metadata": {"name": "x"}, "spec": {"containers": []}}, "spec.containers"),
        ({"metadata": {"name": "x"}}, "spec"),
        (
            {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "-1"}}}]}},
            "spec.containers[0].resources.limits.nvidia.com/gpu",
        ),
        (
            {"spec": {"containers": [{}, {"resources": {"limits": {"nvidia.com/gpu": "two"}}}]}},
            "spec.containers[1].resources.limits.nvidia.com/gpu",
        ),
        (
            {"metadata": {"annotations": {"gpuadvisor.io/gpu-milli": "abc"}}, "spec": {"containers": [{}]}},
            "metadata.annotations.gpuadvisor.io/gpu-milli",
        ),
        (
            {"metadata": {"annotations": {"gpuadvisor.io/gpu-milli": "1500"}}, "spec": {"containers": [{}]}},
            "metadata.annotations.gpuadvisor.io/gpu-milli",
        ),
        (
            {
                "metadata": {"annotations": {"gpuadvisor.io/gpu-milli": "500"}},
                "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 2}}}]},
            },
            "metadata.annotations.gpuadvisor.io/gpu-milli",
        ),
    ],
)
def test_bad_manifests_name_the_field(manifest: dict[str, object], field: str) -> None:
    with pytest.raises(PodSpecError) as info:
        V1Pod.model_validate(manifest).to_request()
    assert str(info.value).startswith(field)


@pytest.mark.parametrize(
    ("value", "expected"), [("4", 4), (2, 2), ("10Gi", 10 * 2**30), ("1G", 10**9), ("1500m", 2), ("0.5", 1), (1.2, 2)]
)
def test_quantities(value: object, expected: int) -> None:
    assert parse_quantity(value, "f") == expected


@pytest.mark.parametrize("value", ["-1", "1Qi", "", True, None, float("nan"), -3])
def test_bad_quantities_are_rejected(value: object) -> None:
    with pytest.raises(PodSpecError, match=r"^f:"):
        parse_quantity(value, "f")
