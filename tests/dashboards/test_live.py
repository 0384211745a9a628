"""Every dashboard query returns data from a real Prometheus that scrapes real collectors and a real advisor.

Two collectors push snapshots to `gpuadvisor advisor serve --no-kube`: node-a is `collector run --simulate 4` (pods
with namespaces and owners), node-b reads the stand-in libnvidia-ml.so.1 through the real NVML bindings, with a
fixture /proc (an idle pod, a busy pod, a lost GPU). Prometheus scrapes all three every second under the job names
the ServiceMonitors give them, with the recording rules loaded. Scoring requests make the advisor's own series move.
Template variables are resolved the way Grafana does (first value of their label_values query).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from profiler.store import db, repo
from tests.dashboards.grafana import RULES_FILE, Query, load_dashboards, queries, substitute, variables
from tests.support.fake_nvml import (
    FakeGpu,
    FakeNvmlConfig,
    FakeProcess,
    FakeSample,
    build_library,
    fake_nvml_env,
    write_config,
)
from tests.support.net import free_port, wait_until
from tests.support.prometheus import PrometheusServer, prometheus_server

pytestmark = pytest.mark.prometheus
TOKEN = "dashboards-test-token"
NODES = ("node-a", "node-b")
IDLE_POD_UID = "11111111-2222-3333-4444-555555555555"
BUSY_POD_UID = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def stand_in_node(root: Path) -> tuple[dict[str, str], Path]:
    """Environment and proc root of a node with the stand-in NVML library: an idle pod, a busy pod, a lost GPU."""
    proc = root / "proc"
    for pid, uid in ((4242, IDLE_POD_UID), (4343, BUSY_POD_UID)):
        (proc / str(pid)).mkdir(parents=True)
        scope = f"kubepods-burstable-pod{uid.replace('-', '_')}.slice/cri-containerd-{'ab' * 32}.scope"
        (proc / str(pid) / "cgroup").write_text(f"0::/kubepods.slice/kubepods-burstable.slice/{scope}\n")
    gpus = [
        FakeGpu(
            uuid="GPU-idle",
            utilization_percent=1,
            memory_used_bytes=2 << 30,
            power_milliwatts=70_000,
            energy_millijoules=5_000_000,
            processes=[FakeProcess(4242, 2 << 30)],
            samples=[FakeSample(4242, 1)],
        ),
        FakeGpu(
            uuid="GPU-busy",
            pci_bus_id="00000000:18:00.0",
            utilization_percent=95,
            memory_used_bytes=40 << 30,
            power_milliwatts=650_000,
            energy_millijoules=9_000_000,
            processes=[FakeProcess(4343, 40 << 30)],
            samples=[FakeSample(4343, 95)],
        ),
        FakeGpu(uuid="GPU-lost", pci_bus_id="00000000:19:00.0", lost=True),
    ]
    config = write_config(FakeNvmlConfig(gpus=gpus), root / "nvml.conf")
    return fake_nvml_env(build_library(), config), proc


@contextmanager
def gpuadvisor(args: list[str], log_path: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """Run `gpuadvisor ARGS` in the background; stop it (SIGTERM, then SIGKILL) at the end."""
    env = {**os.environ, **(env or {}), "GPUADVISOR_API_TOKEN": TOKEN}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "advisor.cli", *args], stdout=log, stderr=subprocess.STDOUT, env=env
        )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def post_json(url: str, body: object) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as reply:
        status: int = reply.status
        return status


def drive_advisor(advisor_url: str, nodes: tuple[str, ...] = NODES) -> bool:
    """Score a 1-GPU pod over `nodes` through the native API and the extender; True once the nodes are known."""
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "labels": {"gpuadvisor.io/workload": "resnet50-bs64"}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    post_json(f"{advisor_url}/v1/score", {"pod": {"gpus": 1, "workload": "resnet50-bs64"}, "nodes": list(nodes)})
    post_json(f"{advisor_url}/extender/prioritize", {"Pod": pod, "NodeNames": list(nodes)})
    return True


def resolve_variables(prometheus: PrometheusServer, name: str, dashboard: dict[str, object]) -> dict[str, str]:
    values: dict[str, str] = {}
    for var in variables(name, dashboard):  # type: ignore[arg-type]
        series = prometheus.query(substitute(var.expr, values))
        found = sorted({s["metric"][var.label] for s in series if var.label in s["metric"]})
        if not found:
            return {}
        values[var.name] = found[0]
    return values


def seeded_store(path: Path) -> str:
    """A migrated store whose registry has a promoted JCT model (metrics as training writes them), so the advisor
    dashboard's model panels have a version to show; its artifact is absent, so the advisor serves the heuristic."""
    url = f"sqlite:///{path}"
    engine = db.make_engine(url)
    db.upgrade(engine)
    metrics = {"metric": "mae_log", "mae_log": 1.37, "history_mae_log": 1.79, "baseline_mae_log": 1.8}
    with db.transaction(db.session_factory(engine)) as session:
        repo.add_model_version(
            session=session, kind="jct", artifact_path=str(path.parent / "absent"), metrics=metrics, training_summary={}
        )
        repo.promote_model_version(session=session, kind="jct", version=1)
    engine.dispose()
    return url


def queries_without_data(
    prometheus: PrometheusServer, advisor_url: str, nodes: tuple[str, ...], timeout_s: float = 45
) -> dict[str, Query]:
    """The dashboard queries that returned no series within `timeout_s`, while scoring requests keep the advisor's
    own series moving."""
    pending: dict[str, Query] = {}
    resolved: dict[str, dict[str, str]] = {}
    dashboards = load_dashboards()
    for name, dashboard in dashboards.items():
        pending |= {q.label(): q for q in queries(name, dashboard)}

    def all_return_data() -> bool:
        drive_advisor(advisor_url, nodes)
        for name, dashboard in dashboards.items():
            if not resolved.get(name):
                resolved[name] = resolve_variables(prometheus, name, dashboard)
        for label, query in list(pending.items()):
            values = resolved[query.dashboard]
            usable = values or not variables(query.dashboard, dashboards[query.dashboard])
            if usable and prometheus.query(substitute(query.expr, values)):
                del pending[label]
        return not pending

    wait_until(all_return_data, timeout_s, interval_s=1.0)
    return pending


def test_every_dashboard_query_returns_series(tmp_path: Path) -> None:
    advisor_port = free_port()
    advisor_url = f"http://127.0.0.1:{advisor_port}"
    collector_ports = {node: free_port() for node in NODES}
    with ExitStack() as stack:
        stack.enter_context(
            gpuadvisor(
                [
                    "advisor",
                    "serve",
                    "--no-kube",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(advisor_port),
                    "--db",
                    seeded_store(tmp_path / "advisor.db"),
                ],
                tmp_path / "advisor.log",
                env={"GPUADVISOR_EXPORT_GPU_LINKS": "true"},  # the node-detail link matrix
            )
        )
        common = ["--no-kube", "--interval-s", "1", "--advisor-url", advisor_url]
        port_a, port_b = (str(collector_ports[node]) for node in NODES)
        stack.enter_context(
            gpuadvisor(
                ["collector", "run", "--simulate", "4", "--node", "node-a", *common, "--port", port_a],
                tmp_path / "collector-node-a.log",
            )
        )
        nvml_env, proc_root = stand_in_node(tmp_path / "node-b")
        stack.enter_context(
            gpuadvisor(
                ["collector", "run", "--proc-root", str(proc_root), "--node", "node-b", *common, "--port", port_b],
                tmp_path / "collector-node-b.log",
                env=nvml_env,
            )
        )
        prometheus = stack.enter_context(
            prometheus_server(
                {
                    "gpuadvisor-collector": [f"127.0.0.1:{p}" for p in collector_ports.values()],
                    "gpuadvisor-advisor": [f"127.0.0.1:{advisor_port}"],
                },
                rule_files=[RULES_FILE],
            )
        )
        logs = lambda: "\n".join(p.name + ":\n" + p.read_text()[-1500:] for p in sorted(tmp_path.glob("*.log")))  # noqa: E731
        assert wait_until(prometheus.targets_up, 40, interval_s=0.5), logs()
        assert wait_until(lambda: drive_advisor(advisor_url), 20, interval_s=0.5), logs()

        pending = queries_without_data(prometheus, advisor_url, NODES)
        assert not pending, "queries without data: " + "; ".join(f"{k}: {q.expr}" for k, q in pending.items())

        # what the overview's stat panels show for node-b: its idle pod's GPU and its lost GPU, nothing from node-a
        def value(expr: str) -> float:
            (sample,) = prometheus.query(expr)
            return float(sample["value"][1])

        assert value("sum(gpuadvisor:gpu_allocated_idle:bool)") == 1
        assert value("count(gpuadvisor_gpu_healthy == 0) or vector(0)") == 1
        (idle,) = prometheus.query("gpuadvisor:gpu_allocated_idle:bool == 1")
        assert idle["metric"]["uuid"] == "GPU-idle"


def test_make_up_alone_feeds_every_dashboard(tmp_path: Path) -> None:
    """`make up`'s all-in-one, scraped by a local Prometheus as docs/quickstart.md says (its advisor and the one
    collector-metrics port its banner prints), gives every panel of the four dashboards data for the node names
    /v1/nodes lists."""
    advisor_port, metrics_port = free_port(), free_port()
    advisor_url = f"http://127.0.0.1:{advisor_port}"
    with ExitStack() as stack:
        stack.enter_context(
            gpuadvisor(
                [
                    "up",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(advisor_port),
                    "--metrics-port",
                    str(metrics_port),
                    "--nodes",
                    "2",
                    "--db",
                    f"sqlite:///{tmp_path / 'up.db'}",
                ],
                tmp_path / "up.log",
            )
        )
        prometheus = stack.enter_context(
            prometheus_server(
                {
                    "gpuadvisor-collector": [f"127.0.0.1:{metrics_port}"],
                    "gpuadvisor-advisor": [f"127.0.0.1:{advisor_port}"],
                },
                rule_files=[RULES_FILE],
            )
        )
        log = lambda: (tmp_path / "up.log").read_text()[-3000:]  # noqa: E731
        assert wait_until(prometheus.targets_up, 60, interval_s=0.5), log()
        with urllib.request.urlopen(f"{advisor_url}/v1/nodes", timeout=5) as reply:
            nodes = tuple(sorted(n["name"] for n in json.load(reply)["nodes"]))
        assert len(nodes) == 2, nodes
        pending = queries_without_data(prometheus, advisor_url, nodes, timeout_s=60)
        assert not pending, "queries without data: " + "; ".join(f"{k}: {q.expr}" for k, q in pending.items())
        collector_nodes = {s["metric"]["node"] for s in prometheus.query("gpuadvisor_gpu_info")}
        assert collector_nodes == set(nodes)
