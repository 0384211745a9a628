"""Kubernetes manifests of trial Jobs and the placement decisions behind them (pure; no client here).

A trial side becomes one Job: GPU model by node affinity on the GPU feature discovery label, GPU count as an
`nvidia.com/gpu` limit, `activeDeadlineSeconds` from the spec, an owner reference to the TrialRun (so deleting
the run deletes its Jobs) and labels that link Jobs and pods back to their run, trial and side.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from collector.keys import GPU_PRODUCT_LABEL, GPU_RESOURCE, SIDE_LABEL, TRIAL_LABEL, TRIALRUN_LABEL, WORKLOAD_LABEL
from profiler.spec import API_GROUP, API_VERSION, KIND, SecretKeySelector, TrialRun
from profiler.trials import ENV_TRIAL, Trial, TrialKind

GPU_SHARING_LABEL = "nvidia.com/gpu.sharing-strategy"
HOSTNAME_LABEL = "kubernetes.io/hostname"
SHARING_STRATEGIES = frozenset({"time-slicing", "mps"})
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "gpuadvisor-profiler"
CONTAINER_NAME = "trial"
MAX_NAME_LENGTH = 63
JOB_TTL_SECONDS_AFTER_FINISHED = 86400


TRIAL_POD_SECURITY: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
TRIAL_CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def label_value(value: str) -> str:
    """A label value (≤ 63 characters, alphanumeric at both ends); long values keep a hash for uniqueness."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in value).strip("-_.")
    if len(cleaned) <= MAX_NAME_LENGTH:
        return cleaned
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    return f"{cleaned[: MAX_NAME_LENGTH - 9].rstrip('-_.')}-{digest}"


def job_name(run_name: str, trial: Trial, side: int) -> str:
    """`<run>-<trial>[-a|-b]`, shortened with a hash when the run name is long (Job names end up in labels)."""
    suffix = f"-{trial.id}" + (f"-{'ab'[side]}" if trial.kind is TrialKind.PAIR else "")
    base = run_name
    if len(base) + len(suffix) > MAX_NAME_LENGTH:
        digest = hashlib.sha256(run_name.encode()).hexdigest()[:6]
        base = f"{run_name[: MAX_NAME_LENGTH - len(suffix) - 7].rstrip('-.')}-{digest}"
    return base + suffix


def trial_labels(run_name: str, trial: Trial) -> dict[str, str]:
    return {TRIALRUN_LABEL: label_value(run_name), TRIAL_LABEL: trial.id, LABEL_MANAGED_BY: MANAGER}


def resolve_gpu_products(gpu_model: str, products: Iterable[str]) -> list[str]:
    """The GPU product label values that `gpu_model` names: an exact value, or every value containing it as a
    dash-separated token sequence, case-insensitively ("H100" matches "NVIDIA-H100-80GB-HBM3")."""
    available = sorted(set(products))
    if gpu_model in available:
        return [gpu_model]
    wanted = gpu_model.lower().replace(" ", "-")
    return [p for p in available if f"-{wanted}-" in f"-{p.lower()}-"]


def sharing_of_node(labels: Mapping[str, str]) -> str:
    """How a node shares its GPUs, from the GPU operator's label: `time-slicing` or `mps` (the values
    `profiler.csv_formats.SHARING_MODES` knows), "" when the label is absent or says something else."""
    value = labels.get(GPU_SHARING_LABEL, "")
    return value if value in SHARING_STRATEGIES else ""


def sharing_nodes(nodes: Iterable[Mapping[str, Any]], products: list[str] | None) -> list[str]:
    """Names of nodes whose GPUs are shared (time-slicing or MPS) and whose model is one of `products`."""
    out = []
    for node in nodes:
        labels = node.get("metadata", {}).get("labels", {}) or {}
        if labels.get(GPU_SHARING_LABEL) not in SHARING_STRATEGIES:
            continue
        if products is not None and labels.get(GPU_PRODUCT_LABEL) not in products:
            continue
        out.append(str(node["metadata"]["name"]))
    return sorted(out)


def env_var(name: str, value: str | SecretKeySelector) -> dict[str, Any]:
    """A container's env entry: a literal, or a `secretKeyRef` the kubelet resolves when the pod starts."""
    if isinstance(value, str):
        return {"name": name, "value": value}
    ref: dict[str, Any] = {"name": value.name, "key": value.key}
    if value.optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def job_manifest(
    run: TrialRun,
    run_uid: str,
    trial: Trial,
    side: int,
    *,
    gpu_products: list[str] | None,
    node_name: str | None = None,
) -> dict[str, Any]:
    """The Job running side `side` of `trial`; `node_name` pins both sides of a pair to one GPU-sharing node."""
    this = trial.sides[side]
    labels = {
        **trial_labels(run.metadata.name, trial),
        SIDE_LABEL: "ab"[side],
        WORKLOAD_LABEL: label_value(this.workload),
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # A trial runs an image its requester chose: no API credential in it, and Pod Security's `restricted`
        # profile (no root, no privilege escalation, no capabilities, the runtime's seccomp profile). Its image
        # must run as a non-root user (docs/profiler.md).
        "automountServiceAccountToken": False,
        "securityContext": TRIAL_POD_SECURITY,
        "containers": [
            {
                "name": CONTAINER_NAME,
                "image": this.image,
                "command": list(this.command),
                "env": [env_var(k, v) for k, v in (*this.env, (ENV_TRIAL, trial.id))],
                "resources": {"limits": {GPU_RESOURCE: str(trial.gpu_count)}},
                "securityContext": TRIAL_CONTAINER_SECURITY,
            }
        ],
    }
    if gpu_products:
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": GPU_PRODUCT_LABEL, "operator": "In", "values": gpu_products}]}
                    ]
                }
            }
        }
    if node_name is not None:
        pod_spec["nodeSelector"] = {HOSTNAME_LABEL: node_name}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(run.metadata.name, trial, side),
            "namespace": run.metadata.namespace,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": f"{API_GROUP}/{API_VERSION}",
                    "kind": KIND,
                    "name": run.metadata.name,
                    "uid": run_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": run.spec.max_duration_seconds,
            "ttlSecondsAfterFinished": JOB_TTL_SECONDS_AFTER_FINISHED,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }
