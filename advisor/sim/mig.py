"""The MIG variant of fragmentation mode (`advisor.sim.packing`): a share of the cluster's GPU nodes partitioned with
Multi-Instance GPU, GPU-share pods placed on MIG instances of the smallest profile their share fits.

How the variant is built from a trace (openb has no MIG):

* nodes: `mig_node_ratio` of the nodes with GPUs (drawn with the run's seed) have every GPU partitioned as an A100 80GB
  is, in one of `LAYOUTS` (round robin over their GPUs: a mix of small and large instances, each layout seven compute
  slices); their GPUs take no whole-GPU pod and no share (as a GPU in MIG mode). The node keeps its model name, so a
  pod's GPU-model constraint judges it as before;
* pods: a one-GPU share (`gpu_milli` < 1000) without a model constraint that excludes the node asks for the smallest
  profile of `PROFILES` whose compute slices hold its share (`ceil(milli × 7 / 1000)` slices): it goes to a free
  instance of that profile if any node has one (with CPU and memory for it), else, as before, to a share of a whole
  GPU. Whole-GPU pods and CPU pods are placed as in fragmentation mode;
* allocation counts an instance as its compute share of the GPU (a 1g instance holds 1/7 of it, whatever the pod's
  own share): what the pod holds, and what nobody else can use.

Where a pod goes among nodes with a free instance of its profile: `first-fit` and `fgd` take the first node in the
run's node order (FGD's fragmentation has no MIG term: the instance taken leaves every node's expected fragmentation
changed alike); `advisor` takes the node `advisor.placement.mig.mig_packing_ratio` ranks best (fewest free instances
left, fewest left that no profile of the trace's mix fits), then the first. On whole GPUs each policy is its
fragmentation-mode self (`first-fit`: the first node that fits, the first GPUs that fit).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from advisor.placement.mig import COMPUTE_SLICES, MigProfile, mig_packing_ratio, parse_profile
from advisor.placement.types import MigInstance
from advisor.sim.model import GPU_MILLI, Cluster, Pod
from advisor.sim.packing import PackPolicy, PackState
from advisor.sim.target_workload import workload_of

PROFILES = tuple(parse_profile(p) for p in ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"))
"""The A100 80GB's profiles with one compute instance each, smallest first."""
LAYOUTS: tuple[tuple[str, ...], ...] = (
    ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"),
    ("2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"),
    ("1g.10gb",) * 7,
    ("4g.40gb", "3g.40gb"),
)
"""How the MIG GPUs are partitioned, round robin: layouts NVIDIA's A100 80GB accepts (seven compute slices, at most
eight memory slices each)."""
MIG_POLICIES = ("first-fit", "fgd", "advisor")


def profile_for(milli: int) -> MigProfile:
    """The smallest profile whose compute slices hold a share of `milli` thousandths of a GPU."""
    slices = max(1, math.ceil(milli * COMPUTE_SLICES / GPU_MILLI))
    return next(p for p in PROFILES if p.compute_slices >= slices)


@dataclass(frozen=True, slots=True)
class MigResult:
    policy: str
    gpu_allocation_ratio: float
    failed_pods: int
    mig_pods: int
    mig_allocation_ratio: float
    seconds: float


class FirstFitPolicy:
    """The first node (in the run's node order) that fits, the first GPUs there that fit."""

    name = "first-fit"

    def choose(self, pod: Pod, state: PackState, candidates: np.ndarray) -> tuple[int, tuple[int, ...]]:
        node = int(candidates[np.argmin(state.name_rank[candidates])])
        if pod.num_gpu == 0:
            return node, ()
        if pod.gpu_milli < GPU_MILLI:
            return node, (int(np.flatnonzero(state.free[node] >= pod.gpu_milli)[0]),)
        return node, state.whole_gpus(node, pod.num_gpu)


def mig_nodes(cluster: Cluster, ratio: float, seed: int) -> list[int]:
    """The nodes partitioned with MIG: `ratio` of those with GPUs, drawn with `seed`."""
    with_gpus = [i for i, n in enumerate(cluster.nodes) if n.gpus > 0]
    count = round(ratio * len(with_gpus))
    rng = np.random.default_rng(seed)
    return sorted(int(i) for i in rng.choice(with_gpus, size=count, replace=False)) if count else []


def run_mig(
    cluster: Cluster,
    pods: Sequence[Pod],
    sequence: Sequence[Pod],
    policy: PackPolicy,
    *,
    mig_choice: str,
    partitioned: Sequence[int],
    node_rank: np.ndarray | None = None,
) -> MigResult:
    """Place `sequence` in order (fragmentation mode, see the module doc) on `cluster` with `partitioned` nodes in
    MIG; `mig_choice` is `first` or `advisor` (how a node is chosen among those with a free instance). The
    allocation is read at 100 % arrived GPU demand."""
    started = time.perf_counter()
    state = PackState(cluster, workload_of(pods), node_rank)
    capacity_milli = float(state.gpu_capacity.sum())
    instances: dict[int, list[MigInstance]] = {}
    layout = 0
    for node in partitioned:
        for gpu in range(cluster.nodes[node].gpus):
            instances.setdefault(node, []).extend(MigInstance(gpu, p) for p in LAYOUTS[layout % len(LAYOUTS)])
            layout += 1
        state.free[node, :] = 0.0  # in MIG mode: no whole GPU, no share
        state.cache.refresh(node, state.free[node], float(state.cpu_free[node]), float(state.memory_free[node]))
    mig_capacity_milli = sum(cluster.nodes[n].gpus for n in partitioned) * float(GPU_MILLI)
    mix = Counter(profile_for(p.gpu_milli).name for p in pods if _mig_candidate(p))
    covered, mix_profiles = 0, []
    for name, n in mix.most_common():  # the profiles of the trace's most popular shares, 95 % of them
        if covered >= 0.95 * sum(mix.values()):
            break
        mix_profiles.append(name)
        covered += n
    mig_taken = 0.0
    mig_pods = failed = 0
    arrived = 0.0
    at_full: tuple[float, int, float] | None = None
    for pod in sequence:
        demand = pod.gpu_demand * GPU_MILLI
        if at_full is None and arrived + demand > capacity_milli:
            allocated = state.allocated_milli - mig_capacity_milli + mig_taken
            at_full = (allocated / capacity_milli, failed, mig_taken / max(mig_capacity_milli, 1.0))
        arrived += demand
        if _mig_candidate(pod) and instances:
            profile = profile_for(pod.gpu_milli)
            target = _mig_node(pod, profile.name, instances, state, choice=mig_choice, mix_profiles=mix_profiles)
            if target is not None:
                node = target
                listed = instances[node]
                slot = next(i for i, x in enumerate(listed) if not x.taken and x.profile == profile.name)
                listed[slot] = MigInstance(listed[slot].gpu, profile.name, taken=True)
                state.cpu_free[node] -= pod.cpu_milli
                state.memory_free[node] -= pod.memory_mib
                state.cache.refresh(node, state.free[node], float(state.cpu_free[node]), float(state.memory_free[node]))
                mig_taken += profile.compute_slices * GPU_MILLI / COMPUTE_SLICES
                mig_pods += 1
                continue
        candidates = np.flatnonzero(state.feasible(pod))
        if len(candidates) == 0:
            failed += pod.num_gpu > 0
            continue
        chosen, gpus = policy.choose(pod, state, candidates)
        state.place(chosen, gpus, pod)
    if at_full is None:
        allocated = state.allocated_milli - mig_capacity_milli + mig_taken
        at_full = (allocated / capacity_milli, failed, mig_taken / max(mig_capacity_milli, 1.0))
    return MigResult(
        policy=policy.name if mig_choice != "advisor" else "advisor",
        gpu_allocation_ratio=at_full[0],
        failed_pods=at_full[1],
        mig_pods=mig_pods,
        mig_allocation_ratio=at_full[2],
        seconds=time.perf_counter() - started,
    )


def _mig_candidate(pod: Pod) -> bool:
    return pod.num_gpu == 1 and 0 < pod.gpu_milli < GPU_MILLI


def _mig_node(
    pod: Pod,
    profile: str,
    instances: dict[int, list[MigInstance]],
    state: PackState,
    *,
    choice: str,
    mix_profiles: Sequence[str],
) -> int | None:
    """The node whose free instance of `profile` the pod takes (None: none has one, with CPU/memory for it)."""
    ok = [
        n
        for n, listed in instances.items()
        if state.cpu_free[n] >= pod.cpu_milli
        and state.memory_free[n] >= pod.memory_mib
        and (not pod.gpu_models or state.gpu_model[n] in pod.gpu_models)
        and any(not i.taken and i.profile == profile for i in listed)
    ]
    if not ok:
        return None
    if choice == "advisor":
        return min(
            ok,
            key=lambda n: (-(mig_packing_ratio(instances[n], {profile: 1}, mix_profiles) or 0.0), state.name_rank[n]),
        )
    return min(ok, key=lambda n: state.name_rank[n])
