"""The scheduler configurations in deploy/ point at routes the advisor really serves, with the agreed settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from advisor.api import create_app
from advisor.cluster.pods import GPU_RESOURCE_NAMES
from advisor.placement.mig import MIG_RESOURCE_NAMES
from advisor.settings import AdvisorSettings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def advisor_paths(tmp_path: Path) -> set[str]:
    app = create_app(AdvisorSettings(db_url=f"sqlite:///{tmp_path}/d.db", no_kube=True))
    return {path for path, methods in app.openapi()["paths"].items() if "post" in methods}


def test_kube_scheduler_profile_uses_the_advisor_as_extender(tmp_path: Path) -> None:
    config: dict[str, Any] = yaml.safe_load((DEPLOY / "scheduler" / "scheduler-config.yaml").read_text())
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert [p["schedulerName"] for p in config["profiles"]] == ["gpuadvisor-scheduler"]
    [extender] = config["extenders"]
    assert extender["nodeCacheCapable"] is True
    assert extender["ignorable"] is True
    # every GPU pod, whole or shared, in any notation the advisor reads (tests/deploy checks which ones are ignored)
    assert {r["name"] for r in extender["managedResources"]} == set(GPU_RESOURCE_NAMES) | set(MIG_RESOURCE_NAMES)
    assert extender["weight"] > 0
    assert extender["httpTimeout"].endswith("ms")
    prefix = extender["urlPrefix"].split(":8080", 1)[1]
    paths = advisor_paths(tmp_path)
    assert f"{prefix}/{extender['prioritizeVerb']}" in paths
    assert f"{prefix}/{extender['filterVerb']}" in paths


def test_volcano_extender_plugin_points_at_the_volcano_route(tmp_path: Path) -> None:
    config: dict[str, Any] = yaml.safe_load((DEPLOY / "volcano" / "volcano-scheduler.conf").read_text())
    plugins = [p for tier in config["tiers"] for p in tier["plugins"]]
    [extender] = [p for p in plugins if p["name"] == "extender"]
    args = extender["arguments"]
    prefix = args["extender.urlPrefix"].split(":8080", 1)[1]
    paths = advisor_paths(tmp_path)
    assert f"{prefix}/{args['extender.prioritizeVerb']}" in paths
    assert f"{prefix}/{args['extender.predicateVerb']}" in paths
    assert args["extender.ignorable"] is True
