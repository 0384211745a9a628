"""How fast a job runs under a placement: the ground truth of a JCT run, and what the advisor believes instead.

A `RateTable` maps (GPU model, job type, GPU count, consolidated) to steps/s and (GPU model, job, partner) to the
job's normalised throughput while it shares one GPU with the partner. The truth table comes from the trace's
throughput file (`truth_table`); the oracle scores with it. The advisor scores with a table of *predictions*
(`advisor.sim.heldout`), so both run the same scorer and differ only in what they know.

Placement effects that the throughput file does not measure are modelled with fixed factors (assumptions, stated in
docs/evaluation.md): a job whose GPUs on one node span more NVLink groups than their number requires runs at
`CROSS_NVLINK_GROUP_RATIO` of its speed; a job spread over several nodes, when the table has no unconsolidated
measurement, at `CROSS_NODE_RATIO`. Without any throughput file a job's `work` is seconds and its base speed is 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from advisor.gpus import normalize_gpu_model
from advisor.predictors import HeuristicInterference, Predictors, ResidentLike, UsageProfile
from advisor.sim.model import Job, SimNode, Throughputs

CROSS_NVLINK_GROUP_RATIO = 0.85
CROSS_NODE_RATIO = 0.7


@dataclass(frozen=True)
class RateTable:
    """Steps/s per (GPU model, job type, GPU count, consolidated) and sharing ratios per (GPU model, job, partner)."""

    name: str
    isolated: dict[tuple[str, str, int, bool], float] = field(default_factory=dict)
    norm: dict[tuple[str, str, str], float] = field(default_factory=dict)
    _cache: dict[tuple[str, str, int, bool], float | None] = field(default_factory=dict, compare=False, repr=False)

    def speed(self, gpu_model: str, job_type: str, gpus: int, consolidated: bool) -> float | None:
        """Steps/s; an unmeasured GPU count scales the largest measured smaller count linearly, and a job over
        several nodes without an unconsolidated measurement runs at `CROSS_NODE_RATIO` of a consolidated one."""
        key = (gpu_model, job_type, gpus, consolidated)
        if key in self._cache:
            return self._cache[key]
        result: float | None = None
        for flag in (consolidated, True) if not consolidated else (True,):
            known = [
                k for (m, t, k, c) in self.isolated if m == gpu_model and t == job_type and c == flag and k <= gpus
            ]
            if known:
                k = max(known)
                ratio = 1.0 if flag == consolidated else CROSS_NODE_RATIO
                result = self.isolated[(gpu_model, job_type, k, flag)] * gpus / k * ratio
                break
        self._cache[key] = result
        return result

    def sharing(self, gpu_model: str, job_type: str, partner: str) -> float | None:
        return self.norm.get((gpu_model, job_type, partner))


def truth_table(throughputs: Throughputs) -> RateTable:
    """The ground truth of a throughput file (Gavel JSON or docs/design.md §6 CSV)."""
    norm: dict[tuple[str, str, str], float] = {}
    for (model, a, b), (tput_a, _) in throughputs.colocated.items():
        solo = throughputs.isolated.get((model, a, 1, True))
        if solo:
            norm[(model, a, b)] = tput_a / solo
    return RateTable("truth", dict(throughputs.isolated), norm)


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where a running job sits: (node index, GPU index) pairs, and the partner job type per shared GPU."""

    gpus: tuple[tuple[int, int], ...]
    partner: str | None = None


def crosses_nvlink_groups(assignment: Assignment, nodes: Sequence[SimNode]) -> bool:
    """Whether the job's GPUs on some node span more NVLink groups than they need (8 GPUs on two groups of 4 do not)."""
    for n in {n for n, _ in assignment.gpus}:
        groups = nodes[n].nvlink_groups
        if not groups:
            continue
        used = {g for m, g in assignment.gpus if m == n}
        needed = math.ceil(len(used) / max(len(group) for group in groups))
        if sum(1 for group in groups if used & set(group)) > needed:
            return True
    return False


def true_rate(job: Job, assignment: Assignment, nodes: Sequence[SimNode], table: RateTable | None) -> float:
    """Work units per second of `job` under `assignment` (0 when the table cannot say: the run then errs)."""
    node_ids = sorted({n for n, _ in assignment.gpus})
    factor = CROSS_NVLINK_GROUP_RATIO if crosses_nvlink_groups(assignment, nodes) else 1.0
    if table is None:
        return factor * (CROSS_NODE_RATIO if len(node_ids) > 1 else 1.0)
    rates: list[float] = []
    for n in node_ids:
        model = normalize_gpu_model(nodes[n].gpu_model)
        speed = table.speed(model, job.job_type, job.num_gpus, len(node_ids) == 1)
        if speed is None:
            return 0.0
        if assignment.partner is not None:
            share = table.sharing(model, job.job_type, assignment.partner)
            speed *= share if share is not None else 0.0
        rates.append(speed)
    return factor * min(rates)


class TableInterference:
    """Slowdowns from a `RateTable`'s sharing ratios; pairs it does not know fall back to the heuristic."""

    def __init__(self, table: RateTable) -> None:
        self.name = table.name
        self._table = table
        self._fallback = HeuristicInterference()

    def slowdowns(
        self,
        gpu_model: str,
        workload: str | None,
        usage: UsageProfile,
        residents: Sequence[ResidentLike],
        *,
        sharing: str = "",
    ) -> tuple[float, float]:
        if not residents:
            return 1.0, 1.0
        model = normalize_gpu_model(gpu_model)
        pod_slow, res_slow = 1.0, 1.0
        for r in residents:
            mine = self._table.sharing(model, workload or "", r.workload or "")
            theirs = self._table.sharing(model, r.workload or "", workload or "")
            if mine is None or theirs is None or mine <= 0 or theirs <= 0:
                return self._fallback.slowdowns(gpu_model, workload, usage, residents, sharing=sharing)
            pod_slow = max(pod_slow, 1.0 / mine)
            res_slow = max(res_slow, 1.0 / theirs)
        return pod_slow, res_slow


class JobJct:
    """Predicted run time of one job = its work / the table's speed (None where the table has no answer)."""

    def __init__(self, table: RateTable, job: Job) -> None:
        self.name = table.name
        self._table = table
        self._job = job

    def jct_seconds(self, workload: str | None, gpu_model: str, gpu_count: int) -> float | None:
        speed = self._table.speed(normalize_gpu_model(gpu_model), self._job.job_type, self._job.num_gpus, True)
        return self._job.work / speed if speed else None


def predictors_for(table: RateTable | None, base: Predictors) -> Predictors:
    """The scorer's bundle for a table (interference from it); `base` when there is no table."""
    if table is None:
        return base
    return replace(base, interference=TableInterference(table))


def with_job(bundle: Predictors, table: RateTable | None, job: Job) -> Predictors:
    """`bundle` with a JCT predictor for this one job (its work divided by the table's speed)."""
    if table is None:
        return bundle
    return replace(bundle, jct=JobJct(table, job))
