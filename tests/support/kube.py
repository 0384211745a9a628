"""A real Kubernetes control plane on loopback for the tests: etcd, kube-apiserver and kube-scheduler as plain
processes (no kubelet, no controller manager), built from the Go module in k8s/ by `make kube-bin`.

The binaries' folder comes from $GPUADVISOR_KUBE_BIN (`make test` exports it), else from the build cache
(`k8s/build.sh --cached`); without either a test skips, or fails under CI=true (tests/support/binaries.py).
The API server runs as a cluster does: secure port with the certificates it makes itself, a static admin token,
`Node,RBAC` authorization, service-account keys (so bound tokens carry their pod's node). Tests talk to it over HTTP
with `KubeApi` (raw JSON, as the objects are written in the manifests).
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client as k8s

from tests.support.binaries import in_ci, require_binary
from tests.support.net import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "k8s" / "build.sh"
SCHEDULER_CONFIG = ROOT / "deploy" / "scheduler" / "scheduler-config.yaml"
KUBE_BIN_ENV = "GPUADVISOR_KUBE_BIN"
# Set by `make test` (.ci/test) while it runs the tests not marked as needing the binaries, before they are built.
KUBE_BIN_LATER_ENV = "GPUADVISOR_KUBE_BIN_LATER"
KUBE_BIN_MARKERS = ("kube", "plugin", "kube_bin")
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "helm", "podresources-standin")
ADMIN_TOKEN = "gpuadvisor-test-admin-token"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
START_TIMEOUT_S = 120.0

Obj = dict[str, Any]


def kube_bin_dir() -> Path:
    """The folder with etcd, kube-apiserver, kube-scheduler, helm and podresources-standin; skips (fails under CI)
    when they are not built, and fails a test without one of KUBE_BIN_MARKERS while `make test` has not built them."""
    if os.environ.get(KUBE_BIN_LATER_ENV):
        pytest.fail(
            f"this test needs the Kubernetes binaries but has none of the markers {', '.join(KUBE_BIN_MARKERS)}: "
            "`make test` runs it before k8s/build.sh has built them (mark it `kube_bin`)"
        )
    found = os.environ.get(KUBE_BIN_ENV)
    if not found and BUILD_SCRIPT.is_file():
        cached = subprocess.run([str(BUILD_SCRIPT), "--cached"], capture_output=True, text=True, check=False)
        found = cached.stdout.strip().splitlines()[-1] if cached.returncode == 0 and cached.stdout.strip() else None
    missing = [b for b in BINARIES if not found or not os.access(Path(found) / b, os.X_OK)]
    if missing:
        message = f"Kubernetes binaries {', '.join(missing)} not built: run `make kube-bin` (or set ${KUBE_BIN_ENV})"
        if in_ci():
            pytest.fail(message + " (CI=true: required)")
        pytest.skip(message)
    assert found is not None
    return Path(found)


class KubeApiError(AssertionError):
    """The API server answered a request with an error status (the message carries its Status reason)."""

    def __init__(self, method: str, path: str, response: httpx.Response) -> None:
        self.status_code = response.status_code
        try:
            self.body: Obj = response.json()
        except ValueError:
            self.body = {"message": response.text}
        super().__init__(f"{method} {path}: {response.status_code} {self.body.get('message', '')}")


@dataclass
class KubeApi:
    """JSON over HTTPS to the API server with one bearer token (the admin's, or a service account's)."""

    url: str
    token: str
    ca_file: Path
    _client: httpx.Client = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._client = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.token}"},
            verify=ssl.create_default_context(cafile=self.ca_file),
            timeout=30,
        )

    def as_token(self, token: str) -> KubeApi:
        return KubeApi(self.url, token, self.ca_file)

    def request(self, method: str, path: str, **kwargs: Any) -> Obj:
        response = self._client.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise KubeApiError(method, path, response)
        body: Obj = response.json() if response.content else {}
        return body

    def get(self, path: str, **params: str) -> Obj:
        return self.request("GET", path, params=params)

    def create(self, path: str, obj: Obj, **params: str) -> Obj:
        return self.request("POST", path, json=obj, params=params)

    def merge_patch(self, path: str, patch: Obj) -> Obj:
        return self.request(
            "PATCH", path, content=json.dumps(patch).encode(), headers={"Content-Type": "application/merge-patch+json"}
        )

    def delete(self, path: str) -> Obj:
        return self.request("DELETE", path)

    def wait_for(self, path: str, check: Callable[[Obj], bool], timeout_s: float = 60.0) -> Obj:
        """The object at `path` once `check` holds for it; AssertionError with its last state after `timeout_s`."""
        last: Obj = {}

        def holds() -> bool:
            nonlocal last
            last = self.get(path)
            return check(last)

        if not wait_until(holds, timeout_s=timeout_s, interval_s=0.2):
            raise AssertionError(f"{path} did not reach the expected state in {timeout_s:.0f} s; last: {last}")
        return last

    def close(self) -> None:
        self._client.close()


def kubernetes_client(api: KubeApi) -> k8s.ApiClient:
    """The kubernetes client our components use, with `api`'s server, CA and token (as a pod's service account)."""
    configuration = k8s.Configuration()
    configuration.host = api.url
    configuration.ssl_ca_cert = str(api.ca_file)
    configuration.api_key = {"authorization": f"Bearer {api.token}"}
    return k8s.ApiClient(configuration)


def write_kubeconfig(path: Path, url: str, token: str, ca_file: Path) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": url, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "user", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "user"}}],
        "current-context": "test",
    }
    path.write_text(yaml.safe_dump(config))
    return path


class Process:
    """A component's process with its output in a log file (the tail goes into the error when it fails)."""

    def __init__(self, name: str, argv: list[str], log: Path, env: Mapping[str, str] | None = None) -> None:
        self.name, self.argv, self.log, self.env = name, argv, log, env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=dict(self.env) if self.env else None
            )
        return self

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, check: Callable[[], bool], timeout_s: float = START_TIMEOUT_S) -> None:
        """Poll `check` (exceptions count as "not yet") until it holds; RuntimeError with the log if the process
        exits or `timeout_s` passes first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if check():
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout_s:.0f} s:\n{self.tail()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)  # a graceful stop; past that (a watch blocked in a read) it is killed
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


@dataclass
class ControlPlane:
    """etcd and kube-apiserver on loopback; `api` holds the admin's connection, `kubeconfig` the admin's file."""

    bin_dir: Path
    workdir: Path
    etcd_url: str = ""
    url: str = ""
    ca_file: Path = field(default_factory=Path)
    kubeconfig: Path = field(default_factory=Path)
    apiserver: Process | None = None
    etcd: Process | None = None
    _api: KubeApi | None = None

    @property
    def api(self) -> KubeApi:
        assert self._api is not None, "the control plane is not started"
        return self._api

    def start(self) -> ControlPlane:
        openssl = require_binary("openssl", "the API server's service-account signing key is made with openssl")
        key = self.workdir / "service-account.key"
        subprocess.run([openssl, "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n')
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        self.etcd = Process(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            self.workdir / "etcd.log",
        ).start()
        self.etcd.wait_ready(lambda: httpx.get(f"{self.etcd_url}/health", timeout=2).json()["health"] == "true")
        self.url = f"https://127.0.0.1:{api_port}"
        certs = self.workdir / "certs"
        self.ca_file = certs / "apiserver.crt"
        self.apiserver = Process(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",  # no Service endpoints for a loopback address (no pods reach it)
                f"--secure-port={api_port}",
                f"--cert-dir={certs}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={key}",
                f"--service-account-signing-key-file={key}",
                "--service-cluster-ip-range=10.96.0.0/24",
                # as hardened clusters do: an owner reference that blocks deletion needs the owner's finalizers
                "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
                # The tests compact etcd themselves (the watch must survive a 410 Gone), at a known moment.
                "--etcd-compaction-interval=0",
                "--profiling=false",
            ],
            self.workdir / "kube-apiserver.log",
        )
        self._start_apiserver()
        self.kubeconfig = write_kubeconfig(self.workdir / "admin.kubeconfig", self.url, ADMIN_TOKEN, self.ca_file)
        return self

    def _start_apiserver(self) -> None:
        assert self.apiserver is not None
        self.apiserver.start()
        self.apiserver.wait_ready(
            lambda: (
                httpx.get(
                    f"{self.url}/readyz",
                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                    verify=ssl.create_default_context(cafile=self.ca_file),
                ).status_code
                == 200
            )
        )
        if self._api is None:
            self._api = KubeApi(self.url, ADMIN_TOKEN, self.ca_file)

    def restart_apiserver(self) -> None:
        """Stop the API server and start it again on the same port, etcd and certificates."""
        assert self.apiserver is not None
        self.apiserver.stop()
        self._start_apiserver()

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (what the API server does every 5 minutes), so that
        a watch from an older resourceVersion is answered 410 Gone; returns the revision."""
        head = httpx.post(f"{self.etcd_url}/v3/kv/range", json={"key": "AA=="}, timeout=10).json()
        revision = int(head["header"]["revision"])
        response = httpx.post(
            f"{self.etcd_url}/v3/kv/compaction", json={"revision": str(revision), "physical": True}, timeout=30
        )
        response.raise_for_status()
        return revision

    def stop(self) -> None:
        if self._api is not None:
            self._api.close()
        for process in (self.apiserver, self.etcd):
            if process is not None:
                process.stop()


@contextmanager
def control_plane(bin_dir: Path, workdir: Path) -> Iterator[ControlPlane]:
    plane = ControlPlane(bin_dir, workdir)
    try:
        yield plane.start()
    finally:
        plane.stop()


def scheduler_config(
    kubeconfig: Path, extender_url: str, scheduler_name: str, changes: Mapping[str, Any] | None = None
) -> Obj:
    """The profile shipped in deploy/scheduler/ as it is, but for where to find the API server and the advisor,
    the profile's name and no leader election (one scheduler per profile here); `changes` are set on top (keys
    `extender.<field>` on the extender, others on the configuration)."""
    config: Obj = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    config["leaderElection"] = {"leaderElect": False}
    (profile,) = config["profiles"]
    profile["schedulerName"] = scheduler_name
    (extender,) = config["extenders"]
    extender["urlPrefix"] = extender_url
    for key, value in (changes or {}).items():
        where, field_name = (extender, key.removeprefix("extender.")) if key.startswith("extender.") else (config, key)
        where[field_name] = value
    return config


@contextmanager
def kube_scheduler(
    plane: ControlPlane,
    extender_url: str,
    scheduler_name: str,
    workdir: Path,
    changes: Mapping[str, Any] | None = None,
) -> Iterator[Process]:
    """kube-scheduler with the shipped profile under `scheduler_name`, its extender at `extender_url` (and
    `changes`, as `scheduler_config` takes them)."""
    config = workdir / f"{scheduler_name}.yaml"
    config.write_text(yaml.safe_dump(scheduler_config(plane.kubeconfig, extender_url, scheduler_name, changes)))
    port = free_port()
    process = Process(
        f"kube-scheduler ({scheduler_name})",
        [
            str(plane.bin_dir / "kube-scheduler"),
            f"--config={config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--authentication-kubeconfig={plane.kubeconfig}",
            f"--authorization-kubeconfig={plane.kubeconfig}",
        ],
        workdir / f"{scheduler_name}.log",
    ).start()
    try:
        process.wait_ready(lambda: httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False).status_code == 200)
        yield process
    finally:
        process.stop()


def namespace(api: KubeApi, name: str) -> None:
    """A namespace and its `default` ServiceAccount (made by the controller manager in a cluster; none runs here)."""
    try:
        api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except KubeApiError as e:
        if e.status_code != 409:
            raise
    try:
        api.create(
            f"/api/v1/namespaces/{name}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
        )
    except KubeApiError as e:
        if e.status_code != 409:
            raise


def gpu_node(
    name: str, *, gpus: int = 8, product: str = "NVIDIA-H100-80GB-HBM3", labels: Mapping[str, str] | None = None
) -> Obj:
    """A Node as a kubelet with the NVIDIA device plugin and GPU feature discovery registers it."""
    allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, GPU_PRODUCT_LABEL: product, **(labels or {})},
        },
        "status": {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test node"}],
        },
    }


def create_node(api: KubeApi, node: Obj) -> Obj:
    """Create `node` with its status (a kubelet registers its node with its status, then keeps it up to date)."""
    created = api.create("/api/v1/nodes", node)
    name = node["metadata"]["name"]
    if created.get("status", {}).get("allocatable") != node["status"]["allocatable"]:
        created = api.merge_patch(f"/api/v1/nodes/{name}/status", {"status": node["status"]})
    # The API server taints a new node not-ready (admission TaintNodesByCondition); the controller manager's node
    # lifecycle controller lifts it once the kubelet reports Ready. Neither runs here: lift it as that controller would.
    if created.get("spec", {}).get("taints"):
        created = api.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"taints": None}})
    return created


def which_kubectl() -> str:
    return require_binary("kubectl", "kubectl renders the kustomizations and applies them with a server-side dry run")


def kubectl(plane: ControlPlane, *args: str, stdin: str | None = None, token: str | None = None) -> str:
    """Run kubectl against the control plane (as the admin, or with `token`); AssertionError with its stderr."""
    config = plane.kubeconfig
    if token is not None:
        config = write_kubeconfig(plane.workdir / "token.kubeconfig", plane.url, token, plane.ca_file)
    result = subprocess.run(
        [which_kubectl(), f"--kubeconfig={config}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout
