"""The scorer's predictors backed by the promoted models and the profile store, and background training for the API.

`build_predictors` turns `advisor.models.registry.load_promoted` and the store's profiles into a `Predictors` bundle;
every question without a model (or a store that cannot be read) keeps its documented heuristic
(`advisor.predictors`), and `Predictors.names()` says which answered. Model calls are memoised: the scorer asks the
same few questions (workload × GPU model × count, or a GPU's residents) over and over.

`ServedModels` holds the bundle a replica serves and swaps it whole when the promotion changes; `ModelReloader` asks
the registry every few seconds, so that every replica follows a training, rollback or CLI promotion made elsewhere.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from advisor.datasets import Kind
from advisor.features import SoloProfile, gpu_features, workload_signature
from advisor.gpus import gpu_spec, normalize_gpu_model, speed_key
from advisor.models.interference import InterferenceModel
from advisor.models.jct import JctModel
from advisor.models.kinds import MODEL_KINDS
from advisor.models.registry import (
    LoadedModels,
    load_promoted,
    promoted_versions,
    save_and_register,
    version_path,
)
from advisor.models.throughput import ThroughputModel
from advisor.models.training import train
from advisor.predictors import (
    DATA_SHEETS,
    HeuristicInterference,
    HeuristicJct,
    HeuristicUsage,
    InterferencePredictor,
    JctPredictor,
    Predictors,
    ResidentLike,
    SpecSpeed,
    SpeedPredictor,
    UsagePredictor,
    UsageProfile,
    compute_share,
    prior_speed_ratio,
    unknown_gpu_text,
)
from advisor.sharing import sharing_mode
from profiler.csv_formats import InputDataError
from profiler.store import repo

log = logging.getLogger(__name__)

# The GPU that the speed predictor counts as 1.0 and on which the JCT model is asked how long a job is: one the
# bundled and public histories all contain.
SPEED_REFERENCE_GPU = "v100"

_CACHE_LIMIT = 8192
_UTIL_STEP = 0.05


def _bucket(ratio: float) -> float:
    """Utilisations rounded to 5 % so that memoised model answers are reused across snapshots."""
    return round(ratio / _UTIL_STEP) * _UTIL_STEP


class WorkloadNames:
    """Finds the name the models know a workload by from the signature a pod carries.

    A pod's `gpuadvisor.io/workload` label cannot hold Gavel's ``ResNet-50 (batch size 64)`` (no spaces or
    parentheses in label values); it says ``resnet50-bs64``. A name the models know is kept; another one is looked up
    by its `workload_signature` among the known names (the first in sorted order where two share one).
    """

    def __init__(self, known: Iterable[str]) -> None:
        self._known = frozenset(known)
        self._by_signature: dict[str, str] = {}
        for name in sorted(self._known):
            self._by_signature.setdefault(workload_signature(name), name)

    def resolve(self, workload: str | None) -> str | None:
        if not workload or workload in self._known:
            return workload
        return self._by_signature.get(workload_signature(workload), workload)


@dataclass(frozen=True, slots=True)
class _Solo:
    throughput: float
    batch_size: int
    usage: UsageProfile | None


class ProfileIndex:
    """Solo (single-GPU) profiles by (workload, normalised GPU model), with a per-workload fallback for the usage.

    Built from the store's profiles (throughput, SM and memory-bandwidth use) and the throughput model's table of
    measured throughputs (throughput only).
    """

    name = "profiles"

    def __init__(self, rows: dict[tuple[str, str], _Solo]) -> None:
        self._rows = rows
        self.names = WorkloadNames(w for w, _ in rows)
        usages: dict[str, list[UsageProfile]] = {}
        for (workload, _), solo in rows.items():
            if solo.usage is not None:
                usages.setdefault(workload, []).append(solo.usage)
        self._usage_any = {
            w: UsageProfile(
                float(np.mean([u.sm_utilization_ratio for u in us])),
                float(np.mean([u.memory_bandwidth_utilization_ratio for u in us])),
            )
            for w, us in usages.items()
        }

    @classmethod
    def build(cls, sessions: sessionmaker[Session], throughput: ThroughputModel | None) -> ProfileIndex:
        rows: dict[tuple[str, str], _Solo] = {}
        if throughput is not None:
            table = throughput.table_
            for i, workload in enumerate(table.workloads):
                if table.gpu_count[i] == 1 and table.nodes[i] == 1:
                    rows[(workload, table.gpu_models[i])] = _Solo(
                        float(table.throughput[i]), int(table.batch_size[i]), None
                    )
        with sessions() as session:
            profiles = repo.list_profiles(session=session)
        for p in profiles:
            if p.gpu_count != 1 or p.node_count != 1:
                continue
            usage = None
            if p.sm_util_mean_ratio is not None and p.mem_bw_util_ratio is not None:
                usage = UsageProfile(min(1.0, p.sm_util_mean_ratio), min(1.0, p.mem_bw_util_ratio))
            rows[(p.workload, normalize_gpu_model(p.gpu_model))] = _Solo(
                p.throughput_samples_per_s, p.batch_size, usage
            )
        return cls(rows)

    def __len__(self) -> int:
        return len(self._rows)

    def usages(self) -> list[str]:
        """Workloads whose SM / memory-bandwidth use is known."""
        return sorted(self._usage_any)

    def gpus_of(self, workload: str, *, first: str = "") -> list[str]:
        """The GPU models `workload` has a solo profile on, `first` first when among them, the rest sorted."""
        gpus = sorted(g for w, g in self._rows if w == workload)
        first = normalize_gpu_model(first) if first else ""
        return sorted(gpus, key=lambda g: (g != first, g))

    def solo(self, workload: str | None, gpu_model: str) -> _Solo | None:
        workload = self.names.resolve(workload)
        if not workload:
            return None
        return self._rows.get((workload, normalize_gpu_model(gpu_model)))

    def usage(self, workload: str | None, gpu_model: str) -> UsageProfile | None:
        workload = self.names.resolve(workload)
        solo = self.solo(workload, gpu_model)
        if solo is not None and solo.usage is not None:
            return solo.usage
        return self._usage_any.get(workload or "")


class AnswerCounts:
    """How each question was answered since start-up, e.g. ``interference: {"interference v3": 120, "heuristic: no
    solo profile": 4}``: `GET /v1/models` shows which answers fell back. Counted under a lock (requests run in
    threads); kept across model reloads, so it tells what this replica has been serving."""

    def __init__(self) -> None:
        self._counts: dict[str, Counter[str]] = {}
        self._lock = threading.Lock()

    def add(self, question: str, how: str) -> None:
        with self._lock:
            self._counts.setdefault(question, Counter())[how] += 1

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {question: dict(counts) for question, counts in self._counts.items()}


class WorkloadSpeed:
    """How much faster one workload runs on one GPU model than on another, from what is known of that workload.

    The same job can run 3× faster on one GPU type than on another while the data sheets rank the two the other way
    (on Gavel's measurements, the Recommendation jobs are slowest on the V100). So, in this order:

    1. "measured": the workload's single-GPU throughputs on both GPU models at one batch size (`profiles`: the
       store's profiles — its trial runs — and the throughput model's training measurements) — for a single-GPU pod;
    2. "throughput vN": the promoted throughput model, for a workload it was trained on, and only between GPU types
       it was trained on (by speed class, `advisor.gpus.speed_key`: a V100 32 GB is a V100): a tree model says
       nothing trustworthy about a GPU type it never saw;
    3. "throughput vN × data sheets beyond its GPU types (…)": for a GPU type outside that set, the model's answer
       on the trained GPU type nearest by data sheet, times the data-sheet prior from there to the target
       (`prior_speed_ratio`, weighted by the workload's compute-boundness where its profile says);
    4. "data sheets": otherwise the data-sheet prior alone.

    A GPU model not in the data-sheet table is unknown: `ratio` answers None and says so. `ratio` returns the speed on
    `gpu_model` over the speed on `reference` (> 1: faster) and which of these answered.
    """

    def __init__(
        self,
        spec: SpeedPredictor,
        throughput: ThroughputModel | None,
        profiles: ProfileIndex,
        answers: AnswerCounts | None = None,
        *,
        throughput_name: str = "throughput model",
        reference_gpu: str = "",
    ) -> None:
        self._answers = answers or AnswerCounts()
        self._reference_gpu = reference_gpu
        self._spec = spec
        self._throughput = throughput
        self._throughput_name = throughput_name
        self._profiles = profiles
        self._batch: dict[str, float] = {}
        self._trained_gpus: tuple[str, ...] = ()
        if throughput is not None:
            table = throughput.table_
            counts: dict[str, dict[float, int]] = {}
            for workload, batch in zip(table.workloads, table.batch_size, strict=True):
                per = counts.setdefault(workload, {})
                per[float(batch)] = per.get(float(batch), 0) + 1
            self._batch = {w: max(per, key=lambda b: (per[b], b)) for w, per in counts.items()}
            self._trained_gpus = tuple(sorted({speed_key(g) for g in table.gpu_models if gpu_spec(g).known}))

    def ratio(self, workload: str, gpu_model: str, reference: str, gpu_count: int) -> tuple[float | None, str]:
        value, how = self._ratio(self._profiles.names.resolve(workload) or "", gpu_model, reference, gpu_count)
        self._answers.add("speed", how if value is not None else "unknown GPU model")
        return value, how

    def steps_per_second(self, workload: str, gpu_model: str) -> tuple[float | None, str]:
        """`workload`'s single-GPU steps/s on `gpu_model`: its profile there ("measured"), else its profile on
        another GPU model (the reference first) times `ratio` between the two; None and why otherwise."""
        if not gpu_spec(gpu_model).known:
            return None, unknown_gpu_text(gpu_model)
        name = self._profiles.names.resolve(workload) or ""
        here = self._profiles.solo(name, gpu_model)
        if here is not None and here.throughput > 0:
            return _steps(here), "measured"
        for there_gpu in self._profiles.gpus_of(name, first=self._reference_gpu):
            there = self._profiles.solo(name, there_gpu)
            if there is None or there.throughput <= 0 or not gpu_spec(there_gpu).known:
                continue
            ratio, how = self._ratio(name, gpu_model, there_gpu, 1)
            if ratio is not None:
                return _steps(there) * ratio, f"its profile on {there_gpu} × {how}"
        return None, f"no profile of workload {workload!r} on any GPU model"

    def _nearest_trained(self, gpu_model: str) -> str:
        """The trained GPU type nearest to `gpu_model` by data sheet: the distance of their log2 FP16 tensor, FP32
        and bandwidth figures (all three: whether a workload uses the tensor cores is not known)."""
        target = gpu_features([gpu_model])[0, :3]
        trained = gpu_features(list(self._trained_gpus))[:, :3]
        distance = np.sqrt(np.sum((trained - target) ** 2, axis=1))
        return self._trained_gpus[int(np.argmin(distance))]

    def _learned(self, workload: str, gpu_model: str, reference: str, gpu_count: int) -> float | None:
        assert self._throughput is not None
        here_there = self._throughput.predict(
            [workload, workload], [gpu_model, reference], [gpu_count] * 2, [self._batch[workload]] * 2
        )
        if np.all(np.isfinite(here_there)) and here_there[1] > 0 and here_there[0] > 0:
            return float(here_there[0] / here_there[1])
        return None

    def _ratio(self, workload: str, gpu_model: str, reference: str, gpu_count: int) -> tuple[float | None, str]:
        for name in (gpu_model, reference):
            if not gpu_spec(name).known:
                return None, unknown_gpu_text(name)
        if gpu_count == 1:
            here, there = self._profiles.solo(workload, gpu_model), self._profiles.solo(workload, reference)
            if here is not None and there is not None and here.batch_size == there.batch_size and there.throughput > 0:
                return here.throughput / there.throughput, "measured"
        share = compute_share(self._profiles.usage(workload, reference))
        if self._throughput is not None and workload in self._batch and self._trained_gpus:
            here_key, there_key = speed_key(gpu_model), speed_key(reference)
            anchor_here = here_key if here_key in self._trained_gpus else self._nearest_trained(here_key)
            anchor_there = there_key if there_key in self._trained_gpus else self._nearest_trained(there_key)
            learned = self._learned(workload, anchor_here, anchor_there, gpu_count)
            if learned is not None:
                if (anchor_here, anchor_there) == (here_key, there_key):
                    return learned, self._throughput_name
                prior_here = prior_speed_ratio(here_key, anchor_here, share) or 1.0
                prior_there = prior_speed_ratio(there_key, anchor_there, share) or 1.0
                outside = ", ".join(sorted({k for k in (here_key, there_key) if k not in self._trained_gpus}))
                return (
                    learned * prior_here / prior_there,
                    f"{self._throughput_name} × data sheets beyond its GPU types ({outside})",
                )
        prior = prior_speed_ratio(gpu_model, reference, share)
        assert prior is not None  # both known, checked above
        return prior, DATA_SHEETS


class ModelSpeed:
    """The speed predictor when a throughput model is promoted: `WorkloadSpeed` against the reference GPU."""

    def __init__(
        self, spec: SpeedPredictor, speed: WorkloadSpeed, name: str, *, reference_gpu: str = SPEED_REFERENCE_GPU
    ) -> None:
        self.name = name
        self._spec = spec
        self._speed = speed
        self._reference = reference_gpu
        self._cache: dict[tuple[str, str, int], tuple[float | None, str]] = {}

    def relative_speed(self, gpu_model: str) -> float:
        return self._spec.relative_speed(gpu_model)

    def speed_of(self, workload: str | None, gpu_model: str, gpu_count: int) -> tuple[float | None, str]:
        if not workload:
            return self._spec.speed_of(workload, gpu_model, gpu_count)
        key = (workload, gpu_model, gpu_count)
        answer = self._cache.get(key)
        if answer is None:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            answer = self._cache[key] = self._speed.ratio(workload, gpu_model, self._reference, gpu_count)
        return answer

    def steps_per_second(self, workload: str | None, gpu_model: str) -> tuple[float | None, str]:
        if not workload:
            return self._spec.steps_per_second(workload, gpu_model)
        return self._speed.steps_per_second(workload, gpu_model)


def _steps(solo: _Solo) -> float:
    """Steps/s of a solo profile (its throughput is samples/s at its batch size; steps/s where the batch is 0)."""
    return solo.throughput / solo.batch_size if solo.batch_size > 0 else solo.throughput


class ModelJct:
    """JCT from the promoted JCT model (its p50) on a reference GPU, scaled to each GPU model by the workload's speed.

    A JCT model learns from the history of the cluster it was trained on; its trees cannot extrapolate to GPU types
    that history lacks (an H100 and an L4 would get the same answer). So the model answers how long the job is — on
    the reference GPU — and `WorkloadSpeed` how much faster or slower each candidate GPU runs that workload (its
    profiles, the throughput model, else the data sheets). A workload without history in the model (it would get
    the median of all jobs, one constant whatever its GPU count), a GPU count beyond any in the history (the trees
    would repeat the largest one's answer) and a GPU model that is unknown get no estimate (None; `why_not` says
    why). Memoised per (workload, GPU model, GPU count).
    """

    def __init__(
        self,
        model: JctModel,
        version: int,
        speed: WorkloadSpeed,
        *,
        reference_gpu: str = SPEED_REFERENCE_GPU,
        clock: Callable[[], float] = time.time,
        names: WorkloadNames | None = None,
    ) -> None:
        self.name = f"jct v{version}"
        self._names = names or WorkloadNames(model.history_.tables.get("workload", {}))
        self._model = model
        self._speed = speed
        self._reference = reference_gpu
        self._clock = clock
        self._cache: dict[tuple[str, str, int], float | None] = {}

    def relative_speed(self, workload: str, gpu_model: str, gpu_count: int) -> tuple[float | None, str]:
        """How fast `workload` runs on `gpu_model` relative to the reference GPU, and what says so
        (`WorkloadSpeed.ratio`)."""
        return self._speed.ratio(workload, gpu_model, self._reference, gpu_count)

    def has_history(self, workload: str | None) -> bool:
        """Whether the model's history holds past jobs of `workload` (else its answer would be a global median)."""
        return bool(workload) and self._model.knows_workload(self._names.resolve(workload) or "")

    def why_not(self, workload: str | None, gpu_model: str, gpu_count: int) -> str:
        """Why `jct_seconds` has no estimate (empty when it has one)."""
        if not workload:
            return "the pod names no workload (label gpuadvisor.io/workload)"
        if not self.has_history(workload):
            return f"{self.name} has no history of workload {workload!r}"
        if gpu_count > self._model.max_gpu_count_:
            return f"{self.name} has no history of jobs on more than {self._model.max_gpu_count_:g} GPUs"
        speed, how = self.relative_speed(workload, gpu_model, gpu_count)
        return "" if speed is not None else how

    def jct_seconds(self, workload: str | None, gpu_model: str, gpu_count: int) -> float | None:
        if not workload or not self.has_history(workload) or gpu_count > self._model.max_gpu_count_:
            return None
        workload = self._names.resolve(workload) or workload
        key = (workload, gpu_model, gpu_count)
        if key in self._cache:
            return self._cache[key]
        prediction = self._model.predict(
            workloads=[workload],
            users=[""],
            gpu_models=[self._reference],
            gpu_count=[float(gpu_count)],
            submit_time_seconds=[self._clock()],
        )
        on_reference = float(prediction.p50[0])
        speed, _ = self.relative_speed(workload, gpu_model, gpu_count)
        value = on_reference / speed if speed is not None and speed > 0 else math.nan
        result = value if math.isfinite(value) and value > 0 else None
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = result
        return result


class ModelInterference:
    """Slowdowns from the promoted interference model, one pair per resident (their effects multiply for the pod).

    The model needs each side's solo throughput: a GPU where the pod's or a resident's workload has no single-GPU
    profile on this GPU model is answered by the heuristic instead.
    """

    def __init__(
        self, model: InterferenceModel, version: int, profiles: ProfileIndex, answers: AnswerCounts | None = None
    ) -> None:
        self._answers = answers or AnswerCounts()
        self.name = f"interference v{version}"
        self._model = model
        self._profiles = profiles
        self._fallback = HeuristicInterference()
        self._cache: dict[tuple[Any, ...], tuple[float, float]] = {}

    def answer_for(self, sharing: str) -> str:
        """What answers a pair on a GPU shared the `sharing` way: the model, or the mode's prior alone where the
        model was trained on pairs of other modes (`InterferenceModel.predict_columns`)."""
        mode = sharing_mode(sharing)
        if mode in self._model.sharing_modes_:
            return self.name
        return f"{mode or 'unknown-mode'} prior ({self.name} has no pairs measured that way)"

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
        workload = self._profiles.names.resolve(workload)
        pod_solo = self._profiles.solo(workload, gpu_model)
        resident_solos = [self._profiles.solo(r.workload, gpu_model) for r in residents]
        if pod_solo is None or any(s is None for s in resident_solos):
            self._answers.add("interference", "heuristic: no solo profile on this GPU model")
            return self._fallback.slowdowns(gpu_model, workload, usage, residents, sharing=sharing)
        self._answers.add("interference", self.answer_for(sharing))
        sm, bw = _bucket(usage.sm_utilization_ratio), _bucket(usage.memory_bandwidth_utilization_ratio)
        others = tuple(
            (
                self._profiles.names.resolve(r.workload),
                _bucket(r.sm_utilization_ratio),
                _bucket(r.memory_bandwidth_utilization_ratio),
            )
            for r in residents
        )
        key = (gpu_model, workload, sm, bw, others, sharing)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        candidate = _side(workload or "", pod_solo, sm, bw)
        pairs = [
            (_side(w or "", solo, r_sm, r_bw), candidate)
            for (w, r_sm, r_bw), solo in zip(others, resident_solos, strict=True)
            if solo is not None
        ]
        norms = self._model.predict_pairs(pairs, gpu_model, sharing)
        pod_norm = float(np.prod(norms[:, 1]))
        worst_resident = float(np.min(norms[:, 0]))
        result = (1.0 / max(pod_norm, 1e-3), 1.0 / max(worst_resident, 1e-3))
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = result
        return result


def _side(workload: str, solo: _Solo, sm: float, bw: float) -> SoloProfile:
    return SoloProfile(
        workload=workload,
        solo_throughput=solo.throughput,
        batch_size=solo.batch_size,
        sm_util_ratio=sm,
        mem_bw_util_ratio=bw,
    )


def predictors_from(
    models: LoadedModels, profiles: ProfileIndex | None, answers: AnswerCounts | None = None
) -> Predictors:
    """The bundle for these models and profiles; heuristics wherever one is missing. `answers` counts how the
    model-backed predictors answered."""
    usage: UsagePredictor = HeuristicUsage()
    if profiles is not None and profiles.usages():
        usage = profiles
    interference: InterferencePredictor = HeuristicInterference()
    if models.interference is not None:
        interference = ModelInterference(
            models.interference, models.versions["interference"], profiles or ProfileIndex({}), answers
        )
    spec = SpecSpeed(SPEED_REFERENCE_GPU)
    throughput_name = f"throughput v{models.versions['throughput']}" if models.throughput is not None else ""
    workload_speed = WorkloadSpeed(
        spec,
        models.throughput,
        profiles or ProfileIndex({}),
        answers,
        throughput_name=throughput_name,
        reference_gpu=SPEED_REFERENCE_GPU,
    )
    speed: SpeedPredictor = ModelSpeed(spec, workload_speed, throughput_name or spec.name)
    jct: JctPredictor = HeuristicJct()
    if models.jct is not None:
        jct = ModelJct(models.jct, models.versions["jct"], workload_speed)
    return Predictors(speed=speed, interference=interference, jct=jct, usage=usage)


def build_predictors(sessions: sessionmaker[Session]) -> Predictors:
    """Promoted models and profiles from the store; all heuristics when the store cannot be read."""
    try:
        models = load_promoted(sessions)
        profiles = ProfileIndex.build(sessions, models.throughput)
    except SQLAlchemyError as e:
        log.warning("model registry unreadable, scoring with heuristics only: %s", e.__class__.__name__)
        return Predictors.heuristic()
    return predictors_from(models, profiles)


# --------------------------------------------------------------------------------------------------------------------
# What this replica serves, and following promotions made elsewhere


def _describe(versions: dict[str, int] | None) -> str:
    if versions is None:
        return "heuristics only"
    return ", ".join(f"{kind} v{v}" for kind, v in sorted(versions.items())) or "no model"


class ServedModels:
    """The predictor bundle this replica serves and the promoted versions it was built from.

    `load` (start-up) serves whatever of the promoted versions can be read, heuristics for the rest. `refresh` asks
    the registry which versions are promoted and, only when that differs from the promotion it last acted on, builds
    a new bundle and swaps it in whole. When a promoted artifact cannot be read, `refresh` keeps the current bundle,
    logs it, and does not try that promotion again (the next promotion or a restart does): an artifact registered
    from a path the replicas cannot see would otherwise be re-read and re-logged on every poll. Requests read
    `predictors` without locking; the lock only keeps two reloads (the reloader's and a training's) from racing.
    `refresh` also re-indexes the store's profiles when they changed (`repo.profiles_mark`: their count and newest
    write), keeping the models, so a finished trial run is used without a training or a restart.
    """

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions
        self._lock = threading.Lock()
        self._predictors = Predictors.heuristic()
        self._models: LoadedModels | None = None  # what the bundle was built from; None: heuristics only
        self._seen: dict[str, int] | None = None  # the promotion last acted on; None: none read yet
        self._profiles_mark: tuple[int, datetime | None] | None = None  # the profiles the bundle indexes
        self._registry_failing = False
        self.answers = AnswerCounts()

    @property
    def predictors(self) -> Predictors:
        return self._predictors

    def served(self) -> dict[str, dict[str, Any]]:
        """Per kind served from a model: its version and the source of its training data."""
        models = self._models
        if models is None:
            return {}
        return {
            kind: {"version": version, "source": models.sources.get(kind, "")}
            for kind, version in sorted(models.versions.items())
        }

    @property
    def _serving(self) -> dict[str, int] | None:
        """The promoted versions in the bundle; None: heuristics only."""
        return self._models.versions if self._models is not None else None

    def load(self) -> None:
        """Serve the promoted versions that can be read, heuristics for the rest (start-up: nothing better to keep)."""
        with self._lock:
            self._reload(partial_ok=True)

    def refresh(self) -> bool:
        """Serve the promoted versions if they changed since the last look, and re-index the store's profiles if they
        changed (a trial run finished, profiles were imported); True when the bundle was replaced."""
        with self._lock:
            return self._reload(partial_ok=False)

    def _store_failed(self, e: SQLAlchemyError) -> bool:
        if not self._registry_failing:
            log.warning(
                "model registry unreadable, still serving %s: %s", _describe(self._serving), e.__class__.__name__
            )
        self._registry_failing = True
        return False

    def _reload(self, *, partial_ok: bool) -> bool:
        try:
            promoted = promoted_versions(self._sessions)
            with self._sessions() as session:
                mark = repo.profiles_mark(session=session)
        except SQLAlchemyError as e:
            return self._store_failed(e)
        self._registry_failing = False
        if partial_ok or promoted != self._seen:
            return self._load_models(promoted, mark, partial_ok=partial_ok)
        if mark == self._profiles_mark or self._models is None:
            return False
        try:
            profiles = ProfileIndex.build(self._sessions, self._models.throughput)
        except SQLAlchemyError as e:
            return self._store_failed(e)
        self._predictors = predictors_from(self._models, profiles, self.answers)
        self._profiles_mark = mark
        log.info("profiles changed: %d solo profiles indexed, serving %s", len(profiles), _describe(self._serving))
        return True

    def _load_models(self, promoted: dict[str, int], mark: tuple[int, datetime | None], *, partial_ok: bool) -> bool:
        self._seen = promoted
        try:
            models = load_promoted(self._sessions)
            profiles = ProfileIndex.build(self._sessions, models.throughput)
        except SQLAlchemyError as e:
            self._seen = None  # the store failed, not the artifacts: try again on the next poll
            return self._store_failed(e)
        # Not only ArtifactError (which load_promoted turns into a missing model): a truncated booster fails inside
        # LightGBM. Whatever it is, requests keep the current bundle, and the same promotion is not tried again.
        except Exception:
            log.exception(
                "loading promoted models %s failed, still serving %s", _describe(promoted), _describe(self._serving)
            )
            return False
        if not partial_ok and models.versions != promoted:
            log.warning(
                "promoted models %s could not all be loaded (read: %s), still serving %s until the next promotion",
                _describe(promoted),
                _describe(models.versions),
                _describe(self._serving),
            )
            return False
        self._predictors = predictors_from(models, profiles, self.answers)
        self._models = models
        self._profiles_mark = mark
        log.info("serving %s", _describe(self._serving))
        return True


class ModelReloader:
    """A daemon thread that calls `refresh` every `interval_seconds` until `stop()`."""

    def __init__(self, served: ServedModels, interval_seconds: float) -> None:
        if interval_seconds <= 0:
            raise ValueError(f"interval_seconds must be > 0, got {interval_seconds}")
        self._served = served
        self._interval_seconds = interval_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="advisor-model-reload", daemon=True)

    def start(self) -> ModelReloader:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the thread to finish and wait for a reload in progress (bounded: a hung store must not block exit)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30.0)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_seconds):
            self._served.refresh()


# --------------------------------------------------------------------------------------------------------------------
# Background training for POST /v1/models/train


@dataclass
class TrainingJob:
    id: str
    kinds: tuple[Kind, ...]
    state: str = "queued"  # queued | running | succeeded | failed
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


def store_frame(sessions: sessionmaker[Session], kind: Kind) -> Any:
    """The store's training data of `kind` as the kind's frame."""
    with sessions() as session:
        return MODEL_KINDS[kind].store_frame(session, False)


class TrainingJobs:
    """One training at a time in a background thread; `on_done` (`ServedModels.refresh`) serves what it promotes.

    `wait_for(ready)`: jobs stay queued until `ready` is set — `gpuadvisor up` fills its store in the background after
    the banner, and a training started meanwhile saw "0 usable row(s)" or a locked SQLite file instead of the data."""

    def __init__(
        self, sessions: sessionmaker[Session], model_dir: Path, on_done: Callable[[], object] | None = None
    ) -> None:
        self._sessions = sessions
        self._model_dir = model_dir
        self._on_done = on_done
        self._jobs: dict[str, TrainingJob] = {}
        self._lock = threading.Lock()
        self._ready: threading.Event | None = None

    def wait_for(self, ready: threading.Event) -> None:
        """Hold every job (queued) until `ready` is set."""
        self._ready = ready

    def get(self, job_id: str) -> TrainingJob | None:
        return self._jobs.get(job_id)

    def running(self) -> TrainingJob | None:
        return next((j for j in self._jobs.values() if j.state in ("queued", "running")), None)

    def start(self, kinds: tuple[Kind, ...], *, force: bool = False) -> TrainingJob:
        """Queue a training of `kinds`; raises RuntimeError while another one is still running."""
        with self._lock:
            busy = self.running()
            if busy is not None:
                raise RuntimeError(f"training {busy.id} is still {busy.state}")
            job = TrainingJob(id=uuid.uuid4().hex[:12], kinds=kinds)
            self._jobs[job.id] = job
        threading.Thread(target=self._run, args=(job, force), name=f"train-{job.id}", daemon=True).start()
        return job

    def _run(self, job: TrainingJob, force: bool) -> None:
        if self._ready is not None:
            self._ready.wait()
        job.state = "running"
        try:
            for kind in job.kinds:
                job.results.append(self._train_one(kind, force=force))
            job.state = "succeeded" if any(r.get("promoted") is not None for r in job.results) else "failed"
            if job.state == "failed":
                job.error = "; ".join(str(r["error"]) for r in job.results if "error" in r)
        except (SQLAlchemyError, OSError) as e:
            # the driver's message without SQLAlchemy's statement, parameters and help link
            job.state, job.error = "failed", f"{e.__class__.__name__}: {str(e).splitlines()[0]}"
        finally:
            job.finished_at = datetime.now(UTC)
            if self._on_done is not None:
                self._on_done()

    def _train_one(self, kind: Kind, *, force: bool) -> dict[str, Any]:
        try:
            trained = train(kind, store_frame(self._sessions, kind), source="store")
        except InputDataError as e:
            return {"kind": kind, "error": str(e)}
        out = version_path(self._model_dir, kind, datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ"))
        registration = save_and_register(trained, out, self._sessions, kind, force=force)
        return {
            "kind": kind,
            "version": registration.version,
            "promoted": registration.promoted,
            "reason": registration.reason,
            "artifact": str(out),
            "metrics": trained.metrics,
        }
