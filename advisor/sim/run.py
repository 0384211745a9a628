"""One simulation as the CLI and the benchmarks run it: build the policies by name, run each on the same input.

Kept apart from the CLI so that bench/ scripts and tests drive exactly what `gpuadvisor simulate` runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from advisor.gpus import normalize_gpu_model
from advisor.placement.config import ScoringConfig
from advisor.predictors import Predictors
from advisor.sim.baselines import (
    AuthorsFgd,
    BestFit,
    DotProd,
    GpuClustering,
    GpuPacking,
    RandomFit,
    TypicalPods,
    authors_node_rank,
    fragmentation_milli,
    typical_pods,
)
from advisor.sim.jobs import ExtenderJobPolicy, JctResult, JobPolicy, KubeJobPolicy, job_task_mix, run_jct
from advisor.sim.model import Cluster, Job, Pod
from advisor.sim.packing import (
    FRAGMENTATION_EXTENDER_WEIGHT,
    MAX_ARRIVED_RATIO,
    PACKING_TARGET_COVERAGE_RATIO,
    AdvisorPackPolicy,
    AllocatedPolicy,
    FragmentationResult,
    PackPolicy,
    authors_sequence,
    run_fragmentation,
    scoring_profile,
)
from advisor.sim.rates import RateTable
from advisor.sim.target_workload import model_task_mixes, popular_pods, task_mix_of

FRAGMENTATION_POLICIES = (
    "random",
    "dotprod",
    "gpuclustering",
    "gpupacking",
    "bestfit",
    "fgd",
    "spread",
    "binpack",
    "advisor",
)
"""The FGD paper's policies as its authors run them (`advisor.sim.baselines`), kube-scheduler's two
`NodeResourcesFit` strategies, and the advisor."""
JCT_POLICIES = ("spread", "binpack", "advisor", "oracle")


class SimConfigError(ValueError):
    """A policy list or input combination the simulator cannot run; the message says which."""


def parse_policies(text: str, mode: str) -> list[str]:
    allowed = FRAGMENTATION_POLICIES if mode == "fragmentation" else JCT_POLICIES
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise SimConfigError("--policies: name at least one policy")
    for name in names:
        if name not in allowed:
            raise SimConfigError(f"--policies: {name!r} is not a {mode} policy; choose from {', '.join(allowed)}")
    if len(set(names)) != len(names):
        raise SimConfigError("--policies: a policy is listed twice")
    return names


def fragmentation_policy(
    name: str,
    cluster: Cluster,
    config: ScoringConfig,
    seed: int,
    typical: TypicalPods,
) -> PackPolicy:
    """Policy `name`; `config` is the advisor's scorer (`fragmentation_scoring_config`, per GPU model where pods
    constrain the model: `with_model_task_mixes`), `typical` the paper's target workload. The paper's policies take
    the first of equal nodes by name, as the authors' simulator does, and so does the advisor's packing profile
    (`extender_first_of_equals`; the names are those the authors' simulator gives its nodes, `authors_node_rank`);
    spread, binpack and the advisor's other profiles draw among equal nodes at random, as kube-scheduler's
    `selectHost` does."""
    rng = np.random.default_rng(seed)
    if name == "random":
        return RandomFit(rng)
    if name == "dotprod":
        return DotProd()
    if name == "gpuclustering":
        return GpuClustering(len(cluster.nodes))
    if name == "gpupacking":
        return GpuPacking()
    if name == "bestfit":
        return BestFit()
    if name == "fgd":
        return AuthorsFgd(cluster, typical)
    if name in ("spread", "binpack"):
        return AllocatedPolicy(most=name == "binpack", rng=rng)
    if name == "advisor":
        return AdvisorPackPolicy(cluster, config, extender_weight=FRAGMENTATION_EXTENDER_WEIGHT, rng=rng)
    raise SimConfigError(f"unknown fragmentation policy {name!r}")


def run_fragmentation_mode(
    cluster: Cluster,
    pods: Sequence[Pod],
    policies: Sequence[str],
    seed: int,
    progress: Callable[[str], None] | None = None,
    *,
    config: ScoringConfig | None = None,
) -> list[FragmentationResult]:
    """Every policy on the same inflated pod sequence (seeded); the advisor scores with `config` (default: the packing
    profile for the trace's requests)."""
    try:
        sequence = authors_sequence(pods, cluster.total_gpus, seed, MAX_ARRIVED_RATIO)
    except ValueError as e:
        raise SimConfigError(str(e)) from e
    if config is None:
        config = fragmentation_scoring_config(pods)
    typical = typical_pods(pods)
    config = with_model_task_mixes(cluster, pods, config)
    node_rank = authors_node_rank(cluster, seed)
    results = []
    for name in policies:
        if progress:
            progress(name)
        policy = fragmentation_policy(name, cluster, config, seed, typical)
        results.append(
            run_fragmentation(
                cluster,
                pods,
                sequence,
                policy,
                lambda state: fragmentation_milli(typical, cluster, state),
                node_rank=node_rank,
            )
        )
    return results


def fragmentation_scoring_config(pods: Sequence[Pod], profile: str = "packing") -> ScoringConfig:
    """The advisor's scorer in fragmentation mode: `profile` (packing unless told), packing for the trace's requests
    (the packing profile: its most popular ones, `PACKING_TARGET_COVERAGE_RATIO`)."""
    if profile == "packing":
        return scoring_profile(profile, task_mix_of(popular_pods(pods, PACKING_TARGET_COVERAGE_RATIO)))
    return scoring_profile(profile, task_mix_of(pods))


def with_model_task_mixes(cluster: Cluster, pods: Sequence[Pod], config: ScoringConfig) -> ScoringConfig:
    """Where some pod accepts only some GPU models: `config` with each model's own task mix (`model_task_mix`,
    `task_mix_for_model`: requests that cannot use the model, and room scarce for the constrained ones), what an
    admin sets per node pool; `config` itself when no pod constrains the model."""
    mixes = model_task_mixes(cluster, pods) if config.resources is not None else {}
    return replace(config, model_task_mix=mixes) if mixes else config


def check_coverage(cluster: Cluster, jobs: Sequence[Job], truth: RateTable) -> None:
    """Every job type needs a true 1-GPU speed on every GPU model of the cluster."""
    models = sorted({normalize_gpu_model(n.gpu_model) for n in cluster.nodes if n.gpus})
    for job in jobs:
        for model in models:
            if truth.speed(model, job.job_type, 1, True) is None:
                raise SimConfigError(
                    f"the throughputs file has no throughput for job type {job.job_type!r} on GPU model {model!r}"
                )


def _median_without(values: Sequence[float], i: int) -> float:
    """The median of `values` (sorted, at least two) less its `i`-th."""
    n = len(values) - 1

    def at(k: int) -> float:
        return values[k if k < i else k + 1]

    return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2


def history_lengths(history: Sequence[Job], jobs: Sequence[Job]) -> dict[str, float]:
    """What the advisor believes of each job's length (its `work`) when it knows past jobs, not this one: the median
    work of its job type over `history` (QSSF's per-key history estimate, as the service's JCT model), by job id; a
    type `history` lacks gets the median over all of `history`."""
    if not history:
        raise SimConfigError("the length history has no job")
    by_type: dict[str, list[float]] = {}
    for job in history:
        by_type.setdefault(job.job_type, []).append(job.work)
    medians = {t: statistics.median(w) for t, w in by_type.items()}
    overall = statistics.median(j.work for j in history)
    return {j.job_id: medians.get(j.job_type, overall) for j in jobs}


def trace_lengths(jobs: Sequence[Job]) -> dict[str, float]:
    """Each job's length as a history of the trace's *other* jobs gives it (leave one out, by job id): the median
    work of the other jobs of its type, or of all other jobs when it is the only one of its type."""
    by_type: dict[str, list[tuple[float, str]]] = {}
    for job in jobs:
        by_type.setdefault(job.job_type, []).append((job.work, job.job_id))
    every = sorted((j.work, j.job_id) for j in jobs)
    overall = {jid: i for i, (_, jid) in enumerate(every)}
    works = [w for w, _ in every]
    out: dict[str, float] = {}
    for group in by_type.values():
        group.sort()
        values = [w for w, _ in group]
        for i, (_, jid) in enumerate(group):
            if len(values) > 1:
                out[jid] = _median_without(values, i)
            elif len(works) > 1:
                out[jid] = _median_without(works, overall[jid])
    return out


def jct_policy(
    name: str,
    cluster: Cluster,
    truth: RateTable | None,
    believed: RateTable | None,
    config: ScoringConfig,
    *,
    seed: int = 0,
    lengths: Mapping[str, float] | None = None,
) -> JobPolicy:
    """The policy `name`. The advisor believes `believed` of speeds, the oracle the truth (the trace's true
    throughputs and co-location slowdowns); both believe `lengths` of each job's length (by job id:
    `history_lengths`, `trace_lengths`; None or a job missing: its own, clairvoyant). So the oracle is the advisor
    with perfect models, and advisor / oracle is the price of the models' errors, not of not knowing the future."""
    if name in ("spread", "binpack"):
        return KubeJobPolicy(most=name == "binpack", seed=seed)
    if name == "advisor":
        return ExtenderJobPolicy(
            "advisor", cluster, believed, config, base=Predictors.heuristic(), seed=seed, lengths=lengths
        )
    if name == "oracle":
        if truth is None:
            raise SimConfigError("the oracle policy needs --throughputs (the true throughputs)")
        return ExtenderJobPolicy(
            "oracle", cluster, truth, config, base=Predictors.heuristic(), seed=seed, lengths=lengths
        )
    raise SimConfigError(f"unknown jct policy {name!r}")


def run_jct_mode(
    cluster: Cluster,
    jobs: Sequence[Job],
    policies: Sequence[str],
    *,
    truth: RateTable | None,
    believed: RateTable | None,
    config: ScoringConfig | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    lengths: Mapping[str, float] | None = None,
) -> list[JctResult]:
    """Every policy on the same jobs; `seed` breaks placement ties (kube-scheduler picks among equal nodes at
    random). The scorer's packing component keeps room for the trace's own requests unless `config` says otherwise.
    `lengths`: what the advisor and the oracle believe of each job's length (by job id, `jct_policy`; None: each
    job's own)."""
    if truth is not None:
        check_coverage(cluster, jobs, truth)
    if config is None:
        config = jct_scoring_config(cluster, jobs, truth)
    built = [jct_policy(name, cluster, truth, believed, config, seed=seed, lengths=lengths) for name in policies]
    results = []
    for policy in built:
        if progress:
            progress(policy.name)
        results.append(run_jct(cluster, jobs, policy, truth))
    return results


def jct_scoring_config(
    cluster: Cluster, jobs: Sequence[Job], truth: RateTable | None, profile: str = "default"
) -> ScoringConfig:
    """The advisor's scorer in JCT mode: `profile` (the service's defaults unless told), packing for the trace's
    requests."""
    runnable = [j for j in jobs if j.num_gpus <= cluster.total_gpus]
    sharing = truth is not None and bool(truth.norm)
    mix = job_task_mix(runnable, cluster.max_gpus_per_node, sharing) if runnable else None
    return scoring_profile(profile, mix)


def scorer_setup(config: ScoringConfig, extender_weight: float) -> dict[str, object]:
    """How the `advisor` and `oracle` policies were configured, for the report: what an admin would set to match."""
    return {
        "weights": {
            "packing": config.weight_packing,
            "affinity": config.weight_affinity,
            "interference": config.weight_interference,
            "jct": config.weight_jct,
        },
        "extender_span_points": config.extender_span_points,
        "extender_weight": extender_weight,
        "wait_slack": config.wait_slack,
        "hold_for_blocked": config.hold_for_blocked,
        "shortest_first": config.shortest_first,
        "kube_scheduler_score": "none (first of equals)"
        if config.extender_first_of_equals
        else "NodeResourcesFit LeastAllocated",
        "extender_first_of_equals": config.extender_first_of_equals,
        "task_mix_entries": len(config.task_mix),
    }


def advisor_table(throughputs_path: Path | None, knowledge: str = "cold") -> tuple[RateTable | None, str]:
    """The advisor's beliefs for a JCT run, and how they were obtained (reported with the results).

    With Gavel's JSON: `advisor.models` trained on a disjoint part of it (`advisor.sim.heldout`), each job known
    from a K80 trial run (`knowledge` "cold") or from 1-GPU trial runs on every GPU type ("profiled"). Otherwise
    the scorer's own heuristics (relative GPU speed, SM/bandwidth over-subscription).
    """
    if throughputs_path is not None and throughputs_path.suffix.lower() == ".json":
        from advisor.sim.heldout import heldout_table  # trains LightGBM models: imported only when needed

        trials = "1-GPU trial runs on every GPU type" if knowledge == "profiled" else "a K80 trial run"
        return (
            heldout_table(throughputs_path, knowledge=knowledge),
            f"advisor.models trained on held-out Gavel data, each job known from {trials} (advisor.sim.heldout,"
            f" knowledge {knowledge})",
        )
    return None, "heuristic predictors (advisor.predictors): no model can be trained disjointly from this input"
