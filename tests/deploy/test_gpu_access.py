"""The GPU-access components (deploy/gpu-access/, docs/install.md#gpu-access): each renders over the base with
`kubectl kustomize`, every object still validates against the Kubernetes schemas, and the collector gets its access
the documented way without privileges and without taking a GPU from the scheduler."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy.test_kustomize import DEPLOY, FOREIGN_KINDS, KUBERNETES_VERSIONS, ROOT, find, pod_spec
from tests.support.binaries import require_binary

COMPONENTS = ("runtimeclass", "volume-mounts", "cdi")
Obj = dict[str, Any]


def _render(component: str, tmp_path: Path) -> list[Obj]:
    kubectl = require_binary("kubectl", "`kubectl kustomize` renders the GPU-access components")
    base = Path(os.path.relpath(DEPLOY, tmp_path))
    (tmp_path / "kustomization.yaml").write_text(
        f"resources: [{base}]\ncomponents: [{base / 'gpu-access' / component}]\n"
    )
    result = subprocess.run(
        [kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.mark.parametrize("component", COMPONENTS)
def test_component_renders_valid_objects_and_keeps_the_collector_unprivileged(component: str, tmp_path: Path) -> None:
    objects = _render(component, tmp_path)
    for obj in objects:
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                assert obj["kind"] in FOREIGN_KINDS
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{component}: {obj['kind']}/{obj['metadata']['name']} invalid for {version}: {e.message}")
    daemonset = find(objects, "DaemonSet", "gpuadvisor-collector")
    spec = pod_spec(daemonset)
    (container,) = spec["containers"]
    assert not spec.get("hostPID")
    assert not container["securityContext"].get("privileged")
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert "nvidia.com/gpu" not in json.dumps(container.get("resources", {})), "the collector must not take a GPU"
    if component == "runtimeclass":
        assert spec["runtimeClassName"] == "nvidia"
    elif component == "volume-mounts":
        volumes = {v["name"]: v for v in spec["volumes"]}
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/var/run/nvidia-container-devices/all"]
        assert volumes[mount["name"]]["hostPath"]["path"] == "/dev/null"
        assert mount["readOnly"] is True
    else:
        annotations = daemonset["spec"]["template"]["metadata"]["annotations"]
        assert [v for k, v in annotations.items() if k.startswith("cdi.k8s.io/")] == ["nvidia.com/gpu=all"]
    # the rest of the install is the base's, untouched
    others = [o for o in objects if o is not daemonset]
    base = [o for o in _render_base() if o["kind"] != "DaemonSet"]
    assert sorted(json.dumps(o, sort_keys=True) for o in others) == sorted(json.dumps(o, sort_keys=True) for o in base)


def _render_base() -> list[Obj]:
    kubectl = require_binary("kubectl", "`kubectl kustomize deploy` renders the manifests")
    result = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_install_guide_documents_every_component() -> None:
    guide = (ROOT / "docs" / "install.md").read_text()
    assert "## GPU access" in guide
    for component in COMPONENTS:
        assert f"deploy/gpu-access/{component}" in guide, component
