"""The collector's reading of the kubelet's pod-resources API: the device IDs NVIDIA's device plugin writes, the
decoder against the bytes upstream's generated server sends (podresources-standin), and every way the socket can
fail — missing, refusing, silent — ending in a fallback with one log line, never a crash."""

from __future__ import annotations

import copy
import logging
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from collector import cli
from collector.exporter import SnapshotCollector
from collector.kube import KubeletPodIndex, PodIndex, make_api_client
from collector.kubelet_pods import (
    ContainerDevices,
    KubeletContainer,
    KubeletPod,
    PodResourcesDecodeError,
    PodResourcesUnavailableError,
    decode_list_response,
    device_uuid,
    gpu_allocations,
    is_gpu_resource,
    parent_gpu_uuid,
)
from collector.podresources import PodResourcesClient
from collector.pods import PodInfo
from collector.settings import CollectorSettings
from collector.snapshot import GpuSnapshot, MigDeviceSnapshot, NodeSnapshot
from collector.stats import CollectorStats
from tests.support.net import wait_until
from tests.support.podresources import kubelet, pod

WHOLE = pod("ml", "whole-0", main=[("nvidia.com/gpu", ["GPU-0a1b"])])
SLICED = pod(
    "ml", "sliced-0", main=[("nvidia.com/gpu", ["GPU-2c3d::0", "GPU-2c3d::3"])], sidecar=[("example.com/nic", ["n0"])]
)
RENAMED_SHARE = pod("ml", "shared-0", main=[("nvidia.com/gpu.shared", ["GPU-2c3d::5"])])
MIG = pod("ml", "mig-0", main=[("nvidia.com/mig-1g.10gb", ["MIG-5e6f"])])
LEGACY_MIG = pod("ml", "mig-1", main=[("nvidia.com/mig-3g.40gb", ["MIG-GPU-7a8b/2/0"])])
CPU_ONLY = pod("ml", "cpu-0", main=[])


@pytest.mark.parametrize(
    ("device_id", "uuid", "parent"),
    [
        ("GPU-0a1b", "GPU-0a1b", None),  # a whole GPU
        ("GPU-2c3d::3", "GPU-2c3d", None),  # replica 3 of a time-sliced (or MPS) GPU
        ("MIG-5e6f", "MIG-5e6f", None),  # a MIG device (R470+ drivers)
        ("MIG-5e6f::1", "MIG-5e6f", None),  # a shared MIG device
        ("MIG-GPU-7a8b/2/0", "MIG-GPU-7a8b/2/0", "GPU-7a8b"),  # older drivers: parent GPU, GPU and compute instance
    ],
)
def test_device_ids_as_nvidias_device_plugin_writes_them(device_id: str, uuid: str, parent: str | None) -> None:
    assert device_uuid(device_id) == uuid
    assert parent_gpu_uuid(device_id) == parent


@pytest.mark.parametrize(
    ("resource", "gpu"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/gpu.shared", True),  # time-slicing with renameByDefault
        ("nvidia.com/mig-1g.10gb", True),
        ("nvidia.com/gpumem", False),  # HAMi's memory share: no device of its own
        ("example.com/nic", False),
        ("", False),
    ],
)
def test_which_resources_are_gpus(resource: str, gpu: bool) -> None:
    assert is_gpu_resource(resource) is gpu


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_any_bytes_decode_to_pods_or_one_decode_error(data: bytes) -> None:
    try:
        pods = decode_list_response(data)
    except PodResourcesDecodeError:
        return
    assert all(isinstance(p, KubeletPod) for p in pods)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x0a\x05abc", "runs past the message"),  # a pod of 5 bytes with 3 sent
        (b"\x0a\x02\x08\x01", "expected a string"),  # a pod whose name is a number
        (b"\x0b", "wire type 3"),
        (b"\x0a\x03\x0a\x01\xff", "not UTF-8"),
        (b"\x08" + b"\xff" * 10, "varint"),
    ],
)
def test_a_broken_answer_says_what_is_broken(data: bytes, message: str) -> None:
    with pytest.raises(PodResourcesDecodeError, match=message):
        decode_list_response(data)


@pytest.mark.kube_bin
def test_the_kubelets_answer_whole_gpus_replicas_and_mig() -> None:
    """What upstream's generated server marshals, with the fields the collector skips (CPU IDs, memory, NUMA
    topology, dynamic resources) present."""
    skipped = {
        "cpu_ids": [2, 3],
        "memory": [{"memory_type": "memory", "size": 1 << 30, "topology": {"nodes": [{"ID": 0}]}}],
    }
    whole = copy.deepcopy(WHOLE) | copy.deepcopy(skipped)
    whole["containers"][0] |= skipped | {"dynamic_resources": [{"claim_name": "c", "claim_namespace": "ml"}]}
    whole["containers"][0]["devices"][0]["topology"] = {"nodes": [{"ID": 1}]}
    with kubelet([whole, SLICED, RENAMED_SHARE, MIG, LEGACY_MIG, CPU_ONLY]) as standin:
        client = PodResourcesClient(standin.socket, timeout_seconds=10)
        try:
            pods = {p.name: p for p in client.list()}
        finally:
            client.close()
    assert pods["whole-0"] == KubeletPod(
        "ml", "whole-0", (KubeletContainer("main", (ContainerDevices("nvidia.com/gpu", ("GPU-0a1b",)),)),)
    )
    assert list(pods["sliced-0"].gpu_devices()) == [
        ("main", "nvidia.com/gpu", "GPU-2c3d::0"),
        ("main", "nvidia.com/gpu", "GPU-2c3d::3"),
    ]
    assert list(pods["mig-1"].gpu_devices()) == [("main", "nvidia.com/mig-3g.40gb", "MIG-GPU-7a8b/2/0")]
    assert {name for name, p in pods.items() if p.holds_gpu()} == {"whole-0", "sliced-0", "shared-0", "mig-0", "mig-1"}
    assert pods["cpu-0"] == KubeletPod("ml", "cpu-0", (KubeletContainer("main"),))


@pytest.mark.kube_bin
def test_a_pod_that_vanished_is_gone_from_the_next_answer() -> None:
    with kubelet([WHOLE, MIG]) as standin:
        client = PodResourcesClient(standin.socket, timeout_seconds=10)
        try:
            assert [p.name for p in client.list()] == ["whole-0", "mig-0"]
            standin.serve([MIG])
            assert [p.name for p in client.list()] == ["mig-0"]
        finally:
            client.close()


@pytest.fixture
def refusing_socket(tmp_path: Path) -> Iterator[Path]:
    """A socket file nobody listens on (a kubelet that died without removing it): connecting is refused."""
    path = tmp_path / "kubelet.sock"
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound.bind(str(path))
    try:
        yield path
    finally:
        bound.close()


def test_a_missing_socket_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(PodResourcesUnavailableError, match=r"no kubelet pod-resources socket .*kubelet\.sock"):
        PodResourcesClient(tmp_path / "kubelet.sock").list()


def test_a_refusing_socket_is_one_error(refusing_socket: Path) -> None:
    client = PodResourcesClient(refusing_socket, timeout_seconds=10)
    try:
        with pytest.raises(PodResourcesUnavailableError, match=f"socket {refusing_socket}: UNAVAILABLE"):
            client.list()
    finally:
        client.close()


@pytest.mark.kube_bin
def test_a_kubelet_that_does_not_answer_in_time_is_one_error() -> None:
    with kubelet([WHOLE], delay_s=30) as standin:
        client = PodResourcesClient(standin.socket, timeout_seconds=0.5)
        try:
            with pytest.raises(PodResourcesUnavailableError, match=r"no answer within 0\.5 s"):
                client.list()
        finally:
            client.close()


def _pod_index(socket_path: Path, timeout_seconds: float = 10.0) -> KubeletPodIndex | PodIndex:
    """The CLI's choice of pod source for node n1 (an API client that is never reached: no pod holds a GPU)."""
    settings = CollectorSettings(pod_resources_socket=socket_path, pod_resources_timeout_seconds=timeout_seconds)
    plan = cli._Plan("n1", 5.0, Path("/proc"), None)
    parts = cli._Parts(backend=None, stats=CollectorStats())  # type: ignore[arg-type]
    chosen = cli._pod_index(make_api_client(host="http://127.0.0.1:9"), plan, parts, settings)
    for part in parts.stoppables:
        part.stop()
    return chosen


@pytest.mark.kube_bin
def test_the_kubelet_is_the_pod_source_where_its_socket_answers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="collector.cli")
    with kubelet([CPU_ONLY]) as standin:
        assert isinstance(_pod_index(standin.socket), KubeletPodIndex)
    (line,) = [r.getMessage() for r in caplog.records if "pod source" in r.getMessage()]
    assert f"the kubelet's pod-resources API at {standin.socket}" in line


@pytest.mark.kube_bin
@pytest.mark.parametrize("fault", ["missing", "refusing", "silent"])
def test_without_an_answering_kubelet_the_nodes_pods_are_listed(
    fault: str, refusing_socket: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="collector.cli")
    if fault == "silent":
        with kubelet([WHOLE], delay_s=30) as standin:
            chosen = _pod_index(standin.socket, timeout_seconds=0.5)
    else:
        chosen = _pod_index(refusing_socket if fault == "refusing" else tmp_path / "none" / "kubelet.sock")
    assert isinstance(chosen, PodIndex)
    (line,) = [r.getMessage() for r in caplog.records if "pod source" in r.getMessage()]
    assert "the API server's list of node n1's pods" in line
    why = {"missing": "no kubelet pod-resources socket", "refusing": "UNAVAILABLE", "silent": "no answer within"}
    assert why[fault] in line


def test_which_pod_holds_which_gpu_device_is_exported_used_or_idle() -> None:
    """`gpuadvisor_pod_gpu_allocated`: the kubelet's allocations joined to the node's GPUs (a replica and a MIG device
    to the GPU holding them), with the pod's UID and owner where the API server gave them."""
    mig = MigDeviceSnapshot(index=0, uuid="MIG-5e6f", gpu_instance_id=1, compute_instance_id=0)
    snapshot = NodeSnapshot(
        node="n1",
        timestamp=datetime(2026, 11, 28, tzinfo=UTC),
        gpus=(
            GpuSnapshot(index=0, uuid="GPU-0a1b"),
            GpuSnapshot(index=1, uuid="GPU-2c3d"),
            GpuSnapshot(index=2, uuid="GPU-7a8b", mig_devices=(mig,)),
        ),
    )
    owner = PodInfo(uid="u-whole", namespace="ml", name="whole-0", owner_kind="Job", owner_name="train")
    kubelet_pods = [
        KubeletPod("ml", p["name"], tuple(_container(c) for c in p["containers"]))
        for p in (WHOLE, SLICED, MIG, LEGACY_MIG, CPU_ONLY)
    ]
    allocations = [(a, owner if a.pod == "whole-0" else None) for a in gpu_allocations(kubelet_pods)]
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: snapshot, CollectorStats(), "n1", allocations=lambda: allocations))

    def allocated(device: str) -> dict[str, str]:
        for metric in registry.collect():
            for sample in metric.samples:
                if sample.name == "gpuadvisor_pod_gpu_allocated" and sample.labels["device"] == device:
                    assert sample.value == 1
                    return sample.labels
        raise AssertionError(f"no series for {device}")

    assert allocated("GPU-0a1b") == {
        "node": "n1",
        "gpu": "0",
        "uuid": "GPU-0a1b",
        "device": "GPU-0a1b",
        "resource": "nvidia.com/gpu",
        "namespace": "ml",
        "pod": "whole-0",
        "container": "main",
        "pod_uid": "u-whole",
        "owner_kind": "Job",
        "owner_name": "train",
    }
    assert (allocated("GPU-2c3d::3")["gpu"], allocated("GPU-2c3d::3")["pod"]) == ("1", "sliced-0")
    assert (allocated("MIG-5e6f")["gpu"], allocated("MIG-5e6f")["uuid"]) == ("2", "GPU-7a8b")
    assert allocated("MIG-GPU-7a8b/2/0")["gpu"] == "2"  # older drivers' MIG ID names its parent
    # a pod's other devices (a NIC) and pods without devices are no GPU allocations
    assert {s.labels["device"] for m in registry.collect() for s in m.samples if s.name.endswith("allocated")} == {
        "GPU-0a1b",
        "GPU-2c3d::0",
        "GPU-2c3d::3",
        "MIG-5e6f",
        "MIG-GPU-7a8b/2/0",
    }


def _container(message: dict[str, Any]) -> KubeletContainer:
    devices = tuple(ContainerDevices(d["resource_name"], tuple(d["device_ids"])) for d in message["devices"])
    return KubeletContainer(message["name"], devices)


def test_the_index_keeps_asking_a_kubelet_that_stopped_answering(caplog: pytest.LogCaptureFixture) -> None:
    """A kubelet restarting: each failed List is counted, logged once, and asked again (with backoff) until it
    answers; the pods known before stay known meanwhile."""
    calls: list[int] = []

    def lister() -> tuple[KubeletPod, ...]:
        calls.append(len(calls))
        if 1 <= len(calls) - 1 <= 2:
            raise PodResourcesUnavailableError("kubelet pod-resources socket: UNAVAILABLE: restarting")
        return (KubeletPod("ml", "cpu-0"),)

    caplog.set_level(logging.INFO, logger="collector.kube")
    stats = CollectorStats()
    api = make_api_client(host="http://127.0.0.1:9")  # never reached: no pod holds a GPU
    index = KubeletPodIndex(api, "n1", lister, stats=stats, interval_seconds=0.01, backoff_max_seconds=0.05)
    index.refresh()
    index.start()
    try:
        assert wait_until(lambda: len(calls) >= 5, timeout_s=60)
    finally:
        index.stop()
    assert stats.view().errors == {"podresources": 2}
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "kubelet pod list failed" in m]) == 1
    assert any("recovered" in m for m in messages)
