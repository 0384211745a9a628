"""`gpuadvisor profiler run` (kopf) against the real API server, as deployed: the TrialRun CRD of deploy/crds/, the
profiler's ServiceAccount with its ClusterRole (deploy/profiler/rbac.yaml) and the trial Roles of
deploy/trial-namespace/ in the one namespace trials may run in, and the API server enforcing owner references
(OwnerReferencesPermissionEnforcement: a Job that blocks its TrialRun's deletion needs `trialruns/finalizers`).

A TrialRun there gets its Job and its status, and its deletion deletes its Jobs, also when it was deleted while the
profiler was stopped; one in a namespace without the trial Roles is refused by RBAC (403), which the profiler reports
once as a permanent failure naming the trial Roles, and is deleted without a failed handler; a Job the API server
refuses with a 503 (an admission webhook's denial, passed on with its code and Retry-After) shows as a retry in the
status and is created when kopf retries; the same webhook's 403 fails the run naming the webhook, not RBAC. The
profiler's log shows no permission error and no inconsistent merge patch.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from collector.keys import TRIALRUN_LABEL
from profiler.kube import patchable
from tests.profiler.specs import trialrun
from tests.support.kube import (
    ControlPlane,
    KubeApi,
    KubeApiError,
    Process,
    kubectl,
    namespace,
    which_kubectl,
    write_kubeconfig,
)
from tests.support.net import free_port, wait_until
from tests.support.webhook import Refusals, refusing_webhook

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
TRIALS = "trials"
ELSEWHERE = "not-for-trials"
KOPF_PROGRESS = "kopf.zalando.org/"
KOPF_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
TRIALRUNS = "/apis/gpuadvisor.io/v1alpha1/namespaces/{ns}/trialruns"
Obj = dict[str, Any]


@dataclass(frozen=True)
class Profiler:
    process: Process
    api: KubeApi
    plane: ControlPlane


def _render(plane: ControlPlane, directory: Path, overlay: str) -> list[Obj]:
    base = Path(os.path.relpath(DEPLOY, directory))
    (directory / "kustomization.yaml").write_text(overlay.format(base=base))
    return [d for d in yaml.safe_load_all(kubectl(plane, "kustomize", str(directory))) if d]


@pytest.fixture(scope="module")
def profiler(plane: ControlPlane, api: KubeApi, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Profiler]:
    which_kubectl()
    workdir = tmp_path_factory.mktemp("profiler")
    base = _render(plane, workdir, "resources: [{base}]\n")
    wanted = {
        ("Namespace", "gpuadvisor"),
        ("CustomResourceDefinition", "trialruns.gpuadvisor.io"),
        ("ServiceAccount", "gpuadvisor-profiler"),
        ("ClusterRole", "gpuadvisor-profiler"),
        ("ClusterRoleBinding", "gpuadvisor-profiler"),
    }
    objects = [o for o in base if (o["kind"], o["metadata"]["name"]) in wanted]
    assert len(objects) == len(wanted)
    (workdir / "trials").mkdir()
    objects += _render(plane, workdir / "trials", f"namespace: {TRIALS}\nresources: [{{base}}/trial-namespace]\n")
    for ns in (TRIALS, ELSEWHERE):
        namespace(api, ns)
    kubectl(
        plane,
        "apply",
        "--server-side",
        "--field-manager=gpuadvisor-tests",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(objects),
    )
    kubectl(plane, "wait", "--for=condition=Established", "--timeout=60s", "crd/trialruns.gpuadvisor.io")
    token = api.create(
        "/api/v1/namespaces/gpuadvisor/serviceaccounts/gpuadvisor-profiler/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )["status"]["token"]
    kubeconfig = write_kubeconfig(workdir / "profiler.kubeconfig", plane.url, token, plane.ca_file)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUADVISOR_") and k != "KUBECONFIG"}
    env = {
        **clean,
        "KUBECONFIG": str(kubeconfig),
        "GPUADVISOR_DB_URL": f"sqlite:///{workdir}/store.db",
        "GPUADVISOR_LIVENESS_ENDPOINT": f"http://127.0.0.1:{free_port()}/healthz",
    }
    process = Process(
        "profiler", [sys.executable, "-m", "advisor.cli", "profiler", "run"], workdir / "profiler.log", env
    ).start()
    try:
        yield Profiler(process, api, plane)
    finally:
        process.stop()


def _trialrun(name: str, ns: str) -> Obj:
    doc = trialrun(matrix={"gpuCounts": [1]}, colocateWith=None)
    doc["metadata"] = {"name": name, "namespace": ns}
    return doc


def test_a_trialrun_gets_its_job_and_its_status(profiler: Profiler) -> None:
    api = profiler.api
    created = api.create(TRIALRUNS.format(ns=TRIALS), _trialrun("resnet-sweep", TRIALS))
    try:
        job = api.wait_for(f"/apis/batch/v1/namespaces/{TRIALS}/jobs/resnet-sweep-t000", lambda j: True, 90)
    except AssertionError as e:
        raise AssertionError(f"{e}\nprofiler log:\n{profiler.process.tail(40)}") from e
    (owner,) = job["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("TrialRun", "resnet-sweep", created["metadata"]["uid"])
    assert owner.get("blockOwnerDeletion") is True  # admitted: the Role grants trialruns/finalizers
    run = api.wait_for(
        f"{TRIALRUNS.format(ns=TRIALS)}/resnet-sweep", lambda r: (r.get("status") or {}).get("phase") == "Running", 60
    )
    assert [t["phase"] for t in run["status"]["trials"]] == ["Running"]


def test_a_trialrun_where_rbac_forbids_trials_fails_once_with_how_to_allow_it(profiler: Profiler) -> None:
    api = profiler.api
    api.create(TRIALRUNS.format(ns=ELSEWHERE), _trialrun("resnet-sweep", ELSEWHERE))
    path = f"{TRIALRUNS.format(ns=ELSEWHERE)}/resnet-sweep"
    try:
        run = api.wait_for(path, lambda r: (r.get("status") or {}).get("phase") == "Failed", 90)
    except AssertionError as e:
        raise AssertionError(f"{e}\nprofiler log:\n{profiler.process.tail(40)}") from e
    assert f"trials may not run in namespace '{ELSEWHERE}'" in run["status"]["message"]
    assert "deploy/trial-namespace" in run["status"]["message"]
    assert api.get(f"/apis/batch/v1/namespaces/{ELSEWHERE}/jobs")["items"] == []


def test_deleting_a_trialrun_deletes_its_jobs_without_a_garbage_collector(profiler: Profiler) -> None:
    """No kube-controller-manager runs here, so nothing but the profiler deletes the Jobs; in a cluster the
    garbage collector would follow their owner references too."""
    api = profiler.api
    runs = TRIALRUNS.format(ns=TRIALS)
    api.create(runs, _trialrun("short-lived", TRIALS))
    jobs = f"/apis/batch/v1/namespaces/{TRIALS}/jobs"
    try:
        job = api.wait_for(f"{jobs}/short-lived-t000", lambda j: True, 90)
    except AssertionError as e:
        raise AssertionError(f"{e}\nprofiler log:\n{profiler.process.tail(40)}") from e
    assert job["metadata"]["ownerReferences"][0]["name"] == "short-lived"
    api.delete(f"{runs}/short-lived")

    def owned() -> list[str]:
        listed = api.get(jobs, labelSelector=f"{TRIALRUN_LABEL}=short-lived")["items"]
        return [j["metadata"]["name"] for j in listed]

    if not wait_until(lambda: not owned(), timeout_s=60, interval_s=0.2):
        raise AssertionError(f"Jobs left: {owned()}\nprofiler log:\n{profiler.process.tail(40)}")
    # another TrialRun's Job stays
    assert api.get(f"{jobs}/resnet-sweep-t000")["metadata"]["name"] == "resnet-sweep-t000"


def _retrying(run: Obj) -> list[Obj]:
    """kopf's progress records on the TrialRun (annotations under its prefix) of handlers that failed and wait to be
    retried."""
    annotations = run["metadata"].get("annotations") or {}
    records = [json.loads(v) for k, v in annotations.items() if k.startswith(KOPF_PROGRESS)]
    return [
        r for r in records if isinstance(r, dict) and r.get("retries") and not (r.get("success") or r.get("failure"))
    ]


def _seen(refusals: Refusals) -> str:
    return f"the webhook refused {len(refusals.refused)} and allowed {refusals.allowed}"


def test_a_job_refused_with_503_is_created_when_kopf_retries(profiler: Profiler, tmp_path: Path) -> None:
    """The API server answers the Job's creation 503 (a webhook's denial, with Retry-After: 1) until the webhook
    lifts it. Meanwhile no Job exists and the TrialRun's status says why, as `kubectl get trialrun` shows it: Pending
    (not Failed), the server's message, the attempts and the next try (kopf's own record, an annotation, is there
    too); afterwards a retry creates the Job, the run goes on and the retry is gone from the status."""
    api = profiler.api
    name = "retried-sweep"
    path = f"{TRIALRUNS.format(ns=TRIALS)}/{name}"
    refusals = Refusals(code=503, message="the cluster is overloaded, try again", retry_after_seconds=1)
    with refusing_webhook(
        api, tmp_path, "refuse-trial-jobs", namespace=TRIALS, labels={TRIALRUN_LABEL: name}, refusals=refusals
    ):
        created = api.create(TRIALRUNS.format(ns=TRIALS), _trialrun(name, TRIALS))
        try:
            failing = api.wait_for(
                path,
                lambda r: bool(_retrying(r)) and ((r.get("status") or {}).get("retry") or {}).get("attempts", 0) >= 2,
                90,
            )
        except AssertionError as e:
            raise AssertionError(f"{e}\n{_seen(refusals)}\nprofiler log:\n{profiler.process.tail(40)}") from e
        (record,) = _retrying(failing)
        assert f"create job {name}-t000: HTTP 503 admission webhook" in record["message"]
        status = failing["status"]
        assert status["phase"] == "Pending"  # in particular not Failed
        assert status["retry"]["message"] == record["message"]
        assert status["retry"]["nextTryTime"].endswith("Z")
        assert status["message"].startswith(f"waiting to retry (attempt {status['retry']['attempts']} failed")
        assert "denied the request: the cluster is overloaded, try again" in status["message"]
        shown = kubectl(profiler.plane, "get", "trialrun", "-n", TRIALS, name)
        assert "Pending" in shown, shown
        assert "the cluster is overloaded, try again" in shown, shown
        with pytest.raises(KubeApiError) as missing:
            api.get(f"/apis/batch/v1/namespaces/{TRIALS}/jobs/{name}-t000")
        assert missing.value.status_code == 404
        refusals.lift()
        try:
            job = api.wait_for(f"/apis/batch/v1/namespaces/{TRIALS}/jobs/{name}-t000", lambda j: True, 120)
            run = api.wait_for(
                path, lambda r: (r.get("status") or {}).get("phase") == "Running" and not _retrying(r), 120
            )
        except AssertionError as e:
            raise AssertionError(f"{e}\n{_seen(refusals)}\nprofiler log:\n{profiler.process.tail(40)}") from e
    assert set(refusals.refused) == {f"{name}-t000"}
    assert refusals.allowed == [f"{name}-t000"]
    assert job["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    assert [t["phase"] for t in run["status"]["trials"]] == ["Running"]
    assert "retry" not in run["status"]
    assert run["status"]["message"] == "0 of 1 trials finished"
    api.delete(path)


def test_a_job_refused_with_403_fails_the_run_without_retrying(profiler: Profiler, tmp_path: Path) -> None:
    """Side by side with the 503: the same refusal with 403 is permanent; the run fails with the server's message
    and kopf keeps no record of a handler waiting to retry. The message names admission control (the webhook) as the
    cause, not the profiler's RBAC, whose remedy (deploy/trial-namespace) would not help here."""
    api = profiler.api
    name = "refused-sweep"
    path = f"{TRIALRUNS.format(ns=TRIALS)}/{name}"
    refusals = Refusals(code=403, message="trial Jobs are not allowed here")
    with refusing_webhook(
        api, tmp_path, "forbid-trial-jobs", namespace=TRIALS, labels={TRIALRUN_LABEL: name}, refusals=refusals
    ):
        api.create(TRIALRUNS.format(ns=TRIALS), _trialrun(name, TRIALS))
        try:
            run = api.wait_for(path, lambda r: (r.get("status") or {}).get("phase") == "Failed", 90)
        except AssertionError as e:
            raise AssertionError(f"{e}\nprofiler log:\n{profiler.process.tail(40)}") from e
    message = run["status"]["message"]
    assert f"create job {name}-t000: HTTP 403 admission webhook" in message
    assert "denied the request: trial Jobs are not allowed here" in message
    assert message.startswith(f"the cluster's admission control refused a trial Job in namespace '{TRIALS}'")
    assert "admission webhook 'forbid-trial-jobs.tests.gpuadvisor.io' decides" in message
    assert "trials may not run in namespace" not in message
    assert not _retrying(run)
    assert "retry" not in run["status"]
    assert refusals.refused
    assert not refusals.allowed
    api.delete(path)


def _gone(api: KubeApi, path: str) -> bool:
    try:
        api.get(path)
    except KubeApiError as e:
        if e.status_code == 404:
            return True
        raise
    return False


def test_a_status_without_nulls_reads_back_as_it_was_patched(profiler: Profiler) -> None:
    """What the operator's merge patches look like (a trial entry with unmeasured fields): the API server drops the
    null-valued keys inside the list and keeps null list items, so only the patch `patchable` makes reads back as
    sent — kopf compares the two and logs "Merge-patching finished with inconsistencies" otherwise."""
    api = profiler.api
    name = "patched-status"
    path = f"{TRIALRUNS.format(ns=ELSEWHERE)}/{name}"
    api.create(TRIALRUNS.format(ns=ELSEWHERE), _trialrun(name, ELSEWHERE))
    entry = {"trial": "t000", "gpuModel": None, "smUtilMeanRatios": [None, 0.5], "summaries": [{"power_watts": None}]}
    raw = api.merge_patch(f"{path}/status", {"status": {"trials": [entry]}})["status"]["trials"]
    assert raw != [entry]  # the premise: sent as is, it does not read back as sent
    assert raw == [{"trial": "t000", "smUtilMeanRatios": [None, 0.5], "summaries": [{}]}]
    sent = patchable([entry])
    assert api.merge_patch(f"{path}/status", {"status": {"trials": sent}})["status"]["trials"] == sent
    api.delete(path)


def test_a_trialrun_deleted_while_the_profiler_is_stopped_goes_with_its_jobs_once_it_starts(
    profiler: Profiler,
) -> None:
    """kopf's finalizer holds a TrialRun deleted while no profiler runs (Terminating) until one starts; the restarted
    profiler then runs the delete handler, deletes the Jobs and releases it."""
    api = profiler.api
    name = "deleted-while-stopped"
    path = f"{TRIALRUNS.format(ns=TRIALS)}/{name}"
    jobs = f"/apis/batch/v1/namespaces/{TRIALS}/jobs"
    api.create(TRIALRUNS.format(ns=TRIALS), _trialrun(name, TRIALS))
    try:
        api.wait_for(f"{jobs}/{name}-t000", lambda j: True, 90)
    except AssertionError as e:
        raise AssertionError(f"{e}\nprofiler log:\n{profiler.process.tail(40)}") from e
    profiler.process.stop()
    try:
        api.delete(path)
        held = api.get(path)["metadata"]
        assert held.get("deletionTimestamp")
        assert held.get("finalizers") == [KOPF_FINALIZER]
    finally:
        profiler.process.start()
    if not wait_until(lambda: _gone(api, path), timeout_s=90, interval_s=0.2):
        raise AssertionError(f"{name} still there: {api.get(path)['metadata']}\nlog:\n{profiler.process.tail(40)}")
    assert api.get(jobs, labelSelector=f"{TRIALRUN_LABEL}={name}")["items"] == []


def test_a_trialrun_where_rbac_forbids_trials_is_deleted_without_a_failed_handler(profiler: Profiler) -> None:
    """Its delete handler may not list Jobs there (no trial Role, hence no Jobs it could have made): the deletion
    goes on, instead of kopf reporting the handler as failed permanently."""
    api = profiler.api
    name = "deleted-elsewhere"
    path = f"{TRIALRUNS.format(ns=ELSEWHERE)}/{name}"
    api.create(TRIALRUNS.format(ns=ELSEWHERE), _trialrun(name, ELSEWHERE))
    try:
        api.wait_for(path, lambda r: (r.get("status") or {}).get("phase") == "Failed", 90)
    except AssertionError as e:
        raise AssertionError(f"{e}\nprofiler log:\n{profiler.process.tail(40)}") from e
    api.delete(path)
    if not wait_until(lambda: _gone(api, path), timeout_s=60, interval_s=0.2):
        raise AssertionError(f"{name} still there\nprofiler log:\n{profiler.process.tail(40)}")
    assert "failed permanently" not in profiler.process.log.read_text()


def test_the_shipped_rbac_covers_what_the_profiler_does_and_patches_are_consistent(profiler: Profiler) -> None:
    """With deploy/profiler/rbac.yaml (no `get` on TrialRuns, no Events) and the trial Roles, a TrialRun run to
    Running leaves no permission error in the profiler's log (a 403 appears only for the namespace without trial
    Roles, on purpose), no Event is posted (the profiler turns kopf's posting off, so `create events` is not needed),
    and no merge patch read back different from what was sent."""
    api = profiler.api
    name = "rbac-check"
    path = f"{TRIALRUNS.format(ns=TRIALS)}/{name}"
    api.create(TRIALRUNS.format(ns=TRIALS), _trialrun(name, TRIALS))
    try:
        api.wait_for(
            path, lambda r: [t.get("phase") for t in (r.get("status") or {}).get("trials", [])] == ["Running"], 90
        )
    except AssertionError as e:
        raise AssertionError(f"{e}\nprofiler log:\n{profiler.process.tail(40)}") from e
    lines = profiler.process.log.read_text(errors="replace").splitlines()
    refused = [
        line
        for line in lines
        if any(word in line.lower() for word in ("forbidden", "not enough permissions", "failed to post an event"))
    ]
    assert all(f'"{ELSEWHERE}"' in line for line in refused), "\n".join(refused)
    assert not [line for line in lines if "Merge-patching finished with inconsistencies" in line]
    assert api.get(f"/api/v1/namespaces/{TRIALS}/events", fieldSelector="involvedObject.kind=TrialRun")["items"] == []
    api.delete(path)
