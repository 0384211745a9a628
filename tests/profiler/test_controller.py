"""The TrialRun controller against a Kubernetes API stand-in (kmock) through the real kubernetes client.

The test plays the cluster: it seeds GPU nodes, lets the controller create Jobs, then marks Jobs complete, adds
their pods (with the collector's telemetry annotations) and serves their logs, and reconciles again.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import kmock
import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import OperationalError

from collector.kube import make_api_client
from profiler.controller import Controller
from profiler.kube import KubeCluster
from profiler.store import db, repo
from profiler.store.models import Colocation, Profile, TrialGpu, TrialTelemetry
from profiler.summary import OverlapRule
from tests.profiler.specs import trialrun

pytestmark = pytest.mark.asyncio

NS = "ml"
NODES = kmock.resource("", "v1", "nodes")
PODS = kmock.resource("", "v1", "pods")
JOBS = kmock.resource("batch", "v1", "jobs")
H100 = "NVIDIA-H100-80GB-HBM3"
T0 = 1763717000.0


def _run_doc(**changes: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "matrix": {"gpuModels": ["H100"], "gpuCounts": [1, 2], "batchSizes": [32]},
        "colocateWith": [{"workload": "lstm", "command": ["python", "lstm.py"], "batchSize": 20}],
    }
    doc = trialrun(**{**defaults, **changes})
    doc["metadata"]["uid"] = "uid-1"
    return doc


def _seed_nodes(k: kmock.KubernetesEmulator) -> None:
    """Declare the resources the controller lists and add one plain and one GPU-sharing H100 node."""
    k.resources["batch/v1/jobs"] = {}
    k.resources["v1/pods"] = {}
    k.objects[NODES, None, "plain-1"] = {
        "metadata": {"name": "plain-1", "labels": {"nvidia.com/gpu.product": H100}},
    }
    k.objects[NODES, None, "shared-1"] = {
        "metadata": {
            "name": "shared-1",
            "labels": {"nvidia.com/gpu.product": H100, "nvidia.com/gpu.sharing-strategy": "time-slicing"},
        },
    }


def _progress_log(rate: float, batch: int, steps: int = 30) -> bytes:
    lines = ["starting"]
    lines += [
        json.dumps({"gpuadvisor": 1, "step": s, "samples": s * batch, "t": T0 + s * batch / rate})
        for s in range(1, steps + 1)
    ]
    return ("\n".join(lines) + "\n").encode()


def _finish_job(
    k: kmock.KubernetesEmulator, job: dict[str, Any], *, node: str, gpu: str, rate: float, batch: int
) -> None:
    """Mark the Job complete and add its finished pod, with telemetry annotations and a progress log."""
    _complete(k, job)
    annotations = _telemetry("2025-11-21T10:00:05Z", 0.75, 6 << 30, gpus=gpu)
    _put_pod(k, job, phase="Succeeded", node=node, rate=rate, batch=batch, annotations=annotations)


def _jobs(k: kmock.KubernetesEmulator) -> dict[str, dict[str, Any]]:
    return {key[2]: dict(obj.raw) for key, obj in k.objects.items() if key[0] == JOBS and not obj.deleted}


async def _reconcile(controller: Controller, doc: dict[str, Any]) -> dict[str, Any]:
    status = await asyncio.to_thread(controller.reconcile, doc)
    doc["status"] = copy.deepcopy(status)
    return status


@pytest.fixture
def engine(tmp_path: Any) -> Engine:
    engine = db.make_engine(f"sqlite:///{tmp_path}/store.db")
    db.upgrade(engine)
    return engine


def _controller(k: kmock.KubernetesEmulator, engine: Engine) -> Controller:
    cluster = KubeCluster(make_api_client(str(k.url).rstrip("/")))
    # The recorded pods report a few seconds of progress each; the overlap rule is scaled down to match.
    overlap = OverlapRule(min_seconds=1.0, min_share=0.2)
    return Controller(cluster=cluster, sessions=db.session_factory(engine), max_duration_seconds=600, overlap=overlap)


async def test_controller_runs_solos_then_the_pair_and_stores_profiles(
    kmock: kmock.KubernetesEmulator, engine: Engine
) -> None:
    _seed_nodes(kmock)
    controller = _controller(kmock, engine)
    doc = _run_doc()

    status = await _reconcile(controller, doc)
    jobs = _jobs(kmock)
    assert sorted(jobs) == ["resnet-sweep-t000", "resnet-sweep-t001", "resnet-sweep-t002"]
    solo = jobs["resnet-sweep-t001"]
    assert solo["spec"]["activeDeadlineSeconds"] == 300
    assert solo["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert solo["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    terms = solo["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0][
        "values"
    ] == [H100]
    assert [t["phase"] for t in status["trials"]] == ["Running", "Running", "Running", "Pending"]
    assert status["phase"] == "Running"

    status = await _reconcile(controller, doc)  # nothing finished: no duplicate Jobs
    assert len(_jobs(kmock)) == 3

    rates = {"resnet-sweep-t000": 400.0, "resnet-sweep-t001": 760.0, "resnet-sweep-t002": 200.0}
    for name, job in jobs.items():
        batch = 20 if name.endswith("t002") else 32
        _finish_job(kmock, job, node="plain-1", gpu="GPU-1", rate=rates[name], batch=batch)
    status = await _reconcile(controller, doc)
    assert [t["phase"] for t in status["trials"]] == ["Succeeded", "Succeeded", "Succeeded", "Running"]
    assert status["trials"][1]["throughputs"][0] == pytest.approx(760.0)
    assert status["trials"][1]["measuredGpuModel"] == H100
    pair_jobs = _jobs(kmock)
    assert sorted(pair_jobs) == ["resnet-sweep-t003-a", "resnet-sweep-t003-b"]  # solo Jobs cleaned up
    for job in pair_jobs.values():
        assert job["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "shared-1"}

    _finish_job(kmock, pair_jobs["resnet-sweep-t003-a"], node="shared-1", gpu="GPU-s", rate=300.0, batch=32)
    _finish_job(kmock, pair_jobs["resnet-sweep-t003-b"], node="shared-1", gpu="GPU-s", rate=100.0, batch=20)
    status = await _reconcile(controller, doc)
    assert status["phase"] == "Succeeded", status["message"]
    assert _jobs(kmock) == {}

    sessions = db.session_factory(engine)
    with sessions() as s:
        (coloc,) = repo.list_colocations(session=s)
        profiles = {(p.workload, p.gpu_count): p for p in repo.list_profiles(session=s)}
    assert coloc.norm_a == pytest.approx(300 / 400, rel=0.01)
    assert coloc.norm_b == pytest.approx(100 / 200, rel=0.01)
    assert coloc.sharing == "time-slicing"  # the node's nvidia.com/gpu.sharing-strategy label
    resnet = profiles[("resnet50", 1)]
    assert resnet.sm_util_mean_ratio == 0.75
    assert resnet.peak_memory_bytes == 6 << 30
    assert resnet.extra["colocations"][0]["partner"] == "lstm"

    again = await _reconcile(controller, doc)  # re-summarising writes the same rows
    assert again["phase"] == "Succeeded"
    with sessions() as s:
        assert s.execute(select(func.count()).select_from(Profile)).scalar_one() == 3
        assert s.execute(select(func.count()).select_from(Colocation)).scalar_one() == 1


async def test_the_pair_records_how_the_collector_saw_its_gpu_shared_over_the_nodes_label(
    kmock: kmock.KubernetesEmulator, engine: Engine
) -> None:
    _seed_nodes(kmock)  # shared-1's label says time-slicing
    controller = _controller(kmock, engine)
    doc = _run_doc(matrix={"gpuModels": ["H100"], "gpuCounts": [1], "batchSizes": [32]})
    await _reconcile(controller, doc)
    for name, job in _jobs(kmock).items():
        _finish_job(kmock, job, node="plain-1", gpu="GPU-1", rate=400.0, batch=20 if "t001" in name else 32)
    await _reconcile(controller, doc)
    pair_jobs = _jobs(kmock)
    assert len(pair_jobs) == 2
    node = kmock.objects[NODES, None, "shared-1"]
    # while the pair runs, the collector reads MPS clients on the shared GPU (and nothing on another)
    node.patch(
        {"metadata": {"annotations": {"gpuadvisor.io/gpu-sharing": json.dumps({"GPU-s": "mps", "GPU-t": "mig"})}}}
    )
    for job in pair_jobs.values():
        annotations = _telemetry("2025-11-21T10:00:05Z", 0.75, 6 << 30, gpus="GPU-s")
        _put_pod(kmock, job, phase="Running", node="shared-1", rate=300.0, batch=32, annotations=annotations)
    assert (await _reconcile(controller, doc))["phase"] == "Running"
    # once they exit, the MPS clients are gone and the collector reads the default compute mode
    node.patch({"metadata": {"annotations": {"gpuadvisor.io/gpu-sharing": json.dumps({"GPU-s": "time-slicing"})}}})
    for name, job in pair_jobs.items():
        _finish_job(kmock, job, node="shared-1", gpu="GPU-s", rate=300.0 if name.endswith("-a") else 100.0, batch=32)
    status = await _reconcile(controller, doc)
    assert status["phase"] == "Succeeded", status["message"]
    with db.session_factory(engine)() as s:
        (coloc,) = repo.list_colocations(session=s)
    assert coloc.sharing == "mps"


async def test_a_pair_that_did_not_share_a_gpu_fails_with_that_reason(
    kmock: kmock.KubernetesEmulator, engine: Engine
) -> None:
    _seed_nodes(kmock)
    controller = _controller(kmock, engine)
    doc = _run_doc(matrix={"gpuModels": ["H100"], "gpuCounts": [1], "batchSizes": [32]})
    await _reconcile(controller, doc)
    for name, job in _jobs(kmock).items():
        _finish_job(kmock, job, node="plain-1", gpu="GPU-1", rate=300.0, batch=20 if name.endswith("t001") else 32)
    await _reconcile(controller, doc)
    pair = _jobs(kmock)
    _finish_job(kmock, pair["resnet-sweep-t002-a"], node="shared-1", gpu="GPU-s0", rate=300.0, batch=32)
    _finish_job(kmock, pair["resnet-sweep-t002-b"], node="shared-1", gpu="GPU-s1", rate=100.0, batch=20)
    status = await _reconcile(controller, doc)
    assert status["phase"] == "Failed"
    (pair_status,) = [t for t in status["trials"] if t["kind"] == "pair"]
    assert pair_status["phase"] == "Failed"
    assert "did not share a GPU" in pair_status["message"]
    assert _jobs(kmock) == {}


async def test_an_invalid_trialrun_fails_naming_the_field_and_creates_nothing(
    kmock: kmock.KubernetesEmulator, engine: Engine
) -> None:
    _seed_nodes(kmock)
    status = await _reconcile(_controller(kmock, engine), _run_doc(maxDurationSeconds=3600))
    assert status["phase"] == "Failed"
    assert "spec.maxDurationSeconds" in status["message"]
    assert _jobs(kmock) == {}


async def test_a_trialrun_where_trials_are_not_allowed_fails_saying_how_to_allow_them(
    kmock: kmock.KubernetesEmulator, engine: Engine
) -> None:
    _seed_nodes(kmock)
    # the API server's answer where the profiler has no Role (deploy/trial-namespace): Jobs are forbidden in NS, in
    # the authorizer's words (k8s.io/apiserver responsewriters.Forbidden; tests/kube sees the real one)
    denial = (
        'jobs.batch is forbidden: User "system:serviceaccount:gpuadvisor:gpuadvisor-profiler" cannot list resource '
        f'"jobs" in API group "batch" in the namespace "{NS}"'
    )
    kmock[f"/apis/batch/v1/namespaces/{NS}/jobs"] << 403 << {"kind": "Status", "code": 403, "message": denial}
    status = await _reconcile(_controller(kmock, engine), _run_doc())
    assert status["phase"] == "Failed"
    assert status["message"].startswith(f"trials may not run in namespace {NS!r}")
    assert denial in status["message"]
    assert "deploy/trial-namespace" in status["message"]


async def test_a_gpu_model_no_node_has_fails_that_trial(kmock: kmock.KubernetesEmulator, engine: Engine) -> None:
    _seed_nodes(kmock)
    doc = _run_doc(matrix={"gpuModels": ["B200"], "gpuCounts": [1]}, colocateWith=None)
    status = await _reconcile(_controller(kmock, engine), doc)
    assert status["trials"][0]["phase"] == "Failed"
    assert "'B200'" in status["trials"][0]["message"]
    assert _jobs(kmock) == {}


def _put_pod(
    k: kmock.KubernetesEmulator,
    job: dict[str, Any],
    *,
    phase: str,
    node: str,
    rate: float,
    batch: int,
    annotations: dict[str, str],
    steps: int = 30,
) -> None:
    """Add or replace the Job's pod with these collector annotations (the collector rewrites them each sample)."""
    name = job["metadata"]["name"]
    pod = f"{name}-x7k2p"
    k.objects[PODS, NS, pod] = {
        "metadata": {
            "name": pod,
            "namespace": NS,
            "uid": f"uid-{pod}",
            "labels": {**job["spec"]["template"]["metadata"]["labels"], "job-name": name},
            "annotations": annotations,
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }
    k[f"get /api/v1/namespaces/{NS}/pods/{pod}/log"] << _progress_log(rate, batch, steps)


def _telemetry(stamp: str, utilization: float, memory_bytes: int, gpus: str | None = "GPU-1") -> dict[str, str]:
    annotations = {
        "gpuadvisor.io/gpu-utilization": str(utilization),
        "gpuadvisor.io/gpu-memory-used-bytes": str(memory_bytes),
        "gpuadvisor.io/updated-at": stamp,
    }
    if gpus is not None:
        annotations["gpuadvisor.io/gpus"] = gpus
    return annotations


def _kept_rows(engine: Engine) -> tuple[int, int]:
    with db.session_factory(engine)() as s:
        return (
            s.execute(select(func.count()).select_from(TrialTelemetry)).scalar_one(),
            s.execute(select(func.count()).select_from(TrialGpu)).scalar_one(),
        )


def _complete(k: kmock.KubernetesEmulator, job: dict[str, Any]) -> None:
    k.objects[JOBS, NS, job["metadata"]["name"]].patch(
        {"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}
    )


async def test_telemetry_seen_before_a_controller_restart_is_in_the_summary(
    kmock: kmock.KubernetesEmulator, engine: Engine
) -> None:
    _seed_nodes(kmock)
    doc = _run_doc(matrix={"gpuModels": ["H100"], "gpuCounts": [1], "batchSizes": [32]}, colocateWith=None)
    before = _controller(kmock, engine)
    await _reconcile(before, doc)
    (job,) = _jobs(kmock).values()
    for stamp, utilization in (("2025-11-21T10:00:05Z", 0.2), ("2025-11-21T10:00:15Z", 0.3)):
        annotations = _telemetry(stamp, utilization, 9 << 30)
        _put_pod(kmock, job, phase="Running", node="plain-1", rate=400.0, batch=32, annotations=annotations)
        status = await _reconcile(before, doc)
        await _reconcile(before, doc)  # the same annotation seen again is not a new sample
    assert status["trials"][0]["phase"] == "Running"
    assert _kept_rows(engine) == (2, 1)

    after = _controller(kmock, engine)  # the profiler pod restarted: a fresh controller on the same store
    _complete(kmock, job)
    annotations = _telemetry("2025-11-21T10:00:25Z", 0.9, 6 << 30)
    _put_pod(kmock, job, phase="Succeeded", node="plain-1", rate=400.0, batch=32, annotations=annotations)
    status = await _reconcile(after, doc)

    assert status["phase"] == "Succeeded", status["message"]
    with db.session_factory(engine)() as s:
        (profile,) = repo.list_profiles(session=s)
    assert profile.extra["telemetry_samples"] == 3
    assert profile.sm_util_mean_ratio == pytest.approx((0.2 + 0.3 + 0.9) / 3)  # 0.9 from the new controller alone
    assert profile.peak_memory_bytes == 9 << 30
    assert _kept_rows(engine) == (0, 0)


async def test_a_pair_is_verified_with_gpus_reported_before_a_controller_restart(
    kmock: kmock.KubernetesEmulator, engine: Engine
) -> None:
    _seed_nodes(kmock)
    doc = _run_doc(matrix={"gpuModels": ["H100"], "gpuCounts": [1], "batchSizes": [32]})
    before = _controller(kmock, engine)
    await _reconcile(before, doc)
    for name, job in _jobs(kmock).items():
        _finish_job(kmock, job, node="plain-1", gpu="GPU-1", rate=300.0, batch=20 if name.endswith("t001") else 32)
    await _reconcile(before, doc)
    pair = _jobs(kmock)
    batches = {"resnet-sweep-t002-a": 32, "resnet-sweep-t002-b": 20}
    for name, job in pair.items():
        annotations = _telemetry("2025-11-21T10:00:05Z", 0.5, 3 << 30, gpus="GPU-s")
        _put_pod(kmock, job, phase="Running", node="shared-1", rate=100.0, batch=batches[name], annotations=annotations)
    assert (await _reconcile(before, doc))["phase"] == "Running"
    assert _kept_rows(engine) == (2, 2)

    after = _controller(kmock, engine)
    for name, job in pair.items():  # the collector no longer lists GPUs for the finished pods
        _complete(kmock, job)
        annotations = _telemetry("2025-11-21T10:00:15Z", 0.4, 3 << 30, gpus=None)
        _put_pod(
            kmock, job, phase="Succeeded", node="shared-1", rate=100.0, batch=batches[name], annotations=annotations
        )
    status = await _reconcile(after, doc)

    assert status["phase"] == "Succeeded", status["message"]
    (pair_status,) = [t for t in status["trials"] if t["kind"] == "pair"]
    assert pair_status["notes"]["shared_gpus"] == ["GPU-s"]
    assert _kept_rows(engine) == (0, 0)


async def test_a_failed_save_keeps_the_jobs_for_the_next_reconcile(
    kmock: kmock.KubernetesEmulator, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished trial's Jobs are deleted only once its outcome is committed: a store that fails at that moment
    costs nothing but a retry, not the trial's pods and logs (nor a second run of it)."""
    _seed_nodes(kmock)
    doc = _run_doc(matrix={"gpuModels": ["H100"], "gpuCounts": [1], "batchSizes": [32]}, colocateWith=None)
    controller = _controller(kmock, engine)
    await _reconcile(controller, doc)
    (job,) = _jobs(kmock).values()
    _complete(kmock, job)
    annotations = _telemetry("2025-11-21T10:00:05Z", 0.6, 5 << 30)
    _put_pod(kmock, job, phase="Succeeded", node="plain-1", rate=400.0, batch=32, annotations=annotations)

    def store_down(**_: Any) -> dict[str, Any]:
        raise OperationalError("INSERT INTO profiles", {}, Exception("connection refused"))

    with monkeypatch.context() as m:
        m.setattr("profiler.controller.save_results", store_down)
        with pytest.raises(OperationalError):
            await _reconcile(controller, doc)
    assert list(_jobs(kmock)) == [job["metadata"]["name"]]  # still there

    status = await _reconcile(controller, doc)
    assert status["phase"] == "Succeeded", status["message"]
    assert _jobs(kmock) == {}
    with db.session_factory(engine)() as s:
        (profile,) = repo.list_profiles(session=s)
    assert profile.sm_util_mean_ratio == pytest.approx(0.6)
    assert _kept_rows(engine) == (0, 0)


async def test_a_deleted_trialrun_leaves_no_job_and_no_kept_telemetry(
    kmock: kmock.KubernetesEmulator, engine: Engine
) -> None:
    _seed_nodes(kmock)
    doc = _run_doc(matrix={"gpuModels": ["H100"], "gpuCounts": [1], "batchSizes": [32]}, colocateWith=None)
    controller = _controller(kmock, engine)
    await _reconcile(controller, doc)
    (job,) = _jobs(kmock).values()
    annotations = _telemetry("2025-11-21T10:00:05Z", 0.6, 5 << 30)
    _put_pod(kmock, job, phase="Running", node="plain-1", rate=400.0, batch=32, annotations=annotations)
    await _reconcile(controller, doc)
    assert _kept_rows(engine) == (1, 1)

    await asyncio.to_thread(
        controller.forget_run, NS, "other-run", "uid-2"
    )  # another TrialRun's deletion leaves this one's rows and Job
    assert _kept_rows(engine) == (1, 1)
    await asyncio.to_thread(
        controller.forget_run, NS, doc["metadata"]["name"], "uid-0"
    )  # a former run of this name: its Jobs only
    assert list(_jobs(kmock)) == [job["metadata"]["name"]]
    await asyncio.to_thread(controller.forget_run, NS, doc["metadata"]["name"], doc["metadata"]["uid"])
    assert _kept_rows(engine) == (0, 0)
    assert _jobs(kmock) == {}  # no garbage collector here: the controller deleted the Job itself


async def test_a_trial_is_stopped_once_its_running_pods_logged_enough_steady_time(
    kmock: kmock.KubernetesEmulator, engine: Engine
) -> None:
    _seed_nodes(kmock)

    def controller(steady_seconds: float) -> Controller:
        cluster = KubeCluster(make_api_client(str(kmock.url).rstrip("/")))
        sessions = db.session_factory(engine)
        return Controller(cluster=cluster, sessions=sessions, max_duration_seconds=600, steady_seconds=steady_seconds)

    doc = _run_doc(matrix={"gpuModels": ["H100"], "gpuCounts": [1], "batchSizes": [32]}, colocateWith=None)
    await _reconcile(controller(30.0), doc)
    (job,) = _jobs(kmock).values()
    # 40 steps at 400 samples/s: 3.2 s of progress, about 2.5 s of it past the warm-up; the Job has not finished
    _put_pod(kmock, job, phase="Running", node="plain-1", rate=400.0, batch=32, annotations={}, steps=40)

    status = await _reconcile(controller(30.0), doc)
    assert status["trials"][0]["phase"] == "Running"  # 30 s asked for: keeps running

    status = await _reconcile(controller(1.5), doc)
    assert status["phase"] == "Succeeded", status["message"]
    assert "stopped once it had measured enough steady time" in status["trials"][0]["message"]
    assert status["trials"][0]["throughputs"][0] == pytest.approx(400.0)
    assert _jobs(kmock) == {}  # the Job is deleted, which stops its pod
