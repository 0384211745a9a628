"""`gpuadvisor profiler run` as deployed: kopf, the kubernetes client and the store, against a kmock API server.

The command runs as a subprocess with a kubeconfig pointing at the stand-in; the tests wait until the operator has
created the TrialRun's Job and patched its status, and until the recorder has written the finished GPU pod; they read
kopf's liveness endpoint while the store answers and after it has gone; and they delete a TrialRun through the API
and wait for the telemetry kept for it to go.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import kmock
import pytest
from sqlalchemy.exc import OperationalError

from profiler.store import db, repo
from tests.profiler.specs import trialrun
from tests.profiler.test_recorder import _pod
from tests.support.net import free_port
from tests.support.postgres import postgres_server

pytestmark = pytest.mark.asyncio

TRIALRUNS = kmock.resource("gpuadvisor.io", "v1alpha1", "trialruns")
WAIT_SECONDS = 90.0


def _declare(k: kmock.KubernetesEmulator) -> None:
    """The API discovery kopf needs: our CRD's resource, the ones the controller uses, namespaces and CRDs."""
    resources: dict[str, tuple[str, bool]] = {
        "gpuadvisor.io/v1alpha1/trialruns": ("TrialRun", True),
        "batch/v1/jobs": ("Job", True),
        "v1/pods": ("Pod", True),
        "v1/nodes": ("Node", False),
        "v1/namespaces": ("Namespace", False),
        "apiextensions.k8s.io/v1/customresourcedefinitions": ("CustomResourceDefinition", False),
    }
    for key, (kind, namespaced) in resources.items():
        k.resources[key] = {"kind": kind, "namespaced": namespaced, "verbs": ["get", "list", "watch", "patch"]}


def _declare_with_trialrun(k: kmock.KubernetesEmulator) -> None:
    """`_declare`, and the TrialRun ml/resnet-sweep of one 1-GPU solo trial."""
    _declare(k)
    doc: dict[str, Any] = trialrun(matrix={"gpuCounts": [1]}, colocateWith=None)
    doc["metadata"].update(uid="uid-run", resourceVersion="1")
    k.objects[TRIALRUNS, "ml", "resnet-sweep"] = doc


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f'clusters: [{{name: kmock, cluster: {{server: "{server}"}}}}]\n'
        "users: [{name: test, user: {token: test}}]\n"
        "contexts: [{name: test, context: {cluster: kmock, user: test}}]\n"
        "current-context: test\n"
    )
    return path


class Operator:
    """A running `gpuadvisor profiler run`; `output` is its whole log once it has stopped."""

    def __init__(self, proc: asyncio.subprocess.Process, liveness_url: str) -> None:
        self.proc = proc
        self.liveness_url = liveness_url
        self.output = ""

    async def liveness(self) -> httpx.Response | None:
        """kopf's liveness answer, or None while nothing listens yet."""
        try:
            async with httpx.AsyncClient(timeout=10.0) as http:
                return await http.get(self.liveness_url)
        except httpx.TransportError:
            return None


@asynccontextmanager
async def profiler_run(k: kmock.KubernetesEmulator, tmp_path: Path, db_url: str) -> AsyncIterator[Operator]:
    """Run the command against `k` and `db_url`, serving liveness on a free loopback port; SIGINT at the end."""
    liveness_url = f"http://127.0.0.1:{free_port()}/healthz"
    env = {
        **os.environ,
        "KUBECONFIG": str(_kubeconfig(tmp_path / "kubeconfig", str(k.url).rstrip("/"))),
        "GPUADVISOR_DB_URL": db_url,
        "GPUADVISOR_LIVENESS_ENDPOINT": liveness_url,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "advisor.cli",
        "profiler",
        "run",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    operator = Operator(proc, liveness_url)
    try:
        yield operator
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        output, _ = await asyncio.wait_for(proc.communicate(), 30)
        operator.output = output.decode(errors="replace")


async def _liveness_until(
    operator: Operator, status_code: int, *, store_reachable: bool = True
) -> httpx.Response | None:
    """Poll the endpoint until it answers `status_code` with the store's reachability as given (or WAIT_SECONDS
    pass); the last answer."""
    response = None
    for _ in range(int(WAIT_SECONDS / 0.2)):
        response = await operator.liveness()
        if (
            response is not None
            and response.status_code == status_code
            and response.json().get("store", {}).get("reachable") is store_reachable
        ):
            break
        await asyncio.sleep(0.2)
    return response


async def test_profiler_run_reconciles_trialruns_and_records_finished_pods(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    _declare_with_trialrun(kmock)
    kmock.objects[kmock.resource("", "v1", "pods"), "ml", "train-9"] = _pod("train-9", phase="Succeeded", gpus=1)
    url = f"sqlite:///{tmp_path}/store.db"
    engine = None
    try:
        async with profiler_run(kmock, tmp_path, url) as operator:
            status: dict[str, Any] = {}
            executions: list[Any] = []
            for _ in range(int(WAIT_SECONDS / 0.2)):
                await asyncio.sleep(0.2)
                status = kmock.objects[TRIALRUNS, "ml", "resnet-sweep"].get("status", {}) or {}
                if engine is None and Path(f"{tmp_path}/store.db").exists():
                    engine = db.make_engine(url)
                if engine is not None:
                    # The file appears before the operator's migrations have created the tables: not ready yet.
                    try:
                        with db.session_factory(engine)() as s:
                            executions = await asyncio.to_thread(repo.list_executions, session=s)
                    except OperationalError:
                        executions = []
                if status.get("phase") and executions:
                    break
            liveness = await _liveness_until(operator, 200)
    finally:
        if engine is not None:
            engine.dispose()
    log = operator.output[-4000:]
    assert status.get("phase") == "Running", log
    assert [t["phase"] for t in status["trials"]] == ["Running"]
    job = kmock.objects[kmock.resource("batch", "v1", "jobs"), "ml", "resnet-sweep-t000"]
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-run"
    assert [e.job_id for e in executions] == ["ml/Job/train-9-job"], log
    assert liveness is not None, log
    assert liveness.status_code == 200, log
    assert liveness.json()["store"]["reachable"] is True


@pytest.mark.postgres
async def test_profiler_liveness_reports_a_lost_store_without_failing(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    _declare(kmock)
    with contextlib.ExitStack() as store:
        url = store.enter_context(postgres_server())
        async with profiler_run(kmock, tmp_path, url) as operator:
            alive = await _liveness_until(operator, 200)
            store.close()  # stops the PostgreSQL server and deletes its data; the operator keeps running
            dead = await _liveness_until(operator, 200, store_reachable=False)
    log = operator.output[-4000:]
    assert alive is not None, log
    assert alive.status_code == 200, log
    assert alive.json()["store"]["reachable"] is True
    assert dead is not None, log  # still alive: a restart would not bring the store back
    assert dead.json()["store"] == {"reachable": False, "error": "OperationalError"}, log
    assert "store unreachable: OperationalError" in operator.output, log


def _kept_samples(engine: Any) -> int:
    from sqlalchemy import func, select

    from profiler.store.models import TrialTelemetry

    try:
        with db.session_factory(engine)() as s:
            return int(s.execute(select(func.count()).select_from(TrialTelemetry)).scalar_one())
    except OperationalError:  # the operator has not migrated the store yet
        return -1


async def _until(predicate: Any) -> bool:
    for _ in range(int(WAIT_SECONDS / 0.2)):
        if await asyncio.to_thread(predicate):
            return True
        await asyncio.sleep(0.2)
    return False


async def test_deleting_a_trialrun_drops_the_telemetry_kept_for_it(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    _declare_with_trialrun(kmock)
    jobs = kmock.resource("batch", "v1", "jobs")
    url = f"sqlite:///{tmp_path}/store.db"
    engine = db.make_engine(url)
    try:
        async with profiler_run(kmock, tmp_path, url) as operator:
            created = await _until(lambda: (jobs, "ml", "resnet-sweep-t000") in kmock.objects)
            assert created, operator.output
            job = dict(kmock.objects[jobs, "ml", "resnet-sweep-t000"].raw)
            kmock.objects[kmock.resource("", "v1", "pods"), "ml", "resnet-sweep-t000-x7k2p"] = {
                "metadata": {
                    "name": "resnet-sweep-t000-x7k2p",
                    "namespace": "ml",
                    "uid": "uid-trial-pod",
                    "labels": {**job["spec"]["template"]["metadata"]["labels"], "job-name": "resnet-sweep-t000"},
                    "annotations": {
                        "gpuadvisor.io/gpu-utilization": "0.6",
                        "gpuadvisor.io/updated-at": "2025-11-21T10:00:05Z",
                    },
                },
                "spec": {"nodeName": "gpu-1"},
                "status": {"phase": "Pending"},
            }
            kept = await _until(lambda: _kept_samples(engine) == 1)  # seen on the operator's next timer pass
            async with httpx.AsyncClient() as http:
                gone = await http.delete(
                    f"{str(kmock.url).rstrip('/')}/apis/gpuadvisor.io/v1alpha1/namespaces/ml/trialruns/resnet-sweep"
                )
            dropped = await _until(lambda: _kept_samples(engine) == 0)
    finally:
        engine.dispose()
    log = operator.output[-4000:]
    assert kept, log
    assert gone.status_code == 200, gone.text
    assert dropped, log
