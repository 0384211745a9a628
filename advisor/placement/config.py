"""The scorer's and the filter's knobs: component weights, staleness, the target task mix and the filter's rules.

One `ScoringConfig` per service (built from `advisor.settings`) or simulation run; it also keys the scorer's
per-shape caches, hence compared by identity.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

from advisor.gpus import normalize_gpu_model
from advisor.placement.fragmentation import (
    DEFAULT_TASK_MIX,
    GPU_MILLI,
    MixResources,
    TaskMix,
    TaskMixError,
    mix_resources,
    validate_task_mix,
    whole_gpu_mix,
)
from advisor.placement.types import ScoringInputError


def cpu_per_gpu_of(mix: TaskMix) -> float | None:
    """The workload's milli-CPU per GPU: over the GPU requests of `mix` that give their CPU, CPU over GPUs asked
    for, both weighted by popularity (None when none gives it)."""
    cpu = gpus = 0.0
    for entry in mix:
        if entry[0] > 0 and len(entry) == 5 and entry[3] is not None:
            cpu += entry[2] * entry[3]
            gpus += entry[2] * entry[0] * min(entry[1], GPU_MILLI) / GPU_MILLI
    return cpu / gpus if cpu > 0 and gpus > 0 else None


DEFAULT_WAIT_SLACK = 1.5
"""`ScoringConfig.wait_slack` of the service: pass a node over when the pod would finish there more than 1.5x later
than by waiting for a faster GPU model (chosen among off, 1, 1.5 and 2 on the Gavel validation run,
`bench/sim_gavel.py --validate --validate-slacks`; docs/evaluation.md, experiment 2)."""

DEFAULT_EXTENDER_SPAN_POINTS = 40.0
"""The extender's integer drops one step per this / 10 points a node is behind the batch's best (`extender_scores`)."""

GRADIENT_STEP_SLACK = 1e-9
"""Added before flooring a stepped packing gradient (`ScoringConfig.packing_gradient_steps`), so that float noise in
F's sum over task types cannot move a change of exactly 0 (sigmoid 0.5) one step down."""


KNOB_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "weight_packing": (lambda v: v >= 0, "must be >= 0"),
    "weight_affinity": (lambda v: v >= 0, "must be >= 0"),
    "weight_interference": (lambda v: v >= 0, "must be >= 0"),
    "weight_jct": (lambda v: v >= 0, "must be >= 0"),
    "staleness_seconds": (lambda v: v > 0, "must be > 0"),
    "packing_best_fit_share": (lambda v: 0 <= v <= 1, "must be within 0..1"),
    "packing_gradient_residual": (lambda v: 0 <= v <= 1, "must be within 0..1"),
    "packing_cpu_balance": (lambda v: v >= 0, "must be >= 0"),
    "cpu_per_gpu_milli": (lambda v: v is None or v > 0, "must be > 0"),
    "packing_gradient_steps": (lambda v: v >= 0, "must be >= 0 (0: a continuous gradient)"),
    "extender_span_points": (lambda v: v > 0, "must be > 0"),
    "unknown_node_score": (lambda v: 0 <= v <= 100, "must be within 0..100"),
    # Below 1 even the node with the soonest finish would be passed over.
    "wait_slack": (lambda v: v is None or v >= 1, "must be >= 1 (None turns waiting for a faster GPU off)"),
}
"""The rule of each numeric knob and what it says when broken: the one place they are written (`check_knob`), read
by `ScoringConfig` and by the service's settings (`advisor.settings.AdvisorSettings`)."""


def check_knob(name: str, value: object) -> None:
    """Raise `ScoringInputError` naming `name` when `value` breaks its rule (`KNOB_RULES`)."""
    rule = KNOB_RULES.get(name)
    if rule is not None and not rule[0](value):
        raise ScoringInputError(f"{name} {rule[1]}")


@dataclass(frozen=True, slots=True, eq=False)
class ScoringConfig:
    """Weights and policy.

    `task_mix` is the target workload the packing component keeps room for: (GPUs, milli-GPU per GPU, probability)
    per request shape, GPU shares included (default `advisor.placement.fragmentation.DEFAULT_TASK_MIX`; the simulator
    passes the trace's own mix). `task_sizes`, whole-GPU (GPUs, probability) pairs, is the older shorthand: when given
    it replaces `task_mix` with whole-GPU requests of those sizes. Entries of `task_mix` may give the task's CPU
    (milli) and memory (MiB) request, and tasks without GPU (0, 0, p, cpu, memory): then `resources` is their
    CPU/memory side and nodes with known free CPU/memory are scored with it. `wait_slack` is the filter's patience
    (`wait_verdicts`): a node is passed over when the pod's predicted run time there exceeds `wait_slack` × the
    soonest predicted finish after waiting for room on any GPU model; None never waits. `hold_for_blocked` (off by
    default): the filter keeps pods off the nodes held for the first pending pod that has no room (`reserve`,
    `reserved_verdicts`) unless they are predicted to finish before it starts. `shortest_first` (off by default): the
    filter keeps a pod off room that pending pods with a higher response ratio are expected to take (`claims`,
    `yield_verdicts`). `model_task_mix` (optional) is the target workload as seen from the nodes of a GPU model where
    pods constrain the model: packing scores those nodes with it (`for_model`), every other node with `task_mix`
    (the simulator builds it with `advisor.sim.target_workload.task_mix_for_model`). `extender_first_of_equals` (the
    packing profile): of the nodes at the extender's highest integer only the first by name keeps it
    (`advisor.placement.extender.first_of_equals`), so kube-scheduler does not draw among them at random.
    `packing_best_fit_share` is the share of the packing component that prefers the fuller node (the rest is the
    fragmentation gradient; `advisor.placement.gpuset.packing_of`). `packing_gradient_steps` (0: continuous) floors the
    gradient's sigmoid to that many steps, as the FGD authors' integer score does (the packing profile: 100, with a
    best-fit share below one step, so best fit only orders nodes within a step). `packing_cpu_balance` (0: off; the
    packing profile 0.1) takes `cpu_balance_penalty` off best fit: of equally full nodes, the one whose CPU left
    matches what its GPUs left need at the workload's CPU per GPU (`cpu_per_gpu_milli`; None: from `task_mix`) wins.
    `packing_gradient_residual` (0: off) adds back that share of what the steps floored off the gradient, beside
    best fit (the packing profile: 0.05).

    Compared and hashed by identity (it keys the per-shape caches): build one per service or simulation run.
    """

    weight_packing: float = 1.0
    weight_affinity: float = 1.0
    weight_interference: float = 1.0
    weight_jct: float = 1.0
    staleness_seconds: float = 30.0
    strict_staleness: bool = False
    unknown_node_score: float = 50.0
    task_mix: TaskMix = DEFAULT_TASK_MIX
    task_sizes: tuple[tuple[int, float], ...] | None = None
    extender_span_points: float = DEFAULT_EXTENDER_SPAN_POINTS
    wait_slack: float | None = DEFAULT_WAIT_SLACK
    hold_for_blocked: bool = False
    shortest_first: bool = False
    model_task_mix: Mapping[str, TaskMix] | None = None
    extender_first_of_equals: bool = False
    packing_best_fit_share: float = 0.2
    packing_gradient_steps: int = 0
    packing_cpu_balance: float = 0.0
    packing_gradient_residual: float = 0.0
    cpu_per_gpu_milli: float | None = None
    resources: MixResources | None = field(init=False, repr=False)
    _by_model: dict[str, ScoringConfig] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.task_sizes is not None:
            object.__setattr__(self, "task_mix", whole_gpu_mix(self.task_sizes))
        try:
            validate_task_mix(self.task_mix)
        except TaskMixError as exc:
            raise ScoringInputError(str(exc)) from None
        object.__setattr__(self, "resources", mix_resources(self.task_mix))
        if self.cpu_per_gpu_milli is None:
            object.__setattr__(self, "cpu_per_gpu_milli", cpu_per_gpu_of(self.task_mix))
        by_model: dict[str, ScoringConfig] = {}
        for model, mix in (self.model_task_mix or {}).items():
            try:
                validate_task_mix(mix)
            except TaskMixError as exc:
                raise ScoringInputError(f"model_task_mix[{model}]: {exc}") from None
            by_model[normalize_gpu_model(model)] = replace(self, task_mix=mix, task_sizes=None, model_task_mix=None)
        object.__setattr__(self, "_by_model", by_model)
        for name in KNOB_RULES:
            check_knob(name, getattr(self, name))

    @classmethod
    def from_settings(cls, settings: object) -> ScoringConfig:
        """The configuration a settings object declares: every field of this class it has an attribute of, as is,
        except that a `wait_slack` of 0 and an empty `model_task_mix` mean none (the service's environment has no
        null)."""
        values = {f.name: getattr(settings, f.name) for f in fields(cls) if f.init and hasattr(settings, f.name)}
        values["wait_slack"] = values.get("wait_slack", DEFAULT_WAIT_SLACK) or None
        values["model_task_mix"] = values.get("model_task_mix") or None
        return cls(**values)

    def cpu_balance_penalty(self, free_after_milli: tuple[int, ...], cpu_fit_after: int | None) -> float:
        """`packing_cpu_balance` × how far the node's CPU left is from what its GPUs left need at the workload's CPU
        per GPU (`cpu_per_gpu_milli`), per the CPU all its GPUs would need: 0 when off, or where the node's free CPU
        is not known (`cpu_fit_after` None). Free CPU is read at the fit index's grain (`MixResources.cpu_at`), on
        which the verdicts are memoised. Too much CPU left strands it, too little strands the GPUs."""
        per_gpu = self.cpu_per_gpu_milli
        if not self.packing_cpu_balance or cpu_fit_after is None or self.resources is None or per_gpu is None:
            return 0.0
        gpus_left = sum(free_after_milli) / GPU_MILLI
        cpu_left = self.resources.cpu_at(cpu_fit_after)
        return self.packing_cpu_balance * abs(cpu_left - per_gpu * gpus_left) / (per_gpu * len(free_after_milli))

    def for_model(self, gpu_model: str) -> ScoringConfig:
        """The configuration packing scores a node of `gpu_model` with: its `model_task_mix` entry's, else this one."""
        if not self._by_model:
            return self
        found = self._by_model.get(gpu_model)
        if found is None:
            found = self._by_model[gpu_model] = self._by_model.get(normalize_gpu_model(gpu_model), self)
        return found


SCORING_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(ScoringConfig) if f.default is not MISSING}
"""Each knob's default, for settings that declare the knob by the same name (`advisor.settings`)."""
