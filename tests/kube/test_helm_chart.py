"""The Helm chart (deploy/helm/gpuadvisor) renders what kustomize renders: for the default values and for each value
beside the kustomize component or variant it stands for, `helm template` (the helm built from k8s/go.mod) and
`kubectl kustomize` give the same objects, field for field, except the labels Helm adds. `helm lint` passes, bad
values fail with a message, and the rendered chart is accepted by the real API server (server-side dry run).
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube.test_deploy_dry_run import DEPLOY, assert_accepted
from tests.support.kube import ControlPlane, kube_bin_dir, which_kubectl

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

CHART = DEPLOY / "helm" / "gpuadvisor"
HELM_LABELS = ("app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart")
# kustomize puts this label on the base's objects only, not on those of components or of an overlay's other
# resources; the chart puts it on all of its objects.
PART_OF = "app.kubernetes.io/part-of"

Obj = dict[str, Any]
Key = tuple[str, str, str]

# Each value of the chart, beside the kustomize overlay of deploy/ (`{base}`: its relative path) it stands for.
PAIRS: dict[str, tuple[list[str], str]] = {
    "defaults": ([], "resources: [{base}]\n"),
    "monitoring.enabled": (["monitoring.enabled=true"], "resources: [{base}]\ncomponents: [{base}/monitoring]\n"),
    "scheduler.mode=plugin": (["scheduler.mode=plugin"], "resources: [{base}]\ncomponents: [{base}/plugin]\n"),
    "profile=packing": (["profile=packing"], "resources: [{base}]\ncomponents: [{base}/profiles/packing]\n"),
    "tls.enabled with monitoring": (
        ["tls.enabled=true", "monitoring.enabled=true"],
        "resources: [{base}]\ncomponents: [{base}/monitoring, {base}/profiles/tls]\n",
    ),
    "gpuAccess=runtimeclass": (
        ["gpuAccess=runtimeclass"],
        "resources: [{base}]\ncomponents: [{base}/gpu-access/runtimeclass]\n",
    ),
    "gpuAccess=volume-mounts": (
        ["gpuAccess=volume-mounts"],
        "resources: [{base}]\ncomponents: [{base}/gpu-access/volume-mounts]\n",
    ),
    "gpuAccess=cdi": (["gpuAccess=cdi"], "resources: [{base}]\ncomponents: [{base}/gpu-access/cdi]\n"),
    # docs/install.md's overlay for another trial namespace: trial-namespace rendered into it beside the base
    "trialNamespaces": (
        ["trialNamespaces={default,ml-trials}"],
        "resources: [{base}, trials-ml]\n",
    ),
    "volcano.enabled": (["volcano.enabled=true"], "resources: [{base}, {base}/volcano]\n"),
}


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kube_bin_dir() / "helm"), *args], capture_output=True, text=True, timeout=120, check=False
    )


def helm_template(values: list[str]) -> list[Obj]:
    result = helm("template", "gpuadvisor", str(CHART), *(f"--set={v}" for v in values))
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def kustomize(tmp_path: Path, overlay: str) -> list[Obj]:
    (tmp_path / "trials-ml").mkdir()
    trials = Path(os.path.relpath(DEPLOY / "trial-namespace", tmp_path / "trials-ml"))
    (tmp_path / "trials-ml" / "kustomization.yaml").write_text(f"namespace: ml-trials\nresources: [{trials}]\n")
    (tmp_path / "kustomization.yaml").write_text(overlay.format(base=Path(os.path.relpath(DEPLOY, tmp_path))))
    result = subprocess.run(
        [which_kubectl(), "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def key(obj: Obj) -> Key:
    return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def without_labels(obj: Obj, labels: tuple[str, ...]) -> Obj:
    kept = {k: v for k, v in obj["metadata"].get("labels", {}).items() if k not in labels}
    metadata = {k: v for k, v in obj["metadata"].items() if k != "labels"}
    return {**obj, "metadata": {**metadata, **({"labels": kept} if kept else {})}}


def differences(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """Where two rendered values differ, as paths with both sides (an assertion message a reader can act on)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return [
            d
            for k in sorted(ours.keys() | theirs.keys())
            for d in differences(ours.get(k), theirs.get(k), f"{path}.{k}")
        ]
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [d for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if ours == theirs else [f"{path}: chart {ours!r}, kustomize {theirs!r}"]


def by_key(objects: list[Obj]) -> dict[Key, Obj]:
    keyed = {key(o): o for o in objects}
    assert len(keyed) == len(objects), "two objects of one kind, namespace and name"
    return keyed


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_the_chart_renders_the_objects_kustomize_renders(pair: str, tmp_path: Path) -> None:
    values, overlay = PAIRS[pair]
    charted = helm_template(values)
    for obj in charted:
        labels = obj["metadata"].get("labels", {})
        assert labels.get(PART_OF) == "gpuadvisor", key(obj)
        assert labels.get("app.kubernetes.io/managed-by") == "Helm", key(obj)
    ours = by_key([without_labels(o, (*HELM_LABELS, PART_OF)) for o in charted])
    theirs = by_key([without_labels(o, (PART_OF,)) for o in kustomize(tmp_path, overlay)])
    assert sorted(ours) == sorted(theirs)
    for k, obj in theirs.items():
        assert not differences(ours[k], obj), (k, differences(ours[k], obj))


def test_without_the_namespace_the_chart_renders_everything_else() -> None:
    keys = {key(o) for o in helm_template([])}
    assert keys - {key(o) for o in helm_template(["namespace.create=false"])} == {
        ("Namespace", "", "gpuadvisor"),
        ("Namespace", "", "gpuadvisor-collector"),
    }


def test_helm_lint_passes_for_the_defaults_and_every_value() -> None:
    for values, _ in PAIRS.values():
        result = helm("lint", "--strict", str(CHART), *(f"--set={v}" for v in values))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["gpuAccess=nvidia"], "/gpuAccess"),
        (["scheduler.mode=default"], "/scheduler/mode"),
        (["trialNamespaces={Not_A_Name}"], "/trialNamespaces/0"),
        (["monitoring.enable=true"], "enable"),
        (["scheduler.mode=plugin", "profile=packing"], "scheduler.mode=plugin and profile=packing"),
    ],
)
def test_bad_values_fail_with_a_message_naming_them(values: list[str], message: str) -> None:
    result = helm("template", "gpuadvisor", str(CHART), *(f"--set={v}" for v in values))
    assert result.returncode != 0
    assert message in result.stderr
    assert "panic" not in result.stderr


@pytest.mark.parametrize(
    "values",
    [
        [],
        [
            "scheduler.mode=plugin",
            "gpuAccess=volume-mounts",
            "trialNamespaces={default,ml-helm}",
            "volcano.enabled=true",
        ],
    ],
    ids=["defaults", "plugin, volume-mounts, a trial namespace, volcano"],
)
def test_the_rendered_chart_is_accepted_by_the_api_server(plane: ControlPlane, values: list[str]) -> None:
    which_kubectl()
    assert_accepted(plane, helm_template(values), f"helm template {values}")


def test_the_packaged_chart_carries_the_kustomize_sources_and_renders_the_same(tmp_path: Path) -> None:
    """`helm package` follows files/'s links: the archive holds deploy/'s and dashboards/' files themselves (and not
    the chart inside deploy/ again), so a chart installed from it needs no checkout."""
    result = helm("package", str(CHART), "--destination", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (archive,) = tmp_path.glob("gpuadvisor-*.tgz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "gpuadvisor/files/deploy/kustomization.yaml" in names
    assert "gpuadvisor/files/dashboards/kustomization.yaml" in names
    assert not [n for n in names if n.startswith("gpuadvisor/files/deploy/helm/")]
    values = ["monitoring.enabled=true", "gpuAccess=cdi"]
    packaged = helm("template", "gpuadvisor", str(archive), *(f"--set={v}" for v in values))
    assert packaged.returncode == 0, packaged.stderr
    assert [d for d in yaml.safe_load_all(packaged.stdout) if d] == helm_template(values)
