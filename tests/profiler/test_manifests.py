"""Trial Job manifests against golden files and the Kubernetes schema; GPU model resolution; sharing-node choice.

Regenerate the golden files after an intended change with `GPUADVISOR_UPDATE_GOLDEN=1 pytest tests/profiler`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from profiler.manifests import job_manifest, job_name, resolve_gpu_products, sharing_nodes
from profiler.spec import parse_trialrun
from profiler.trials import TrialKind, expand
from tests.profiler.specs import VALID

GOLDEN = Path(__file__).parent / "golden"
UID = "7d0c5a52-3c1e-4be8-9a51-3b1f0a0c9e11"
PRODUCTS = ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-NVL", "Tesla-V100-SXM2-16GB"]


def _check_golden(name: str, manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, kubernetes_validate.utils.latest_version(), strict=True)
    path = GOLDEN / name
    rendered = yaml.safe_dump(manifest, sort_keys=True)
    if os.environ.get("GPUADVISOR_UPDATE_GOLDEN"):
        path.write_text(rendered)
    assert rendered == path.read_text(), f"{name} differs from the golden file"


def test_solo_trial_job_matches_golden() -> None:
    run = parse_trialrun(VALID)
    trial = expand(run.spec)[1]  # H100 × 2 GPUs
    products = resolve_gpu_products("H100", PRODUCTS)
    _check_golden("job_solo_h100x2.yaml", job_manifest(run, UID, trial, 0, gpu_products=products))


def test_pair_trial_jobs_match_golden() -> None:
    run = parse_trialrun(VALID)
    pair = next(t for t in expand(run.spec) if t.kind is TrialKind.PAIR)
    products = resolve_gpu_products(pair.gpu_model or "", PRODUCTS)
    for side, letter in ((0, "a"), (1, "b")):
        manifest = job_manifest(run, UID, pair, side, gpu_products=products, node_name="gpu-node-7")
        _check_golden(f"job_pair_{letter}.yaml", manifest)


def test_every_job_name_is_a_valid_label_value_even_for_long_run_names() -> None:
    run = parse_trialrun({**VALID, "metadata": {"name": "a" * 200, "namespace": "ml"}})
    names = {job_name(run.metadata.name, t, s) for t in expand(run.spec) for s in range(len(t.sides))}
    assert len(names) == sum(len(t.sides) for t in expand(run.spec))
    assert all(len(n) <= 63 and n[0].isalnum() and n[-1].isalnum() for n in names)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("H100", ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-NVL"]),
        ("a100", ["NVIDIA-A100-SXM4-80GB"]),
        ("NVIDIA-H100-NVL", ["NVIDIA-H100-NVL"]),
        ("H10", []),
        ("V100-SXM2", ["Tesla-V100-SXM2-16GB"]),
    ],
)
def test_gpu_models_resolve_to_gfd_product_labels(model: str, expected: list[str]) -> None:
    assert resolve_gpu_products(model, PRODUCTS) == expected


def test_pairs_only_go_to_gpu_sharing_nodes_of_the_model() -> None:
    def node(name: str, product: str, sharing: str | None) -> dict[str, Any]:
        labels = {"nvidia.com/gpu.product": product}
        if sharing:
            labels["nvidia.com/gpu.sharing-strategy"] = sharing
        return {"metadata": {"name": name, "labels": labels}}

    nodes = [
        node("n3", "NVIDIA-H100-NVL", "mps"),
        node("n1", "NVIDIA-H100-NVL", "none"),
        node("n2", "NVIDIA-A100-SXM4-80GB", "time-slicing"),
        node("n0", "NVIDIA-H100-NVL", "time-slicing"),
    ]
    assert sharing_nodes(nodes, ["NVIDIA-H100-NVL"]) == ["n0", "n3"]
    assert sharing_nodes(nodes, None) == ["n0", "n2", "n3"]
