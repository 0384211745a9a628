"""Every manifest of deploy/ (the base, each component and variant) as the real API server takes it: rendered with
`kubectl kustomize` like the install guide, the Namespaces and the CRD applied first, then everything else through
`kubectl apply --server-side --dry-run=server`, so that the API server's own validation, defaulting, admission
(the ValidatingAdmissionPolicy's CEL is compiled) and field management see each object.

Kinds of other projects (prometheus-operator's ServiceMonitor and PrometheusRule, cert-manager's Certificate and
Issuer) are left out: their CRDs are not ours to install, and a stand-in CRD would accept anything.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from profiler.manifests import job_manifest
from profiler.spec import parse_trialrun
from profiler.trials import expand
from tests.profiler.specs import VALID
from tests.support.kube import ControlPlane, KubeApiError, kubectl, namespace, which_kubectl

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


# The install's pods as the controllers make them: a Deployment's or DaemonSet's template in its namespace. Pod
# Security admission judges Pods (a workload's template only draws a warning), so each is created as a Pod, dry run.
POD_SECURITY_VARIANTS = {
    "base": VARIANTS["base"],
    "plugin": "resources: [{base}]\ncomponents: [{base}/plugin]\n",
    "TLS": VARIANTS["TLS"],
    "GPU access: runtimeclass": VARIANTS["GPU access: runtimeclass"],
    "GPU access: volume-mounts": VARIANTS["GPU access: volume-mounts"],
    "GPU access: cdi": VARIANTS["GPU access: cdi"],
}
WORKLOAD_KINDS = {"Deployment", "DaemonSet", "StatefulSet"}
ENFORCE = "pod-security.kubernetes.io/enforce"


def pod_of(workload: Obj) -> Obj:
    template = copy.deepcopy(workload["spec"]["template"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{workload['metadata']['name']}-pod", "labels": template["metadata"].get("labels", {})},
        "spec": template["spec"],
    }


def create_pod(plane: ControlPlane, namespace: str, pod: Obj) -> Obj:
    return plane.api.create(f"/api/v1/namespaces/{namespace}/pods", pod, dryRun="All")


def install_namespaces(plane: ControlPlane, rendered: list[Obj]) -> dict[str, str]:
    """The install's Namespaces (with their Pod Security labels) and ServiceAccounts, made for real; each namespace's
    enforced level."""
    namespaces = [o for o in rendered if o["kind"] == "Namespace"]
    apply(plane, namespaces, dry_run=False)
    apply(plane, [o for o in rendered if o["kind"] == "ServiceAccount"], dry_run=False)
    return {n["metadata"]["name"]: n["metadata"]["labels"][ENFORCE] for n in namespaces}


@pytest.mark.parametrize("variant", sorted(POD_SECURITY_VARIANTS))
def test_every_pod_of_the_install_is_admitted_at_its_namespace_pod_security_level(
    plane: ControlPlane, variant: str, tmp_path: Path
) -> None:
    """gpuadvisor enforces "restricted"; only the collector, alone in its namespace, needs "privileged" (issue 40)."""
    which_kubectl()
    rendered = render(plane, tmp_path, POD_SECURITY_VARIANTS[variant])
    levels = install_namespaces(plane, rendered)
    assert levels == {"gpuadvisor": "restricted", "gpuadvisor-collector": "privileged"}
    workloads = [o for o in rendered if o["kind"] in WORKLOAD_KINDS]
    assert {w["metadata"]["namespace"] for w in workloads} == set(levels)
    # a RuntimeClass a pod names is the node's (the GPU operator's `nvidia`), not the install's: made here as it would
    handlers = {w["spec"]["template"]["spec"].get("runtimeClassName") for w in workloads} - {None}
    runtime_classes = [
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": h}, "handler": h}
        for h in handlers
    ]
    if runtime_classes:
        apply(plane, runtime_classes, dry_run=False)
    for workload in workloads:
        namespace = workload["metadata"]["namespace"]
        created = create_pod(plane, namespace, pod_of(workload))
        assert created["metadata"]["namespace"] == namespace
    (collector,) = (w for w in workloads if w["kind"] == "DaemonSet")
    assert collector["metadata"]["namespace"] == "gpuadvisor-collector"


def test_the_restricted_namespace_refuses_what_restricted_forbids(plane: ControlPlane, tmp_path: Path) -> None:
    """The PodSecurity admission plugin of the real API server holds the line: the collector's pod (host /proc, the
    kubelet's socket, root) and an advisor pod allowed to escalate privileges are refused in gpuadvisor, with the
    reason."""
    which_kubectl()
    rendered = render(plane, tmp_path, VARIANTS["base"])
    install_namespaces(plane, rendered)
    workloads = {o["metadata"]["name"]: o for o in rendered if o["kind"] in WORKLOAD_KINDS}
    collector = pod_of(workloads["gpuadvisor-collector"])
    collector["spec"]["serviceAccountName"] = "gpuadvisor-advisor"  # one that exists there
    with pytest.raises(KubeApiError) as refused:
        create_pod(plane, "gpuadvisor", collector)
    assert refused.value.status_code == 403
    assert 'violates PodSecurity "restricted:latest"' in str(refused.value)
    assert 'volumes "host-proc", "pod-resources" use restricted volume type "hostPath"' in str(refused.value)
    assert 'container "collector" must not set runAsUser=0' in str(refused.value)
    advisor = pod_of(workloads["gpuadvisor-advisor"])
    advisor["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    with pytest.raises(KubeApiError) as escalating:
        create_pod(plane, "gpuadvisor", advisor)
    assert "allowPrivilegeEscalation != false" in str(escalating.value)
    # the same pod as shipped is admitted
    create_pod(plane, "gpuadvisor", pod_of(workloads["gpuadvisor-advisor"]))


def test_trial_jobs_need_no_more_than_restricted(plane: ControlPlane) -> None:
    """Trial namespaces are the users' (deploy/trial-namespace renders only Roles and a NetworkPolicy into them): a
    trial Job's pods ask for GPUs through the device plugin and nothing of the host, so they are admitted where
    "restricted" is enforced and the install need not loosen any namespace for them."""
    run = parse_trialrun(VALID)
    jobs = [
        job_manifest(run, "uid-1", trial, side, gpu_products=None)
        for trial in expand(run.spec)
        for side in range(len(trial.sides))
    ]
    trials = "trials-restricted"
    apply(
        plane,
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": trials, "labels": {ENFORCE: "restricted"}}}],
        dry_run=False,
    )
    namespace(plane.api, trials)  # its default ServiceAccount, which a controller manager would make
    for job in jobs:
        create_pod(plane, trials, pod_of(job))
