"""The TrialRun controller's logic: one idempotent `reconcile` per TrialRun, against a small cluster port.

Everything Kubernetes-specific sits behind `ClusterApi` (implemented with the kubernetes client in
`profiler.kube`, where kopf calls `reconcile` on create, resume and a timer). State that must survive a restart
lives in the TrialRun's status — each finished trial keeps its summaries there — so a reconcile only has to
look at the status, the Jobs and their pods. Progress is buffered in memory because a pod killed by its deadline
may take its log with it. The collector's telemetry annotation only ever holds the latest sample, so each new
sample (and each GPU a side was seen on) is also written to the store as it is seen: a restarted controller
rebuilds a running trial's samples from there, and the rows go in the transaction that saves the trial's outcome.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from sqlalchemy.orm import Session, sessionmaker

from collector.annotations import read_sharing_annotation
from collector.keys import (
    GPU_PRODUCT_LABEL,
    GPUS_ANNOTATION,
    MEMORY_ANNOTATION,
    SHARING_ANNOTATION,
    SIDE_LABEL,
    TRIAL_LABEL,
    TRIALRUN_LABEL,
    UPDATED_AT_ANNOTATION,
    UTILIZATION_ANNOTATION,
)
from collector.sharing import decide_sharing
from profiler.manifests import (
    job_manifest,
    label_value,
    resolve_gpu_products,
    sharing_nodes,
    sharing_of_node,
)
from profiler.progress import ProgressSample, parse_progress
from profiler.records import TelemetryRecord, TrialSideRef, TrialSideTelemetry
from profiler.results import DEFAULT_MAX_SPREAD_RATIO, Phase, TrialOutcome, save_results
from profiler.spec import SpecError, TrialRun, parse_trialrun
from profiler.store import db, repo
from profiler.summary import (
    DEFAULT_STEADY_SECONDS,
    DEFAULT_WARMUP_FRACTION,
    OverlapRule,
    SummaryError,
    TelemetrySample,
    TrialSummary,
    measured_enough,
    summarise,
    summarise_pair,
)
from profiler.trials import Trial, TrialKind, expand, solo_of, target_seconds

log = logging.getLogger(__name__)

Obj = dict[str, Any]
# What a side's Job is reported as when the controller stopped it because the trial had measured enough.
MEASURED_ENOUGH = "stopped (measured enough)"


class RefusedBy(StrEnum):
    """Who answered a request HTTP 403, read from the API server's message (`refused_by`)."""

    RBAC = "rbac"
    ADMISSION_WEBHOOK = "admission webhook"
    ADMISSION_POLICY = "admission policy"
    ADMISSION = "admission"


# The authorizer's denial (k8s.io/apiserver endpoints/handlers/responsewriters, forbiddenMessage): `User "<name>"
# cannot <verb> resource "<resource>" in API group "<group>" ...`, behind `<resource> is forbidden: `.
_AUTHORIZER_DENIAL = re.compile(r'User ".*" cannot \S+ (resource|path) "')
# A validating webhook's denial as the API server passes it on (k8s.io/apiserver admission/plugin/webhook/errors,
# ToStatusErr): `admission webhook "<name>" denied the request: <its message>`, with the code the webhook chose.
_WEBHOOK_DENIAL = re.compile(r'admission webhook "([^"]+)" denied the request')
# A ValidatingAdmissionPolicy's (admission/plugin/policy/validating): `ValidatingAdmissionPolicy '<name>' with
# binding '<binding>' denied request: ...`.
_POLICY_DENIAL = re.compile(r"ValidatingAdmissionPolicy '([^']+)'")


def refused_by(message: str) -> RefusedBy:
    """Whether a 403's message is the authorizer's (RBAC: permissions would help) or admission control's (a webhook,
    a ValidatingAdmissionPolicy, or a built-in plugin such as ResourceQuota: permissions would not)."""
    if _WEBHOOK_DENIAL.search(message):
        return RefusedBy.ADMISSION_WEBHOOK
    if _POLICY_DENIAL.search(message):
        return RefusedBy.ADMISSION_POLICY
    if _AUTHORIZER_DENIAL.search(message):
        return RefusedBy.RBAC
    return RefusedBy.ADMISSION


class NamespaceForbiddenError(Exception):
    """The cluster refuses the profiler an operation in a namespace (HTTP 403): by RBAC (the namespace lacks the trial
    Roles) or by admission control (a webhook or policy refuses the trial Jobs); retrying will not help."""

    @property
    def refused_by(self) -> RefusedBy:
        return refused_by(str(self))


def forbidden_message(namespace: str, e: NamespaceForbiddenError) -> str:
    """The TrialRun's status message for a 403: what refused it, in the server's words, and who can change that."""
    cause = e.refused_by
    if cause is RefusedBy.RBAC:
        return (
            f"trials may not run in namespace {namespace!r}: {e}. An admin allows a namespace with "
            "deploy/trial-namespace (docs/install.md)"
        )
    match = _WEBHOOK_DENIAL.search(str(e)) or _POLICY_DENIAL.search(str(e))
    who = f"{cause} {match.group(1)!r}" if match else "an admission plugin of the API server"
    return (
        f"the cluster's admission control refused a trial Job in namespace {namespace!r}: {e}. The profiler's "
        f"permissions are not the cause (deploy/trial-namespace will not help): {who} decides; change the TrialRun "
        "to meet it, or ask the cluster's admins"
    )


def retry_status(problem: str, *, attempt: int, next_try: datetime, status: Mapping[str, Any] | None) -> dict[str, Any]:
    """The status fields that show a reconcile waiting to be retried after a temporary failure (`problem`, the API
    server's answer): `retry` (attempts so far, the next try, the problem), the message, and `Pending` while the run
    has no phase yet. The next successful reconcile replaces the message and removes `retry`."""
    when = next_try.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out: dict[str, Any] = {
        "message": f"waiting to retry (attempt {attempt} failed, next try at {when}): {problem}",
        "retry": {"attempts": attempt, "nextTryTime": when, "message": problem},
    }
    if not (status or {}).get("phase"):
        out["phase"] = str(Phase.PENDING)
    return out


class ClusterApi(Protocol):
    """The few cluster operations the controller needs; objects are plain JSON dicts (camelCase). The namespaced
    ones raise `NamespaceForbiddenError` when the profiler has no permission there."""

    def list_nodes(self) -> list[Obj]: ...

    def list_jobs(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]: ...

    def create_job(self, namespace: str, manifest: Obj) -> None: ...

    def delete_job(self, namespace: str, name: str) -> None: ...

    def list_pods(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]: ...

    def pod_log(self, namespace: str, name: str) -> str: ...


def _matches(obj: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Label match done here too: a selector the server ignores must not widen what the controller acts on."""
    have = obj.get("metadata", {}).get("labels", {}) or {}
    return all(have.get(k) == v for k, v in labels.items())


@dataclass
class _SideState:
    """What has been seen of one running trial side.

    After a restart, progress is read again from the pod log; telemetry and GPUs come back from the store. A pair's
    first side also keeps how the collector saw the shared GPU shared while both ran (its node's sharing annotation;
    in memory only: after a restart, from the next reads on).
    """

    progress: tuple[ProgressSample, ...] = ()
    telemetry: list[TelemetrySample] = field(default_factory=list)
    telemetry_stamps: set[str] = field(default_factory=set)
    gpus: set[str] = field(default_factory=set)
    node: str | None = None
    sharing_seen: set[str] = field(default_factory=set)

    @classmethod
    def stored(cls, kept: TrialSideTelemetry) -> _SideState:
        return cls(
            telemetry=[_sample(r) for r in kept.samples],
            telemetry_stamps={r.stamp for r in kept.samples},
            gpus=set(kept.gpus),
        )


def _sample(record: TelemetryRecord) -> TelemetrySample:
    return TelemetrySample(
        t_seconds=record.t_seconds,
        sm_utilization_ratio=record.sm_utilization_ratio,
        memory_used_bytes=record.memory_used_bytes,
    )


@dataclass(frozen=True, slots=True)
class _Pass:
    """One reconcile of one TrialRun: the parsed run, its trials, the nodes, the outcomes decided so far, and the
    Jobs of decided trials, deleted only once their outcomes are committed."""

    run: TrialRun
    uid: str
    trials: list[Trial]
    nodes: list[Obj]
    outcomes: list[TrialOutcome]
    finished_jobs: list[Mapping[str, Any]] = field(default_factory=list)


def _summary_from_status(data: Mapping[str, Any]) -> TrialSummary:
    return TrialSummary(**{k: data[k] for k in TrialSummary.__dataclass_fields__ if k in data})


def outcome_from_status(trial: Trial, entry: Mapping[str, Any]) -> TrialOutcome:
    """A finished trial as recorded in the TrialRun status by an earlier reconcile."""
    return TrialOutcome(
        trial,
        Phase(entry["phase"]),
        str(entry.get("message", "")),
        entry.get("measuredGpuModel"),
        entry.get("node"),
        tuple(_summary_from_status(s) for s in entry.get("summaries", [])),
        dict(entry.get("notes", {})),
    )


def status_entry_extras(outcome: TrialOutcome) -> dict[str, Any]:
    """What the status keeps per finished trial beyond the shared fields, so later reconciles can rebuild it."""
    return {"summaries": [s.as_dict() for s in outcome.summaries], "notes": outcome.notes}


def _side_ref(run: TrialRun, trial: Trial, side: int) -> TrialSideRef:
    return TrialSideRef(namespace=run.metadata.namespace, trial_run=run.metadata.name, trial=trial.id, side=side)


def _parse_time(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _job_finished(job: Mapping[str, Any]) -> str | None:
    """ "Complete" or "Failed" (with the reason) once the Job is done, else None."""
    status = job.get("status", {}) or {}
    for condition in status.get("conditions", []) or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "Complete"
        if condition.get("type") == "Failed":
            return f"Failed ({condition.get('reason') or 'unknown reason'})"
    if status.get("succeeded"):
        return "Complete"
    if status.get("failed"):
        return "Failed"
    return None


class Controller:
    """Drives TrialRuns: creates trial Jobs, watches them, summarises and stores results, cleans up."""

    def __init__(
        self,
        *,
        cluster: ClusterApi,
        sessions: sessionmaker[Session],
        max_duration_seconds: int,
        warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
        overlap: OverlapRule = OverlapRule(),
        max_spread_ratio: float = DEFAULT_MAX_SPREAD_RATIO,
        steady_seconds: float = DEFAULT_STEADY_SECONDS,
    ) -> None:
        self.cluster = cluster
        self.sessions = sessions
        self.max_duration_seconds = max_duration_seconds
        self.warmup_fraction = warmup_fraction
        self.overlap = overlap
        self.max_spread_ratio = max_spread_ratio
        self.steady_seconds = steady_seconds
        self._sides: dict[TrialSideRef, _SideState] = {}
        # kopf may call create, resume and timer handlers of one run from different threads at once, and its delete
        # handler while a timer's reconcile is still under way.
        self._lock = threading.Lock()
        # UIDs of the TrialRuns deleted while this controller ran (a few dozen bytes each): a reconcile that was
        # waiting for the lock with the body from before the deletion must not start their Jobs again.
        self._forgotten: set[str] = set()

    def reconcile(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Advance one TrialRun and return its new status (the caller patches it onto the resource); a run already
        deleted (`forget_run`) is left as it is."""
        with self._lock:
            if str(obj.get("metadata", {}).get("uid") or "") in self._forgotten:
                return dict(obj.get("status") or {})
            return self._reconcile(obj)

    def _reconcile(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        try:
            run = parse_trialrun(
                {k: v for k, v in obj.items() if k != "status"}, max_duration_seconds=self.max_duration_seconds
            )
        except SpecError as e:
            return {"phase": str(Phase.FAILED), "message": f"invalid TrialRun: {e}", "trials": []}
        uid = str(obj.get("metadata", {}).get("uid") or "")
        previous = {
            t["trial"]: t
            for t in (obj.get("status", {}) or {}).get("trials", [])
            if isinstance(t, dict) and "trial" in t
        }
        trials = expand(run.spec)
        nodes = self.cluster.list_nodes()
        outcomes: list[TrialOutcome] = []
        decided: list[str] = []
        this = _Pass(run, uid, trials, nodes, outcomes)
        try:
            for trial in trials:
                entry = previous.get(trial.id)
                if entry is not None and entry.get("phase") in (Phase.SUCCEEDED, Phase.FAILED):
                    outcomes.append(outcome_from_status(trial, entry))
                    continue
                outcome = self._advance(this, trial)
                outcomes.append(outcome)
                if outcome.done:
                    decided.append(trial.id)
        except NamespaceForbiddenError as e:
            # Retrying cannot help until an admin changes RBAC or admission; say which, once, in the status.
            return {"phase": str(Phase.FAILED), "message": forbidden_message(run.metadata.namespace, e), "trials": []}
        with db.transaction(self.sessions) as session:
            status = save_results(
                session=session, run=run, trials=trials, outcomes=outcomes, max_spread_ratio=self.max_spread_ratio
            )
            repo.delete_trial_telemetry(
                session=session, namespace=run.metadata.namespace, trial_run=run.metadata.name, trials=decided
            )
        # Only now: had the save failed, the Jobs (and their pods' logs) would still be there for the next reconcile.
        self._cleanup(run.metadata.namespace, this.finished_jobs)
        by_id = {o.trial.id: o for o in outcomes}
        for entry in status["trials"]:
            outcome = by_id[entry["trial"]]
            if outcome.done:
                entry.update(status_entry_extras(outcome))
        return status

    def _advance(self, this: _Pass, trial: Trial) -> TrialOutcome:
        run = this.run
        namespace = run.metadata.namespace
        selector = {TRIALRUN_LABEL: label_value(run.metadata.name), TRIAL_LABEL: trial.id}
        jobs = [j for j in self.cluster.list_jobs(namespace, selector) if _matches(j, selector)]
        if not jobs:
            return self._start(this, trial)
        pods = [p for p in self.cluster.list_pods(namespace, selector) if _matches(p, selector)]
        for pod in pods:
            self._observe(run, trial, pod)
        finished = {
            int("ab".index(j["metadata"]["labels"][SIDE_LABEL])): _job_finished(j)
            for j in jobs
            if j["metadata"].get("labels", {}).get(SIDE_LABEL) in ("a", "b")
        }
        if trial.kind is TrialKind.PAIR:
            self._see_sharing(run, trial, this.nodes)
            mismatch = self._sharing_problem(run, trial)
            if mismatch is not None:
                this.finished_jobs.extend(jobs)
                return self._fail(run, trial, mismatch)
        if len(finished) == len(trial.sides) and self._measured_enough(run, trial):
            # time-bound: stop the Jobs (deleted once the outcome is saved) instead of waiting for their own end
            stopped = {side: state or MEASURED_ENOUGH for side, state in finished.items()}
            outcome = self._finish(run, trial, stopped, this.nodes)
            this.finished_jobs.extend(jobs)
            return outcome
        if len(finished) < len(trial.sides) or any(state is None for state in finished.values()):
            return TrialOutcome(trial, Phase.RUNNING, "running")
        outcome = self._finish(run, trial, finished, this.nodes)
        this.finished_jobs.extend(jobs)
        return outcome

    def _measured_enough(self, run: TrialRun, trial: Trial) -> bool:
        """Whether the running sides' logs already hold the steady (overlapping) time the trial needs."""
        progress = [self._state(run, trial, side).progress for side in range(len(trial.sides))]
        target = target_seconds(run, self.steady_seconds)
        return measured_enough(progress, target, warmup_fraction=self.warmup_fraction, rule=self.overlap)

    def _start(self, this: _Pass, trial: Trial) -> TrialOutcome:
        run, nodes = this.run, this.nodes
        products: list[str] | None = None
        if trial.gpu_model is not None:
            labels = (n.get("metadata", {}).get("labels", {}) or {} for n in nodes)
            products = resolve_gpu_products(
                trial.gpu_model, (lb[GPU_PRODUCT_LABEL] for lb in labels if GPU_PRODUCT_LABEL in lb)
            )
            if not products:
                return TrialOutcome(
                    trial, Phase.FAILED, f"no node has a GPU matching {trial.gpu_model!r} (label {GPU_PRODUCT_LABEL})"
                )
        node_name: str | None = None
        if trial.kind is TrialKind.PAIR:
            done = {o.trial.id: o for o in this.outcomes}
            solos = [done.get(solo_of(this.trials, side, trial.gpu_model, trial.repeat).id) for side in trial.sides]
            if any(s is None or not s.done for s in solos):
                return TrialOutcome(trial, Phase.PENDING, "waiting for the solo runs of both sides")
            candidates = sharing_nodes(nodes, products)
            if not candidates:
                return TrialOutcome(
                    trial, Phase.FAILED, "no GPU-sharing node (time-slicing or MPS) with the requested GPU model"
                )
            node_name = candidates[0]
        for side in range(len(trial.sides)):
            manifest = job_manifest(run, this.uid, trial, side, gpu_products=products, node_name=node_name)
            self.cluster.create_job(run.metadata.namespace, manifest)
        where = f" on node {node_name}" if node_name else ""
        return TrialOutcome(trial, Phase.RUNNING, f"created {len(trial.sides)} job(s){where}")

    def _state(self, run: TrialRun, trial: Trial, side: int) -> _SideState:
        """The side's state; the first time this controller instance needs it, what earlier ones stored."""
        key = _side_ref(run, trial, side)
        state = self._sides.get(key)
        if state is None:
            with self.sessions() as session:
                state = _SideState.stored(repo.trial_side_telemetry(session=session, side=key))
            self._sides[key] = state
        return state

    def _observe(self, run: TrialRun, trial: Trial, pod: Mapping[str, Any]) -> None:
        """Buffer the pod's progress (from its log) and the collector's telemetry (from its annotations)."""
        meta = pod.get("metadata", {})
        side_label = (meta.get("labels", {}) or {}).get(SIDE_LABEL)
        if side_label not in ("a", "b"):
            return
        side = "ab".index(side_label)
        state = self._state(run, trial, side)
        state.node = (pod.get("spec", {}) or {}).get("nodeName") or state.node
        phase = (pod.get("status", {}) or {}).get("phase")
        if phase in ("Running", "Succeeded", "Failed"):
            stream = parse_progress(self.cluster.pod_log(run.metadata.namespace, meta["name"]).splitlines())
            if len(stream.samples) >= len(state.progress):
                state.progress = stream.samples
        annotations = meta.get("annotations", {}) or {}
        stamp = annotations.get(UPDATED_AT_ANNOTATION)
        sample: TelemetryRecord | None = None
        if stamp and stamp not in state.telemetry_stamps and UTILIZATION_ANNOTATION in annotations:
            memory = annotations.get(MEMORY_ANNOTATION)
            sample = TelemetryRecord(
                stamp=stamp,
                t_seconds=_parse_time(stamp),
                sm_utilization_ratio=float(annotations[UTILIZATION_ANNOTATION]),
                memory_used_bytes=int(memory) if memory else None,
            )
        listed = annotations.get(GPUS_ANNOTATION) or ""
        new_gpus = {g.strip() for g in listed.split(",") if g.strip()} - state.gpus
        if sample is None and not new_gpus:
            return
        # Stored before it is remembered: if the write fails, the next reconcile sees the sample as new again.
        key = _side_ref(run, trial, side)
        with db.transaction(self.sessions) as session:
            if sample is not None:
                repo.add_trial_telemetry(session=session, side=key, sample=sample)
            repo.add_trial_gpus(session=session, side=key, uuids=new_gpus)
        if sample is not None:
            state.telemetry_stamps.add(sample.stamp)
            state.telemetry.append(_sample(sample))
        state.gpus.update(new_gpus)

    def _see_sharing(self, run: TrialRun, trial: Trial, nodes: Sequence[Mapping[str, Any]]) -> None:
        """Note how the collector sees the GPU both sides run on shared (its node's sharing annotation)."""
        a, b = self._state(run, trial, 0), self._state(run, trial, 1)
        shared = a.gpus & b.gpus
        if not shared or a.node is None:
            return
        node = next((n for n in nodes if n.get("metadata", {}).get("name") == a.node), None)
        if node is None:
            return
        by_gpu = read_sharing_annotation((node["metadata"].get("annotations") or {}).get(SHARING_ANNOTATION))
        a.sharing_seen.update(by_gpu[g] for g in shared if by_gpu.get(g))

    def _sharing_problem(self, run: TrialRun, trial: Trial) -> str | None:
        """Why the two sides of a pair demonstrably did not share one GPU, or None (shared, or not known yet)."""
        a, b = (self._state(run, trial, side) for side in (0, 1))
        if a.gpus and b.gpus and not a.gpus & b.gpus:
            return (
                f"the pods did not share a GPU (a on {', '.join(sorted(a.gpus))}, b on {', '.join(sorted(b.gpus))}); "
                "check the node's time-slicing/MPS configuration"
            )
        return None

    def _finish(
        self, run: TrialRun, trial: Trial, finished: Mapping[int, str | None], nodes: list[Obj]
    ) -> TrialOutcome:
        states = [self._state(run, trial, side) for side in range(len(trial.sides))]
        if trial.kind is TrialKind.PAIR and not (states[0].gpus and states[1].gpus):
            return self._fail(
                run, trial, "could not verify that the pods shared a GPU: no per-pod telemetry from the collector"
            )
        node = states[0].node
        labels = next(
            (n["metadata"].get("labels", {}) or {} for n in nodes if n.get("metadata", {}).get("name") == node), {}
        )
        gpu_model = labels.get(GPU_PRODUCT_LABEL)
        summaries: list[TrialSummary] = []
        for side, state in enumerate(states):
            try:
                summaries.append(summarise(state.progress, state.telemetry, warmup_fraction=self.warmup_fraction))
            except SummaryError as e:
                return self._fail(
                    run, trial, f"{trial.sides[side].workload} (job {finished[side]}): {e}", gpu_model, node
                )
        messages = [
            f"{trial.sides[s].workload}: job {state}"
            for s, state in finished.items()
            if state not in ("Complete", MEASURED_ENOUGH)
        ]
        if MEASURED_ENOUGH in finished.values():
            messages.append("stopped once it had measured enough steady time")
        notes: dict[str, Any] = {
            "runner": "kubernetes",
            "ended": "measured" if MEASURED_ENOUGH in finished.values() else "exited",
        }
        if trial.kind is TrialKind.PAIR:
            try:
                a, b = summarise_pair(
                    (states[0].progress, states[1].progress),
                    (states[0].telemetry, states[1].telemetry),
                    warmup_fraction=self.warmup_fraction,
                    rule=self.overlap,
                )
            except SummaryError as e:
                return self._fail(run, trial, str(e), gpu_model, node)
            summaries = [a, b]
            notes["shared_gpus"] = sorted(states[0].gpus & states[1].gpus)
            # what the collector read while the pair ran (MPS clients are listed only then), else the node's label
            notes["sharing"], _ = decide_sharing(states[0].sharing_seen, sharing_of_node(labels))
        self._forget(run, trial)
        return TrialOutcome(trial, Phase.SUCCEEDED, "; ".join(messages), gpu_model, node, tuple(summaries), notes)

    def _fail(
        self, run: TrialRun, trial: Trial, message: str, gpu_model: str | None = None, node: str | None = None
    ) -> TrialOutcome:
        self._forget(run, trial)
        return TrialOutcome(trial, Phase.FAILED, message, gpu_model, node)

    def _forget(self, run: TrialRun, trial: Trial) -> None:
        """Drop the in-memory state; the stored rows go when the outcome is saved (or are reloaded if that fails)."""
        for side in range(len(trial.sides)):
            self._sides.pop(_side_ref(run, trial, side), None)

    def forget_run(self, namespace: str, name: str, uid: str) -> None:
        """A TrialRun was deleted: delete the Jobs it owned and drop what was kept of its running trials, in memory
        and in the store. The Jobs' owner references let a cluster's garbage collector do the same; deleting them
        here makes it immediate and holds where no collector runs. Only Jobs owned by this `uid` go: a TrialRun of
        the same name created since keeps its own."""
        with self._lock:  # after a reconcile under way, which may be creating Jobs of this run
            self._forgotten.add(uid)
            selector = {TRIALRUN_LABEL: label_value(name)}
            try:
                listed = self.cluster.list_jobs(namespace, selector)
            except NamespaceForbiddenError as e:
                # Not allowed to list Jobs there, so not allowed to create them either (the trial Role was never
                # there, or was removed): the deletion goes on; what Jobs remain, the garbage collector takes.
                log.info("TrialRun %s/%s deleted; its Jobs are left to the garbage collector: %s", namespace, name, e)
                listed = []
            owned = [
                job
                for job in listed
                if _matches(job, selector)
                and any(ref.get("uid") == uid for ref in job["metadata"].get("ownerReferences") or [])
            ]
            self._cleanup(namespace, owned)
            for key in [k for k in self._sides if (k.namespace, k.trial_run) == (namespace, name)]:
                del self._sides[key]
            with db.transaction(self.sessions) as session:
                repo.delete_trial_telemetry(session=session, namespace=namespace, trial_run=name, trials=None)

    def _cleanup(self, namespace: str, jobs: Sequence[Mapping[str, Any]]) -> None:
        for job in jobs:
            self.cluster.delete_job(namespace, job["metadata"]["name"])
