"""A TrialRun deleted while a reconcile of it is under way (kopf runs its delete handler while a timer's reconcile may
still be creating Jobs): the delete handler waits for that reconcile and deletes the Jobs it created, and a reconcile
that still holds the body from before the deletion starts nothing. The cluster here is a fake injected through the
constructor, because the interleaving must be forced: the fake holds a Job's creation until the test lets it go."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine

from profiler.controller import Controller
from profiler.store import db
from tests.profiler.specs import trialrun

Obj = dict[str, Any]


class _HeldCreations:
    """A cluster whose Job creations wait for `release` (with `creating` set while one waits)."""

    def __init__(self) -> None:
        self.jobs: dict[str, Obj] = {}
        self.creating = threading.Event()
        self.release = threading.Event()

    def list_nodes(self) -> list[Obj]:
        return []

    def list_jobs(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
        return [j for j in self.jobs.values() if all(j["metadata"]["labels"].get(k) == v for k, v in labels.items())]

    def create_job(self, namespace: str, manifest: Obj) -> None:
        self.creating.set()
        assert self.release.wait(30), "the test never released the creation"
        self.jobs[manifest["metadata"]["name"]] = manifest

    def delete_job(self, namespace: str, name: str) -> None:
        self.jobs.pop(name, None)

    def list_pods(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
        return []

    def pod_log(self, namespace: str, name: str) -> str:
        return ""


def test_a_deletion_during_a_reconcile_deletes_the_jobs_that_reconcile_creates(tmp_path: Any) -> None:
    engine: Engine = db.make_engine(f"sqlite:///{tmp_path}/store.db")
    db.upgrade(engine)
    cluster = _HeldCreations()
    controller = Controller(cluster=cluster, sessions=db.session_factory(engine), max_duration_seconds=600)
    doc = trialrun(matrix={"gpuCounts": [1]}, colocateWith=None)
    doc["metadata"]["uid"] = "uid-1"
    meta = doc["metadata"]
    reconciling = threading.Thread(target=controller.reconcile, args=(doc,))
    reconciling.start()
    assert cluster.creating.wait(30)
    forgetting = threading.Thread(target=controller.forget_run, args=(meta["namespace"], meta["name"], meta["uid"]))
    forgetting.start()
    # Time for a delete handler that does not wait to list the Jobs while the creation is held (and miss it).
    forgetting.join(timeout=1.0)
    cluster.release.set()
    reconciling.join(30)
    forgetting.join(30)
    assert not reconciling.is_alive()
    assert not forgetting.is_alive()
    assert cluster.jobs == {}
    # the body from before the deletion, as a timer tick that was already waiting would pass it
    status = controller.reconcile(doc)
    assert cluster.jobs == {}
    assert status == {}
