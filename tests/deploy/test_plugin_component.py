"""deploy/plugin/: the second scheduler as gpuadvisor-scheduler with the GPUAdvisor plugin instead of the extender,
rendered over the base as docs/install.md shows it."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy.test_kustomize import DEPLOY, KUBERNETES_VERSIONS, _render_overlay, find, pod_spec

OVERLAY = "resources: [{base}]\ncomponents: [{base}/plugin]\n"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[Obj]:
    return _render_overlay(tmp_path_factory.mktemp("plugin-overlay"), OVERLAY)


def scheduler_config(rendered: list[Obj]) -> Obj:
    (text,) = find(rendered, "ConfigMap", "gpuadvisor-scheduler-config")["data"].values()
    config: Obj = yaml.safe_load(text)
    return config


def test_the_second_scheduler_runs_the_plugin_build_with_the_plugin_profile(rendered: list[Obj]) -> None:
    (container,) = pod_spec(find(rendered, "Deployment", "gpuadvisor-scheduler"))["containers"]
    assert container["image"] == "gpuadvisor/gpuadvisor-scheduler:0.1.0"
    assert container["command"][0] == "/usr/local/bin/gpuadvisor-scheduler"
    config = scheduler_config(rendered)
    assert "extenders" not in config
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == "gpuadvisor-scheduler"
    for point in ("preFilter", "filter", "preScore", "score", "reserve"):
        assert [p["name"] for p in profile["plugins"][point]["enabled"]] == ["GPUAdvisor"], point
    (args,) = [c["args"] for c in profile["pluginConfig"] if c["name"] == "GPUAdvisor"]
    assert args["advisorURL"] == "http://gpuadvisor-advisor.gpuadvisor.svc:8080"
    assert args["filter"] is False  # preFilter/filter idle until an overlay turns the arg on (docs/install.md)


def test_the_plugin_profile_ignores_the_resources_the_extender_profile_ignores(rendered: list[Obj]) -> None:
    """The extender's `ignoredByScheduler: true` kept NodeResourcesFit from failing every node on a resource no node
    advertises; without the extender the profile must say so to NodeResourcesFit itself."""
    extender_config = yaml.safe_load((DEPLOY / "scheduler" / "scheduler-config.yaml").read_text())
    (extender,) = extender_config["extenders"]
    ignored = [r["name"] for r in extender["managedResources"] if r["ignoredByScheduler"]]
    (profile,) = scheduler_config(rendered)["profiles"]
    (fit,) = [c["args"] for c in profile["pluginConfig"] if c["name"] == "NodeResourcesFit"]
    assert fit["ignoredResources"] == ignored
    (base_profile,) = extender_config["profiles"]
    (base_fit,) = [c["args"] for c in base_profile["pluginConfig"] if c["name"] == "NodeResourcesFit"]
    assert fit["scoringStrategy"] == base_fit["scoringStrategy"]


def test_every_object_validates(rendered: list[Obj]) -> None:
    for obj in rendered:
        if obj["kind"] in {"ServiceMonitor", "PrometheusRule"} or obj["apiVersion"].startswith("cert-manager.io/"):
            continue
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
