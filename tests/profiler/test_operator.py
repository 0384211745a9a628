"""`gpuadvisor profiler run` as deployed: kopf, the kubernetes client and the store, against a kmock API server.

The command runs as a subprocess with a kubeconfig pointing at the stand-in; the test waits until the operator has
created the TrialRun's Job and patched its status, and until the recorder has written the finished GPU pod.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import kmock
import pytest
from sqlalchemy.exc import OperationalError

from profiler.store import db, repo
from tests.profiler.specs import trialrun
from tests.profiler.test_recorder import _pod

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


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f'clusters: [{{name: kmock, cluster: {{server: "{server}"}}}}]\n'
        "users: [{name: test, user: {token: test}}]\n"
        "contexts: [{name: test, context: {cluster: kmock, user: test}}]\n"
        "current-context: test\n"
    )
    return path


async def test_profiler_run_reconciles_trialruns_and_records_finished_pods(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    _declare(kmock)
    doc: dict[str, Any] = trialrun(matrix={"gpuCounts": [1]}, colocateWith=None)
    doc["metadata"].update(uid="uid-run", resourceVersion="1")
    kmock.objects[TRIALRUNS, "ml", "resnet-sweep"] = doc
    kmock.objects[kmock.resource("", "v1", "pods"), "ml", "train-9"] = _pod("train-9", phase="Succeeded", gpus=1)
    url = f"sqlite:///{tmp_path}/store.db"
    env = {
        **os.environ,
        "KUBECONFIG": str(_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))),
        "GPUADVISOR_DB_URL": url,
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
    engine = None
    try:
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
    finally:
        proc.send_signal(signal.SIGINT)
        output, _ = await asyncio.wait_for(proc.communicate(), 30)
        if engine is not None:
            engine.dispose()
    log = output.decode(errors="replace")[-4000:]
    assert status.get("phase") == "Running", log
    assert [t["phase"] for t in status["trials"]] == ["Running"]
    job = kmock.objects[kmock.resource("batch", "v1", "jobs"), "ml", "resnet-sweep-t000"]
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-run"
    assert [e.job_id for e in executions] == ["ml/Job/train-9-job"], log
