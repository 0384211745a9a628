"""`gpuadvisor profiler run` (kopf) against the real API server, as deployed: the TrialRun CRD of deploy/crds/, the
profiler's ServiceAccount with its ClusterRole (deploy/profiler/rbac.yaml) and the trial Roles of
deploy/trial-namespace/ in the one namespace trials may run in, and the API server enforcing owner references
(OwnerReferencesPermissionEnforcement: a Job that blocks its TrialRun's deletion needs `trialruns/finalizers`).

A TrialRun there gets its Job and its status, and its deletion deletes its Jobs; one in a namespace without the trial
Roles is refused by RBAC (403), which the profiler reports once as a permanent failure; a Job the API server refuses
with a 503 (an admission webhook's denial, passed on with its code and Retry-After) is created when kopf retries.
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
TRIALRUNS = "/apis/gpuadvisor.io/v1alpha1/namespaces/{ns}/trialruns"
Obj = dict[str, Any]


@dataclass(frozen=True)
class Profiler:
    process: Process
    api: KubeApi


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
        yield Profiler(process, api)
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
    lifts it. Meanwhile the TrialRun carries kopf's record of the temporarily failed handler (an annotation: its
    retries and the server's message; the status has no phase, so nothing reads as failed) and no Job exists;
    afterwards a retry creates the Job, the run goes on and the record is gone."""
    api = profiler.api
    name = "retried-sweep"
    path = f"{TRIALRUNS.format(ns=TRIALS)}/{name}"
    refusals = Refusals(code=503, message="the cluster is overloaded, try again", retry_after_seconds=1)
    with refusing_webhook(
        api, tmp_path, "refuse-trial-jobs", namespace=TRIALS, labels={TRIALRUN_LABEL: name}, refusals=refusals
    ):
        created = api.create(TRIALRUNS.format(ns=TRIALS), _trialrun(name, TRIALS))
        try:
            failing = api.wait_for(path, lambda r: bool(_retrying(r)) and len(refusals.refused) >= 2, 90)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{_seen(refusals)}\nprofiler log:\n{profiler.process.tail(40)}") from e
        (record,) = _retrying(failing)
        assert f"create job {name}-t000: HTTP 503 admission webhook" in record["message"]
        assert "denied the request: the cluster is overloaded, try again" in record["message"]
        assert "status" not in failing  # no phase yet, in particular not Failed
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
    api.delete(path)


def test_a_job_refused_with_403_fails_the_run_without_retrying(profiler: Profiler, tmp_path: Path) -> None:
    """Side by side with the 503: the same refusal with 403 is permanent; the run fails with the server's message
    and kopf keeps no record of a handler waiting to retry."""
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
    assert f"create job {name}-t000: HTTP 403 admission webhook" in run["status"]["message"]
    assert "denied the request: trial Jobs are not allowed here" in run["status"]["message"]
    assert not _retrying(run)
    assert refusals.refused
    assert not refusals.allowed
    api.delete(path)
