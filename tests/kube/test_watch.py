"""The advisor's watch of pods and nodes (advisor/cluster/kube.py) against the real API server, through what a
cluster does to a watch: the API server restarting, and etcd's history compacted (a watch from before it is answered
410 Gone) while the advisor was not reading. What the advisor knows must end up equal to what the cluster holds.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.advisor.factories import snapshot
from tests.kube.conftest import Advisor, start_advisor
from tests.support.kube import ControlPlane, KubeApi, create_node, gpu_node, namespace
from tests.support.net import wait_until

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

NAMESPACE = "watched"
NODE = "watch-1"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def watching(plane: ControlPlane, api: KubeApi, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Advisor]:
    """An advisor of its own (this module stops and restarts what the others' advisor depends on)."""
    namespace(api, NAMESPACE)
    create_node(api, gpu_node(NODE))
    started = start_advisor(plane, tmp_path_factory.mktemp("advisor-watch"))
    try:
        yield started
    finally:
        started.process.stop()


def bound_pod(api: KubeApi, name: str, gpus: int) -> None:
    """A GPU pod on NODE that the kubelet reports Running."""
    resources = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}
    api.create(
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeName": NODE,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": "main", "image": "x", "resources": {"requests": resources, "limits": resources}}
                ],
            },
        },
    )
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    api.merge_patch(
        f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/status", {"status": {"phase": "Running", "startTime": now}}
    )


def delete_pod(api: KubeApi, name: str) -> None:
    """Deleted at once, as the kubelet confirms a pod's end (none runs here): grace period 0."""
    api.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", params={"gracePeriodSeconds": "0"})


def allocated_milli(advisor: Advisor) -> int | None:
    """The GPU milli the advisor believes allocated on NODE (None while it does not know the node)."""
    with advisor.client() as client:
        client.post("/v1/telemetry", json=snapshot(NODE)).raise_for_status()
        listed = client.get("/v1/nodes", params={"detail": "true"}).json()
    for node in listed["nodes"]:
        if node["name"] == NODE:
            return sum(int(g["allocated_milli"]) for g in node["gpus"])
    return None


def eventually(advisor: Advisor, milli: int, timeout_s: float = 60.0) -> None:
    last: list[int | None] = [None]

    def matches() -> bool:
        last[0] = allocated_milli(advisor)
        return last[0] == milli

    assert wait_until(matches, timeout_s=timeout_s, interval_s=0.5), f"advisor has {last[0]} milli, cluster {milli}"


def test_the_watch_follows_pods_through_an_api_server_restart_and_a_compaction(
    plane: ControlPlane, api: KubeApi, watching: Advisor
) -> None:
    bound_pod(api, "before", 2)
    eventually(watching, 2000)

    plane.restart_apiserver()
    bound_pod(api, "after-restart", 1)
    eventually(watching, 3000)

    # The advisor stops reading (a long GC pause, a node under pressure) and its watch connection is cut (the API
    # server restarts: no event of what follows can wait in a socket buffer for it) while pods come and go and etcd's
    # history is compacted; the API server restarts again, so its watch cache starts again from the present.
    proc = watching.process.proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        plane.restart_apiserver()
        delete_pod(api, "before")
        bound_pod(api, "while-paused", 4)
        plane.compact_etcd()
        plane.restart_apiserver()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    eventually(watching, 5000)

    # and it goes on watching after all that
    delete_pod(api, "after-restart")
    eventually(watching, 4000)


POOL = "example.com/pool"


def pools(advisor: Advisor, *nodes: str) -> dict[str, str | None]:
    """Each node's POOL label as the advisor's node watch knows it (None: no label; absent: a node it does not list),
    after a telemetry push for each of `nodes` (the nodes the advisor lists are those that report)."""
    with advisor.client() as client:
        for node in nodes:
            client.post("/v1/telemetry", json=snapshot(node)).raise_for_status()
        listed = client.get("/v1/nodes", params={"detail": "true"}).json()["nodes"]
    return {n["name"]: (n.get("labels") or {}).get(POOL) for n in listed if n["name"].startswith("pool-")}


def relabel(api: KubeApi, node: str, pool: str) -> None:
    api.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {POOL: pool}}})


def test_the_watch_follows_nodes_through_an_api_server_restart_and_a_compaction(
    plane: ControlPlane, api: KubeApi, watching: Advisor
) -> None:
    last: list[dict[str, str | None]] = [{}]

    def sees(want: dict[str, str | None], *pushing: str) -> bool:
        last[0] = pools(watching, *pushing)
        return last[0] == want

    create_node(api, gpu_node("pool-a", labels={POOL: "blue"}))
    create_node(api, gpu_node("pool-doomed", labels={POOL: "blue"}))
    want: dict[str, str | None] = {"pool-a": "blue", "pool-doomed": "blue"}
    assert wait_until(lambda: sees(want, "pool-a", "pool-doomed"), timeout_s=60, interval_s=0.5), last[0]

    plane.restart_apiserver()
    relabel(api, "pool-a", "green")
    create_node(api, gpu_node("pool-b", labels={POOL: "blue"}))
    want = {"pool-a": "green", "pool-b": "blue", "pool-doomed": "blue"}
    assert wait_until(lambda: sees(want, "pool-b"), timeout_s=60, interval_s=0.5), last[0]

    # While the advisor is not reading, its watch connection is cut (the API server restarts: no event of what
    # follows can wait in a socket buffer), a node is added, one relabelled and one deleted, and etcd's history is
    # compacted: its watch resumes with 410 Gone and only a new list can tell it what changed.
    proc = watching.process.proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        plane.restart_apiserver()
        create_node(api, gpu_node("pool-c", labels={POOL: "blue"}))
        relabel(api, "pool-b", "green")
        api.delete("/api/v1/nodes/pool-doomed")
        plane.compact_etcd()
        plane.restart_apiserver()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    # the deleted node is forgotten with its telemetry, not kept until it expires
    want = {"pool-a": "green", "pool-b": "green", "pool-c": "blue"}
    assert wait_until(lambda: sees(want, "pool-c"), timeout_s=60, interval_s=0.5), last[0]

    # and it goes on watching nodes after all that
    api.delete("/api/v1/nodes/pool-c")
    relabel(api, "pool-a", "blue")
    want = {"pool-a": "blue", "pool-b": "green"}
    assert wait_until(lambda: sees(want), timeout_s=60, interval_s=0.5), last[0]
