"""MIG instances as placement capacity (advisor/placement/mig.py): a pod asking for a profile goes to a node with a
free instance of it, by resource name (`nvidia.com/mig-1g.10gb`) or through a DRA claim, and packing counts the
instances a placement leaves stranded."""

from __future__ import annotations

import time

import pytest

from advisor.api.schemas import V1Pod
from advisor.cluster.dra import DraIndex
from advisor.cluster.pods import PodSpecError
from advisor.cluster.state import ClusterState
from advisor.placement.config import ScoringConfig
from advisor.placement.mig import MigProfileError, mig_packing_ratio, parse_profile, stranded
from advisor.placement.scorer import extender_priorities, score_candidates
from advisor.placement.types import MigInstance, PodRequest
from collector.snapshot import NodeSnapshot
from tests.advisor.factories import snapshot
from tests.support.dra import allocated, claim, mig_device, resource_slice

CONFIG = ScoringConfig()


def test_profiles_parse_and_a_wrong_one_is_named() -> None:
    assert parse_profile("3g.40gb") == parse_profile("3G.40GB")
    assert (parse_profile("1g.10gb+me").compute_slices, parse_profile("1c.3g.40gb").compute_slices) == (1, 1)
    assert parse_profile("3g.40gb").milli == 428
    with pytest.raises(MigProfileError, match=r"'9g\.80gb' has 9 compute slices"):
        parse_profile("9g.80gb")
    with pytest.raises(MigProfileError, match=r"'big' is not of the form"):
        parse_profile("big")


def test_stranded_instances_are_those_no_pending_profile_fits() -> None:
    node = [MigInstance(0, "1g.10gb"), MigInstance(0, "1g.10gb", taken=True), MigInstance(0, "3g.40gb")]
    assert stranded(node, ["1g.10gb"]) == 1
    assert stranded(node, ["1g.10gb", "3g.40gb"]) == 0
    # Taking the last free 1g.10gb leaves only the 3g.40gb nobody waits for; taking the 3g.40gb packs no better.
    assert mig_packing_ratio(node, {"1g.10gb": 1}, ["1g.10gb"]) == pytest.approx(1 - 2 / 6)
    assert mig_packing_ratio(node, {"2g.20gb": 1}, []) is None


def mig_state() -> ClusterState:
    """Two A100 nodes partitioned by NVIDIA's DRA driver: m1 has one free 1g.10gb of two and a free 3g.40gb,
    m2 only 3g.40gb instances."""
    dra = DraIndex()
    dra.replace_slices(
        [
            resource_slice(
                "m1",
                [
                    mig_device("m1", 0, "1g.10gb", 0, "10Gi"),
                    mig_device("m1", 0, "1g.10gb", 1, "10Gi"),
                    mig_device("m1", 1, "3g.40gb", 0, "40Gi"),
                ],
            ),
            resource_slice(
                "m2", [mig_device("m2", 0, "3g.40gb", 0, "40Gi"), mig_device("m2", 0, "3g.40gb", 4, "40Gi")]
            ),
        ]
    )
    dra.replace_claims([allocated(claim("held", "ml"), "m1", ["gpu-0-mig-1-0-1"], pods=["other"])])
    state = ClusterState()
    for node in ("m1", "m2"):
        state.ingest(NodeSnapshot.model_validate(snapshot(node, gpus=2, model="NVIDIA A100-SXM4-80GB")))
    state.replace_claimed(dra.held_by_pods())
    state.replace_mig(dra.mig_by_node())
    return state


def v1_pod(resources: dict[str, str]) -> V1Pod:
    return V1Pod.model_validate(
        {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"containers": [{"resources": {"limits": resources}}]}}
    )


def test_a_pod_asking_a_profile_goes_where_an_instance_of_it_is_free() -> None:
    state = mig_state()
    pod = v1_pod({"nvidia.com/mig-1g.10gb": "1"}).to_request()
    assert pod.mig == (("1g.10gb", 1),)
    assert pod.whole_gpus == 0
    m1, m2 = score_candidates(pod, ["m1", "m2"], state.nodes, config=CONFIG, now_seconds=time.time())
    assert m1.feasible
    assert m1.gpus == (0,)
    assert "MIG 1 x 1g.10gb on GPU 0" in m1.reason
    assert not m2.feasible
    assert "no free MIG instance for 1 x 1g.10gb (free: 2 x 3g.40gb)" in m2.reason
    assert m1.score > m2.score


def test_a_larger_profile_packs_onto_the_node_it_leaves_fewest_free_instances_on() -> None:
    state = mig_state()
    two = PodRequest(name="p", mig=(("3g.40gb", 1),))
    m1, m2 = score_candidates(two, ["m1", "m2"], state.nodes, config=CONFIG, now_seconds=time.time())
    assert m1.feasible
    assert m2.feasible
    assert m1.packing != m2.packing


def test_a_malformed_mig_resource_is_refused_naming_it() -> None:
    with pytest.raises(PodSpecError, match=r"nvidia\.com/mig-huge"):
        v1_pod({"nvidia.com/mig-huge": "1"}).to_request()


def test_the_extender_scores_a_mig_pod_as_score_does_not_neutrally() -> None:
    """The prioritize verb's path (`Scorer.extender_priorities`) places a MIG pod on a free instance of its profile,
    with the same ranking as `/v1/score`, rather than the neutral 5 of a pod that asks no GPU."""
    state = mig_state()
    pod = v1_pod({"nvidia.com/mig-1g.10gb": "1"}).to_request()
    verdict = extender_priorities(pod, ["m1", "m2"], state.nodes, config=CONFIG, now_seconds=time.time())
    assert verdict.infeasible == 1
    assert verdict.scored == 1
    assert verdict.scores[0] > verdict.scores[1]
