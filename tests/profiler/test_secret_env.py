"""A trial's env from Secrets by reference (issue 40): `valueFrom.secretKeyRef` in a TrialRun goes into the trial
Job as a reference the kubelet resolves, so an API key never sits in the TrialRun the advisor stores and shows; the
local runner, which cannot read a Secret, takes the value from its own environment or says exactly what is missing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from advisor.api.routes.trialruns import redacted_env
from advisor.cli.main import app
from profiler.crd import crd_manifest
from profiler.local import UnresolvedSecretError, local_env
from profiler.manifests import job_manifest
from profiler.spec import SpecError, parse_trialrun
from profiler.trials import expand
from tests.profiler.specs import trialrun

SECRET_ENV = [
    {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}},
    {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token", "optional": True}}},
    {"name": "NCCL_DEBUG", "value": "WARN"},
]


def _container_env(doc: dict[str, Any]) -> list[dict[str, Any]]:
    run = parse_trialrun(doc)
    trial = expand(run.spec)[0]
    job = job_manifest(run, "uid-1", trial, 0, gpu_products=None)
    env: list[dict[str, Any]] = job["spec"]["template"]["spec"]["containers"][0]["env"]
    return env


def test_a_secret_reference_becomes_the_jobs_secret_key_ref_and_no_value() -> None:
    env = {e["name"]: e for e in _container_env(trialrun(env=SECRET_ENV))}
    assert env["WANDB_API_KEY"] == {
        "name": "WANDB_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}},
    }
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is True
    assert env["NCCL_DEBUG"] == {"name": "NCCL_DEBUG", "value": "WARN"}


def test_a_partners_secret_reference_reaches_its_job_too() -> None:
    partner = {"workload": "lstm", "command": ["python", "lstm.py"], "env": SECRET_ENV[:1]}
    run = parse_trialrun(trialrun(colocateWith=[partner]))
    pair = next(t for t in expand(run.spec) if len(t.sides) == 2)
    job = job_manifest(run, "uid-1", pair, 1, gpu_products=None)
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}} in env


def test_the_stored_spec_keeps_the_reference_and_redaction_leaves_it_readable() -> None:
    spec = parse_trialrun(trialrun(env=SECRET_ENV)).to_manifest()["spec"]
    assert spec["env"][0]["valueFrom"] == {"secretKeyRef": {"name": "wandb", "key": "api-key", "optional": False}}
    shown = redacted_env(spec)
    assert shown["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "wandb"
    assert shown["env"][2]["value"] == "***"


def test_the_crd_schema_accepts_a_secret_reference() -> None:
    import jsonschema

    schema = crd_manifest(600)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert list(jsonschema.Draft7Validator(schema).iter_errors(trialrun(env=SECRET_ENV)["spec"])) == []


def test_a_value_and_a_reference_in_one_variable_are_refused_naming_it() -> None:
    both = [{"name": "KEY", "value": "literal", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    with pytest.raises(SpecError) as raised:
        parse_trialrun(trialrun(env=both))
    assert str(raised.value) == "spec.env[0]: give value or valueFrom, not both"


def _side(doc: dict[str, Any]) -> Any:
    return expand(parse_trialrun(doc).spec)[0].sides[0]


def test_the_local_runner_takes_a_secret_variables_value_from_its_own_environment() -> None:
    side = _side(trialrun(env=SECRET_ENV))
    env = local_env(side, {"WANDB_API_KEY": "from-my-shell"})
    assert env["WANDB_API_KEY"] == "from-my-shell"
    assert "HF_TOKEN" not in env  # optional, and not in the environment: left unset, as the kubelet would
    assert env["NCCL_DEBUG"] == "WARN"


def test_the_local_runner_refuses_a_required_secret_it_cannot_read() -> None:
    with pytest.raises(UnresolvedSecretError, match=r"env WANDB_API_KEY comes from Secret 'wandb' key 'api-key'"):
        local_env(_side(trialrun(env=SECRET_ENV)), {})


def test_profile_request_local_with_an_unreadable_secret_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    doc = trialrun(env=SECRET_ENV[:1], colocateWith=[], command=[sys.executable, "-c", "pass"])
    doc["spec"]["matrix"] = {"gpuCounts": [1]}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    env = {"GPUADVISOR_DB_URL": f"sqlite:///{tmp_path}/p.db", "WANDB_API_KEY": None}
    result = CliRunner().invoke(app, ["profile", "request", str(path), "--local"], env=env)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    assert "export WANDB_API_KEY" in lines[0]
