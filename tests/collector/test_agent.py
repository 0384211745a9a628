"""The collection cycle: backend reading + /proc attribution + pod index → NodeSnapshot, sinks, error counting."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from advisor.api import create_app
from advisor.settings import AdvisorSettings
from collector.agent import CollectorAgent
from collector.backend import NodeReading
from collector.exporter import SnapshotCollector
from collector.nvml import NvmlBackend
from collector.pods import PodInfo, StaticPods
from collector.sim import SimulatedBackend
from collector.snapshot import GpuSnapshot, NodeSnapshot, PodRef, ProcessSnapshot
from tests.collector.conftest import ConfigureNvml, write_proc
from tests.support.fake_nvml import FakeGpu, FakeMig, FakeNvmlConfig, FakeProcess
from tests.support.net import wait_until

UID = "6e0b2d3c-1234-4abc-8def-0123456789ab"
CID = "ab" * 32
GIB = 1024**3


class _FixedBackend:
    def __init__(self, reading: NodeReading) -> None:
        self.reading = reading

    def read(self) -> NodeReading:
        return self.reading

    def close(self) -> None:
        """Nothing to release."""


class _BrokenBackend(_FixedBackend):
    def read(self) -> NodeReading:
        raise RuntimeError("driver crashed")


class _Recorder:
    def __init__(self) -> None:
        self.snapshots: list[NodeSnapshot] = []

    def submit(self, snapshot: NodeSnapshot) -> None:
        self.snapshots.append(snapshot)


def test_processes_attributed_to_pods_through_proc_and_index(tmp_path: Path) -> None:
    proc = write_proc(
        tmp_path,
        {
            10: f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
            11: "0::/user.slice/user-1000.slice/session-1.scope\n",
        },
    )
    reading = NodeReading(
        driver_version="550",
        gpus=(
            GpuSnapshot(
                index=0,
                uuid="GPU-0",
                model="m",
                pci_bus_id="p",
                processes=(
                    ProcessSnapshot(pid=10, memory_used_bytes=GIB, sm_utilization_ratio=0.5),
                    ProcessSnapshot(pid=11, memory_used_bytes=GIB, sm_utilization_ratio=0.1),
                    ProcessSnapshot(pid=12, memory_used_bytes=GIB, sm_utilization_ratio=0.2),
                ),
            ),
        ),
    )
    pods = StaticPods(
        {
            UID: PodInfo(
                uid=UID,
                namespace="ml",
                name="train-0",
                labels={"gpuadvisor.io/workload": "resnet50-bs64"},
                owner_kind="Job",
                owner_name="train",
                containers={CID: "main"},
            )
        }
    )
    recorder = _Recorder()
    agent = CollectorAgent(backend=_FixedBackend(reading), node="n1", proc_root=proc, pods=pods, sinks=[recorder])
    snapshot = agent.run_cycle()
    assert snapshot is not None
    assert recorder.snapshots == [snapshot]
    assert agent.latest == snapshot
    processes = {p.pid: p.pod for p in snapshot.gpus[0].processes}
    assert processes == {
        10: PodRef(
            namespace="ml",
            name="train-0",
            uid=UID,
            container="main",
            workload="resnet50-bs64",
            owner_kind="Job",
            owner_name="train",
        ),
        11: None,
    }  # PID 12 exited before its cgroup was read: left out and counted
    view = agent.stats.view()
    assert view.errors == {"process_gone": 1}
    assert view.last_success_timestamp_seconds is not None


def test_failed_cycle_is_counted_not_raised() -> None:
    agent = CollectorAgent(backend=_BrokenBackend(NodeReading("", ())), node="n1")
    assert agent.run_cycle() is None
    assert agent.stats.view().errors == {"cycle": 1}
    assert agent.stats.view().last_success_timestamp_seconds is None


def test_nvml_backend_end_to_end_with_lost_gpu(configure_nvml: ConfigureNvml, tmp_path: Path) -> None:
    configure_nvml(
        FakeNvmlConfig(
            gpus=[
                FakeGpu(uuid="GPU-0", processes=[FakeProcess(10, 2 * GIB)]),
                FakeGpu(uuid="GPU-1", lost=True, processes=[FakeProcess(11, GIB)]),
            ]
        )
    )
    proc = write_proc(tmp_path / "proc", {10: f"0::/kubepods/besteffort/pod{UID}/{CID}\n"})
    backend = NvmlBackend()
    try:
        snapshot = CollectorAgent(backend=backend, node="n1", proc_root=proc).collect_once()
    finally:
        backend.close()
    ok, lost = snapshot.gpus
    assert ok.healthy
    assert ok.processes[0].pod == PodRef(uid=UID)
    assert not lost.healthy
    assert lost.processes == ()


def test_mig_profiles_read_from_nvml_place_a_mig_pod_at_the_advisor(
    configure_nvml: ConfigureNvml, tmp_path: Path
) -> None:
    """The whole path of a MIG profile: NVML (the stand-in library) -> the collector's snapshot -> /v1/telemetry ->
    /v1/score of a pod asking `nvidia.com/mig-1g.10gb`, placed on the GPU that has a 1g.10gb instance."""
    configure_nvml(
        FakeNvmlConfig(
            gpus=[
                FakeGpu(
                    uuid="GPU-0", mig_devices=[FakeMig(f"MIG-0-{i}", i + 1, 0, 40 * GIB, 0, "3g.40gb") for i in (0, 1)]
                ),
                FakeGpu(
                    uuid="GPU-1",
                    mig_devices=[
                        FakeMig("MIG-1-0", 1, 0, 10 * GIB, 0, "1g.10gb"),
                        FakeMig("MIG-1-1", 2, 0, 20 * GIB, 0, "2g.20gb"),
                    ],
                ),
            ]
        )
    )
    backend = NvmlBackend()
    try:
        snapshot = CollectorAgent(backend=backend, node="n1", proc_root=tmp_path).collect_once()
    finally:
        backend.close()
    settings = AdvisorSettings(db_url=f"sqlite:///{tmp_path}/a.db", no_kube=True, api_token="t")
    pod = {
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
    }
    with TestClient(create_app(settings)) as client:
        pushed = client.post(
            "/v1/telemetry",
            content=snapshot.model_dump_json(),
            headers={"Authorization": "Bearer t", "Content-Type": "application/json"},
        )
        assert pushed.status_code == 202, pushed.text
        response = client.post("/v1/score", json={"pod": pod, "nodes": ["n1"]})
    assert response.status_code == 200, response.text
    (score,) = response.json()["scores"]
    assert score["feasible"], score["reason"]
    assert score["gpus"] == [1]


def test_simulated_backend_is_deterministic_and_attributes_its_pods() -> None:
    def run(seed: int) -> NodeSnapshot:
        backend = SimulatedBackend(4, seed=seed, node="sim-1", clock=lambda: 0.0)
        return CollectorAgent(backend=backend, node="sim-1", resolver=backend, pods=backend.pods).collect_once()

    first, again, other = run(1), run(1), run(2)
    assert first.gpus == again.gpus
    assert first.links == again.links
    assert first.gpus != other.gpus
    processes = [p for g in first.gpus for p in g.processes]
    assert processes, "a simulated node has resident processes"
    assert all(p.pod is not None and p.pod.namespace == "sim" and p.pod.workload for p in processes)
    assert len(first.links) == 6


def test_simulated_energy_accumulates_with_time() -> None:
    now = [0.0]
    backend = SimulatedBackend(1, seed=3, clock=lambda: now[0])
    backend.read()
    now[0] = 10.0
    gpu = backend.read().gpus[0]
    assert gpu.power_watts is not None
    assert gpu.energy_joules_total == pytest.approx(gpu.power_watts * 10.0)


def test_agent_loop_runs_until_stopped() -> None:
    backend = SimulatedBackend(2, seed=0)
    recorder = _Recorder()
    agent = CollectorAgent(
        backend=backend, node="sim", resolver=backend, pods=backend.pods, sinks=[recorder], interval_seconds=0.01
    )
    agent.start()
    try:
        assert wait_until(lambda: len(recorder.snapshots) >= 3, timeout_s=10, interval_s=0.01)
    finally:
        agent.stop()
    count = len(recorder.snapshots)
    assert wait_until(lambda: len(recorder.snapshots) > count, timeout_s=0.2, interval_s=0.05) is False


def test_unreadable_and_oversized_cgroups_are_counted_and_never_shown_as_host(
    configure_nvml: ConfigureNvml, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Through the stand-in NVML and the Prometheus exposition: 20 GiB of a pod whose cgroup file cannot be read
    is `owner_kind="unknown"`, not host; a huge cgroup file is read only as far as the limit."""
    configure_nvml(
        FakeNvmlConfig(
            gpus=[
                FakeGpu(uuid="GPU-0", processes=[FakeProcess(10, 20 * GIB), FakeProcess(11, GIB), FakeProcess(12, GIB)])
            ]
        )
    )
    proc = write_proc(tmp_path / "proc", {11: f"0::/kubepods/besteffort/pod{UID}/{CID}\n" + "1:x:/y\n" * 20_000})
    (proc / "10" / "cgroup").mkdir(parents=True)  # the file exists but cannot be read
    (proc / "12").mkdir()
    (proc / "12" / "cgroup").write_text("1:x:/y\n" * 20_000 + f"0::/kubepods/besteffort/pod{UID}/{CID}\n")
    backend = NvmlBackend()
    try:
        agent = CollectorAgent(backend=backend, node="n1", proc_root=proc)
        with caplog.at_level(logging.WARNING, logger="collector.agent"):
            snapshot = agent.collect_once()
            agent.collect_once()
    finally:
        backend.close()
    pods = {p.pid: p.pod for p in snapshot.gpus[0].processes}
    assert pods == {10: PodRef(owner_kind="unknown"), 11: PodRef(uid=UID), 12: PodRef(owner_kind="unknown")}
    assert agent.stats.view().errors == {"cgroup": 6}  # three faults per cycle, two cycles
    assert len([r for r in caplog.records if "cgroup" in r.getMessage()]) == 1  # logged once, then counted
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: agent.latest, agent.stats, "n1"))
    labels = {"node": "n1", "gpu": "0", "uuid": "GPU-0", "namespace": "", "pod": "", "container": "", "owner_name": ""}
    memory = "gpuadvisor_pod_gpu_memory_used_bytes"
    assert registry.get_sample_value(memory, {**labels, "pod_uid": "", "owner_kind": "unknown"}) == 21 * GIB
    assert registry.get_sample_value(memory, {**labels, "pod_uid": UID, "owner_kind": ""}) == GIB
    assert registry.get_sample_value(memory, {**labels, "pod_uid": "", "owner_kind": "host"}) is None
