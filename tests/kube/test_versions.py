"""The binaries `make kube-bin` builds report the versions k8s/go.mod pins (the build's version ldflags), and the
API server the tests start says so too: the versions docs/install.md names as tested are the ones that ran."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.kube import ROOT, KubeApi, kube_bin_dir

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

GO_MOD = ROOT / "k8s" / "go.mod"


def pinned(module: str) -> str:
    """The version k8s/go.mod requires of `module`."""
    found = re.search(rf"^\s+{re.escape(module)} (v\S+)", GO_MOD.read_text(), re.MULTILINE)
    assert found, f"{module} is not required in {GO_MOD}"
    return found.group(1)


def output(binary: Path, *args: str) -> str:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60, check=True).stdout


def test_each_binary_reports_the_version_go_mod_pins() -> None:
    bin_dir = kube_bin_dir()
    kubernetes = pinned("k8s.io/kubernetes")
    assert output(bin_dir / "kube-apiserver", "--version").strip() == f"Kubernetes {kubernetes}"
    assert output(bin_dir / "kube-scheduler", "--version").strip() == f"Kubernetes {kubernetes}"
    assert f"etcd Version: {pinned('go.etcd.io/etcd/server/v3').removeprefix('v')}" in output(
        bin_dir / "etcd", "--version"
    )
    assert output(bin_dir / "helm", "version", "--template", "{{.Version}}").strip() == pinned("helm.sh/helm/v3")


def test_docs_name_the_tested_kubernetes_version() -> None:
    install = (ROOT / "docs" / "install.md").read_text()
    assert f"Kubernetes {pinned('k8s.io/kubernetes')}" in install


def test_the_running_api_server_is_that_version(api: KubeApi) -> None:
    version = api.get("/version")
    assert version["gitVersion"] == pinned("k8s.io/kubernetes")
    assert (version["major"], version["minor"]) == tuple(pinned("k8s.io/kubernetes").removeprefix("v").split(".")[:2])
