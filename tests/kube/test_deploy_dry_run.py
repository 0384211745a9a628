"""Every manifest of deploy/ (the base, each component and variant) as the real API server takes it: rendered with
`kubectl kustomize` like the install guide, the Namespaces and the CRD applied first, then everything else through
`kubectl apply --server-side --dry-run=server`, so that the API server's own validation, defaulting, admission
(the ValidatingAdmissionPolicy's CEL is compiled) and field management see each object.

Kinds of other projects (prometheus-operator's ServiceMonitor and PrometheusRule, cert-manager's Certificate and
Issuer) are left out: their CRDs are not ours to install, and a stand-in CRD would accept anything.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube import ControlPlane, kubectl, which_kubectl

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
FOREIGN_GROUPS = ("monitoring.coreos.com/", "cert-manager.io/")
FIRST_KINDS = {"Namespace", "CustomResourceDefinition"}
# Each shipped way to install: an overlay of deploy/ (`{base}`: its relative path), as docs/install.md writes them.
VARIANTS = {
    "base": "resources: [{base}]\n",
    "packing profile": "resources: [{base}]\ncomponents: [{base}/profiles/packing]\n",
    "TLS": "resources: [{base}]\ncomponents: [{base}/profiles/tls]\n",
    "GPU access: runtimeclass": "resources: [{base}]\ncomponents: [{base}/gpu-access/runtimeclass]\n",
    "GPU access: volume-mounts": "resources: [{base}]\ncomponents: [{base}/gpu-access/volume-mounts]\n",
    "GPU access: cdi": "resources: [{base}]\ncomponents: [{base}/gpu-access/cdi]\n",
    "trials in another namespace": "namespace: ml-trials\nresources: [{base}/trial-namespace]\n",
    "Volcano": "resources: [{base}/volcano]\n",
}

Obj = dict[str, Any]


def render(plane: ControlPlane, tmp_path: Path, overlay: str) -> list[Obj]:
    base = Path(os.path.relpath(DEPLOY, tmp_path))
    (tmp_path / "kustomization.yaml").write_text(overlay.format(base=base))
    return [doc for doc in yaml.safe_load_all(kubectl(plane, "kustomize", str(tmp_path))) if doc]


def apply(plane: ControlPlane, objects: list[Obj], *, dry_run: bool) -> str:
    args = ["apply", "--server-side", "--field-manager=gpuadvisor-tests", "-f", "-"]
    if dry_run:
        args.insert(2, "--dry-run=server")
    return kubectl(plane, *args, stdin=yaml.safe_dump_all(objects))


def assert_accepted(plane: ControlPlane, rendered: list[Obj], what: str) -> None:
    """The Namespaces and CRDs of `rendered` applied, then the rest (ours) accepted by a server-side dry run."""
    ours = [o for o in rendered if not o["apiVersion"].startswith(FOREIGN_GROUPS)]
    first = [o for o in ours if o["kind"] in FIRST_KINDS]
    rest = [o for o in ours if o["kind"] not in FIRST_KINDS]
    namespaces = {o["metadata"].get("namespace") for o in rest} - {None}
    first += [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
        for n in sorted(namespaces - {o["metadata"]["name"] for o in first if o["kind"] == "Namespace"})
    ]
    if first:
        apply(plane, first, dry_run=False)
        for crd in (o for o in first if o["kind"] == "CustomResourceDefinition"):
            kubectl(plane, "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}")
    out = apply(plane, rest, dry_run=True)
    accepted = [line for line in out.splitlines() if line.endswith("(server dry run)")]
    assert len(accepted) == len(rest), out
    assert rest, f"{what} renders nothing of ours"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_object_of_the_install_is_accepted_by_the_api_server(
    plane: ControlPlane, variant: str, tmp_path: Path
) -> None:
    which_kubectl()
    assert_accepted(plane, render(plane, tmp_path, VARIANTS[variant]), variant)
