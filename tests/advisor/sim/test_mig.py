"""The simulator's MIG variant (advisor/sim/mig.py): shares go to MIG instances of the smallest profile that holds
them, MIG GPUs take no whole-GPU pod, and an instance counts as its compute share of the GPU."""

from __future__ import annotations

import pytest

from advisor.sim.mig import FirstFitPolicy, mig_nodes, profile_for, run_mig
from advisor.sim.model import Cluster, Pod, SimNode


def test_a_share_asks_for_the_smallest_profile_that_holds_it() -> None:
    assert [profile_for(m).name for m in (50, 142, 200, 429, 500, 999)] == [
        "1g.10gb",
        "1g.10gb",
        "2g.20gb",
        "4g.40gb",
        "4g.40gb",
        "7g.80gb",
    ]


def test_shares_take_mig_instances_and_whole_gpu_pods_avoid_mig_gpus() -> None:
    cluster = Cluster((SimNode("mig", "A100", 1, cpu_milli=64000), SimNode("whole", "A100", 1, cpu_milli=64000)))
    small = Pod("small", 1, 100, cpu_milli=1000)
    whole = Pod("whole", 1, 1000, cpu_milli=1000)
    sequence = [small, small, whole]
    result = run_mig(cluster, sequence, sequence, FirstFitPolicy(), mig_choice="first", partitioned=[0])
    # Two 1g.10gb instances of the first layout (3g, 2g, 1g, 1g) on node "mig", each holding 1/7 of its GPU; the
    # whole-GPU pod on node "whole".
    assert (result.mig_pods, result.failed_pods) == (2, 0)
    assert result.mig_allocation_ratio == 2 / 7
    assert result.gpu_allocation_ratio == pytest.approx((2 / 7 + 1) / 2)
    # A second whole-GPU pod finds no GPU: the MIG GPU takes none.
    wholes = [whole, whole]
    assert run_mig(cluster, wholes, wholes, FirstFitPolicy(), mig_choice="first", partitioned=[0]).failed_pods == 1
    assert run_mig(cluster, wholes, wholes, FirstFitPolicy(), mig_choice="first", partitioned=[]).failed_pods == 0
    assert mig_nodes(cluster, 0.5, seed=3) in ([0], [1])
