"""The Dockerfile builds in stages, ships only the packages, and runs as the non-root user the manifests expect."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
MANIFEST_UID = 65532


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    lines = [line.strip() for line in joined.splitlines()]
    return [
        (parts[0].upper(), parts[1] if len(parts) > 1 else "")
        for parts in (line.split(None, 1) for line in lines if line and not line.startswith("#"))
    ]


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[last_from:]


def test_multi_stage_build_copies_only_the_virtualenv_into_the_runtime_image() -> None:
    froms = [args for op, args in instructions() if op == "FROM"]
    assert len(froms) >= 2
    assert " AS " in froms[0].upper()
    copies = [args for op, args in final_stage() if op == "COPY"]
    assert copies
    assert all(c.startswith("--from=") for c in copies), copies


def test_runtime_user_is_the_non_root_uid_of_the_manifests() -> None:
    (user,) = [args for op, args in final_stage() if op == "USER"]
    uid, _, gid = user.partition(":")
    assert int(uid) == MANIFEST_UID
    assert int(gid) == MANIFEST_UID
    collector_daemonset = ROOT / "deploy" / "collector" / "daemonset.yaml"
    texts = {p: p.read_text() for p in (ROOT / "deploy").rglob("*.yaml")}
    deploy_text = "\n".join(text for p, text in texts.items() if p != collector_daemonset)
    assert f"runAsUser: {MANIFEST_UID}" in deploy_text
    assert re.findall(r"runAsUser: (\d+)", deploy_text) == [str(MANIFEST_UID)] * len(
        re.findall(r"runAsUser:", deploy_text)
    )
    # the collector's pod as the image's user, its container as root for the kubelet's root-only socket
    assert re.findall(r"runAsUser: (\d+)", texts[collector_daemonset]) == [str(MANIFEST_UID), "0"]


def test_every_package_of_the_distribution_is_copied_and_the_entrypoint_is_the_cli() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    copied = {args.split()[0] for op, args in instructions() if op == "COPY" and not args.startswith("--from")}
    for package in packages:
        assert package in copied, f"Dockerfile does not copy {package}/"
    dockerignore = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if not line.startswith("#")]
    assert dockerignore[0] == "*", ".dockerignore must start by excluding everything"
    for package in packages:
        assert f"!{package}/" in dockerignore
    (entrypoint,) = [args for op, args in final_stage() if op == "ENTRYPOINT"]
    assert entrypoint == '["gpuadvisor"]'
    assert project["project"]["scripts"]["gpuadvisor"] == "advisor.cli.main:main"


def _stage(name: str) -> list[tuple[str, str]]:
    steps = instructions()
    start = next(
        i for i, (op, args) in enumerate(steps) if op == "FROM" and args.upper().endswith(f" AS {name.upper()}")
    )
    end = next((i for i in range(start + 1, len(steps)) if steps[i][0] == "FROM"), len(steps))
    return steps[start:end]


def test_the_reference_workload_image_is_a_stage_of_its_own() -> None:
    """`gpuadvisor-workloads`, the image the profiler's default reference partners run, is built from the same
    Dockerfile (`--target workloads`): PyTorch from the `workloads` extra and the reference training loops, as the
    non-root user; the default build still ends with the gpuadvisor image."""
    from profiler.settings import ProfilerSettings
    from profiler.spec import reference_partners

    image = ProfilerSettings.model_fields["reference_image"].default
    assert f"--target workloads -t REGISTRY/{image}:" in DOCKERFILE
    stage = _stage("workloads")
    runs = " ".join(args for op, args in stage if op == "RUN")
    assert "'.[workloads]'" in runs
    assert "workloads" in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {args.split()[0] for op, args in stage if op == "COPY"} >= {"profiler"}
    (user,) = [args for op, args in stage if op == "USER"]
    assert user == f"{MANIFEST_UID}:{MANIFEST_UID}"
    command = reference_partners(image)[0].command
    assert command[:3] == ["python", "-m", "profiler.workloads"]  # what the image's python runs
    assert final_stage()[0][1] == "python:3.11-slim"
