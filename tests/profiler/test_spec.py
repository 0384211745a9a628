"""TrialRun validation: the pydantic model and the CRD's OpenAPI schema reject the same documents."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from profiler.crd import crd_manifest, render
from profiler.settings import DEFAULT_MAX_TRIAL_DURATION_SECONDS
from profiler.spec import SpecError, parse_trialrun, with_reference_partners
from profiler.trials import TrialKind, expand
from tests.profiler.specs import VALID, trialrun

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "deploy" / "crds" / "trialruns.gpuadvisor.io.yaml"
CAP = 600

INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("unknown field", trialrun(gpus=4), "spec.gpus"),
    ("zero GPU count", trialrun(matrix={"gpuCounts": [0], "batchSizes": [64]}), "spec.matrix.gpuCounts[0]"),
    ("negative GPU count", trialrun(matrix={"gpuCounts": [1, -2]}), "spec.matrix.gpuCounts[1]"),
    ("empty GPU counts", trialrun(matrix={"gpuCounts": []}), "spec.matrix.gpuCounts"),
    ("empty matrix", trialrun(matrix={}), "spec.matrix.gpuCounts"),
    ("empty model list", trialrun(matrix={"gpuModels": [], "gpuCounts": [1]}), "spec.matrix.gpuModels"),
    ("unknown matrix axis", trialrun(matrix={"gpuCounts": [1], "nodes": [2]}), "spec.matrix.nodes"),
    ("duration over the cap", trialrun(maxDurationSeconds=CAP + 1), "spec.maxDurationSeconds"),
    ("zero duration", trialrun(maxDurationSeconds=0), "spec.maxDurationSeconds"),
    ("missing command", trialrun(command=None), "spec.command"),
    ("empty command", trialrun(command=[]), "spec.command"),
    ("missing image", trialrun(image=None), "spec.image"),
    ("partner without command", trialrun(colocateWith=[{"workload": "lstm"}]), "spec.colocateWith[0].command"),
    ("bad env name", trialrun(env=[{"name": "1 bad"}]), "spec.env[0].name"),
    ("string GPU count", trialrun(matrix={"gpuCounts": ["two"]}), "spec.matrix.gpuCounts[0]"),
    ("boolean GPU count", trialrun(matrix={"gpuCounts": [True]}), "spec.matrix.gpuCounts[0]"),
    (
        "env from a field, not a Secret",
        trialrun(env=[{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]),
        "spec.env[0].valueFrom.secretKeyRef",
    ),
    (
        "secret reference without a key",
        trialrun(env=[{"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "wandb"}}}]),
        "spec.env[0].valueFrom.secretKeyRef.key",
    ),
]


def _strict_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The CRD schema as the API server applies it with strict field validation: unknown fields are errors."""
    out = copy.deepcopy(schema)
    out.pop("x-kubernetes-preserve-unknown-fields", None)
    if "properties" in out and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
        out["properties"] = {k: _strict_json_schema(v) for k, v in out["properties"].items()}
    if "items" in out:
        out["items"] = _strict_json_schema(out["items"])
    return out


@pytest.fixture(scope="module")
def crd_validator() -> jsonschema.Draft7Validator:
    crd = crd_manifest(CAP)
    schema = _strict_json_schema(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    schema["properties"]["apiVersion"] = {"type": "string"}
    schema["properties"]["kind"] = {"type": "string"}
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft7Validator(schema)


def test_a_valid_trialrun_parses_with_camel_case_fields() -> None:
    run = parse_trialrun(VALID, max_duration_seconds=CAP)
    assert run.metadata.namespace == "ml"
    assert run.spec.matrix.gpu_counts == [1, 2]
    assert run.spec.colocate_with[0].batch_size == 20
    assert run.to_manifest()["spec"]["maxDurationSeconds"] == 300


@pytest.mark.parametrize(("case", "doc", "field"), INVALID, ids=[c[0] for c in INVALID])
def test_model_rejects_naming_the_field(case: str, doc: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as raised:
        parse_trialrun(doc, max_duration_seconds=CAP)
    assert raised.value.field == field, case
    assert str(raised.value).startswith(field + ": ")


@pytest.mark.parametrize(("case", "doc", "field"), INVALID, ids=[c[0] for c in INVALID])
def test_crd_schema_rejects_the_same_documents(
    case: str, doc: dict[str, Any], field: str, crd_validator: jsonschema.Draft7Validator
) -> None:
    assert list(crd_validator.iter_errors(doc)), f"the CRD schema accepts: {case}"


def test_crd_schema_accepts_the_valid_document(crd_validator: jsonschema.Draft7Validator) -> None:
    assert list(crd_validator.iter_errors(VALID)) == []


def test_default_duration_is_lowered_to_a_smaller_cap() -> None:
    run = parse_trialrun(trialrun(maxDurationSeconds=None), max_duration_seconds=60)
    assert run.spec.max_duration_seconds == 60


def test_wrong_kind_is_rejected() -> None:
    with pytest.raises(SpecError, match=r"^kind: "):
        parse_trialrun({**VALID, "kind": "Job"})


def test_committed_crd_is_the_generated_one() -> None:
    assert CRD_FILE.read_text() == render(DEFAULT_MAX_TRIAL_DURATION_SECONDS), (
        "regenerate with: python -m profiler.crd > deploy/crds/trialruns.gpuadvisor.io.yaml"
    )
    crd = yaml.safe_load(CRD_FILE.read_text())
    assert crd["metadata"]["name"] == "trialruns.gpuadvisor.io"


def test_a_trialrun_without_partners_is_co_run_with_the_reference_set() -> None:
    run = with_reference_partners(parse_trialrun(trialrun(colocateWith=None)), "gpuadvisor-workloads")
    assert [p.workload for p in run.spec.colocate_with] == ["cnn-bs64", "transformer-bs32", "recommender-bs256"]
    assert {p.image for p in run.spec.colocate_with} == {"gpuadvisor-workloads"}
    pairs = [t for t in expand(run.spec) if t.kind is TrialKind.PAIR]
    assert {t.sides[1].workload for t in pairs} == {"cnn-bs64", "transformer-bs32", "recommender-bs256"}


def test_named_or_explicitly_no_partners_are_kept() -> None:
    named = parse_trialrun(trialrun())
    assert with_reference_partners(named, "img") == named
    alone = parse_trialrun(trialrun(colocateWith=[]))
    assert with_reference_partners(alone, "img").spec.colocate_with == []


def test_a_reference_workload_is_not_its_own_partner() -> None:
    run = with_reference_partners(parse_trialrun(trialrun(colocateWith=None, workload="cnn-bs64")), None)
    assert [p.workload for p in run.spec.colocate_with] == ["transformer-bs32", "recommender-bs256"]
