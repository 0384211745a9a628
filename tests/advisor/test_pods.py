"""Reading a pod's GPU needs from its manifest, with errors that name the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from advisor.api.schemas import V1Pod
from advisor.cluster.pods import ContainerResources, PodSpecError, node_placement, parse_quantity, pod_request
from advisor.placement.queue import NodePlacement
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


# --------------------------------------------------------------------------------------------------------------------
# Node placement: spec.nodeSelector and the required node affinity


def placement_of(spec: dict[str, object]) -> NodePlacement | None:
    manifest = v1_pod(gpus=1)
    manifest["spec"].update(spec)
    return V1Pod.model_validate(manifest).placement()


def required(*terms: object) -> dict[str, object]:
    return {
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
        }
    }


def expr(key: str, operator: str, *values: str) -> dict[str, object]:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


T4 = {"nvidia.com/gpu.product": "Tesla-T4", "zone": "a", "gpus": "8"}
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "zone": "b", "gpus": "8"}


def test_a_pod_without_node_constraints_has_no_placement() -> None:
    assert placement_of({}) is None
    assert placement_of({"nodeSelector": {}}) is None
    assert placement_of({"affinity": {"podAntiAffinity": {}}}) is None  # inter-pod affinity is not read


def test_a_node_selector_needs_every_label_equal() -> None:
    placement = placement_of({"nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4", "zone": "a"}})
    assert placement is not None
    assert placement.admits("t4", T4)
    assert not placement.admits("h100", H100)
    assert not placement.admits("bare", {})


@pytest.mark.parametrize(
    ("requirement", "admits_t4", "admits_h100"),
    [
        (expr("nvidia.com/gpu.product", "In", "Tesla-T4", "Tesla-V100"), True, False),
        (expr("nvidia.com/gpu.product", "NotIn", "Tesla-T4"), False, True),
        (expr("zone", "Exists"), True, True),
        (expr("spot", "DoesNotExist"), True, True),
        (expr("zone", "DoesNotExist"), False, False),
        (expr("gpus", "Gt", "4"), True, True),
        (expr("gpus", "Lt", "4"), False, False),
        (expr("zone", "Gt", "4"), False, False),  # not an integer: Gt/Lt never match
        (expr("missing", "NotIn", "x"), True, True),  # an absent label is not in any set
    ],
)
def test_match_expressions_follow_the_kubernetes_operators(
    requirement: dict[str, object], admits_t4: bool, admits_h100: bool
) -> None:
    placement = placement_of(required({"matchExpressions": [requirement]}))
    assert placement is not None
    assert (placement.admits("t4", T4), placement.admits("h100", H100)) == (admits_t4, admits_h100)


def test_terms_are_alternatives_and_their_expressions_all_hold() -> None:
    placement = placement_of(
        required(
            {
                "matchExpressions": [
                    expr("zone", "In", "a"),
                    expr("nvidia.com/gpu.product", "In", "NVIDIA-H100-80GB-HBM3"),
                ]
            },
            {"matchFields": [expr("metadata.name", "In", "t4")]},
        )
    )
    assert placement is not None
    assert placement.admits("t4", T4)  # by its name (the second term)
    assert not placement.admits("t4-other", T4)  # zone a but a T4: the first term fails too
    assert not placement.admits("h100", H100)  # an H100 but zone b
    assert placement.admits("h100", {**H100, "zone": "a"})


def test_the_selector_and_the_affinity_must_both_hold() -> None:
    placement = placement_of(
        {"nodeSelector": {"zone": "a"}, **required({"matchExpressions": [expr("gpus", "In", "8")]})}
    )
    assert placement is not None
    assert placement.admits("t4", T4)
    assert not placement.admits("h100", H100)


def test_an_empty_term_matches_no_node_as_in_kubernetes() -> None:
    placement = placement_of(required({}))
    assert placement is not None
    assert not placement.admits("t4", T4)


@pytest.mark.parametrize(
    "term",
    [
        {"matchExpressions": [expr("zone", "Near", "a")]},
        {"matchFields": [expr("metadata.name", "Exists")]},  # fields take In / NotIn only
        {"matchExpressions": [{"operator": "In", "values": ["a"]}]},  # no key
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": "a"}]},  # values not a list
        {"matchExpressions": "zone=a"},
        "zone=a",  # a term that is not an object
    ],
)
def test_a_constraint_this_reader_cannot_read_is_ignored_rather_than_guessed(term: object) -> None:
    assert placement_of(required(term)) is None


def test_node_placement_without_a_pod() -> None:
    assert node_placement(None, None) is None
    placement = node_placement({"zone": "a"}, None)
    assert placement is not None
    assert placement.terms is None
    assert placement.admits("any", {"zone": "a"})


def _gpu_affinity(*terms: list[dict[str, object]]) -> dict[str, object]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
                }
            }
        }
    }


def test_the_gpu_models_a_pod_accepts_come_from_its_selector_and_required_affinity_on_gpu_product() -> None:
    from advisor.cluster.pods import GPU_PRODUCT_LABEL, accepted_gpu_models, placement_of_spec

    def accepted(spec: dict[str, object]) -> tuple[str, ...]:
        return accepted_gpu_models(placement_of_spec(spec))

    v100_or_t4 = {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": ["Tesla-V100-SXM2-16GB", "Tesla-T4"]}
    a100 = {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": ["NVIDIA-A100-SXM4-40GB"]}
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
    assert accepted({}) == ()
    assert accepted({"nodeSelector": {GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-40GB"}}) == ("a100-40gb",)
    assert accepted(_gpu_affinity([v100_or_t4, zone])) == ("t4", "v100")
    assert accepted(_gpu_affinity([v100_or_t4], [a100])) == ("a100-40gb", "t4", "v100")  # terms are alternatives
    assert accepted(_gpu_affinity([v100_or_t4], [zone])) == ()  # the second term accepts any model
    both = {"nodeSelector": {GPU_PRODUCT_LABEL: "Tesla-T4"}, **_gpu_affinity([v100_or_t4])}
    assert accepted(both) == ("t4",)  # selector and affinity must both hold
    not_in = {"key": GPU_PRODUCT_LABEL, "operator": "NotIn", "values": ["Tesla-T4"]}
    assert accepted(_gpu_affinity([not_in])) == ()  # left to kube-scheduler's NodeAffinity


@pytest.mark.parametrize(
    ("manifest", "loc"),
    [({"metadata": {"name": "x"}, "spec": {"containers": []}}, ("spec", "containers")), ({"metadata": {}}, ("spec",))],
)
def test_a_pod_without_spec_or_container_is_refused_by_its_schema(
    manifest: dict[str, object], loc: tuple[str, ...]
) -> None:
    """A v1.Pod needs its spec and a container, in the OpenAPI schema too (so `{"Pod": {}}` is no valid body)."""
    with pytest.raises(ValidationError) as info:
        V1Pod.model_validate(manifest)
    assert [e["loc"] for e in info.value.errors()] == [loc]
