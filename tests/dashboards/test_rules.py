"""Every PromQL expression parses (promtool) and the recording/alert rules do what their unit tests say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.dashboards.grafana import RULES_FILE, RULES_TEST_FILE, load_dashboards, queries, substitute, variables
from tests.support.prometheus import promtool

pytestmark = pytest.mark.prometheus


def test_rules_file_passes_promtool_check() -> None:
    result = promtool("check", "rules", str(RULES_FILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_rules_unit_tests_pass() -> None:
    result = promtool("test", "rules", str(RULES_TEST_FILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_of_the_issue_exists_and_is_unit_tested() -> None:
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    alerts = {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}
    assert alerts == {
        "GpuadvisorGpuUnhealthy",
        "GpuadvisorCollectorDown",
        "GpuadvisorCollectorStale",
        "GpuadvisorCollectorNoGpuAccess",
        "GpuadvisorGpuAllocatedIdle",
        "GpuadvisorAdvisorLatencyHigh",
        "GpuadvisorAdvisorNoModel",
    }
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULES_TEST_FILE.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert tested == alerts


def _parse_all(exprs: dict[str, str], tmp_path: Path) -> None:
    """Write `exprs` as recording rules (record name = a sanitised label) so `promtool check rules` parses each one."""
    rules = [
        {"record": f"check:{re.sub(r'[^a-zA-Z0-9_]', '_', name)}_{i}", "expr": e}
        for i, (name, e) in enumerate(exprs.items())
    ]
    path = tmp_path / "dashboard-queries.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


@pytest.mark.parametrize("name", sorted(load_dashboards()))
def test_every_dashboard_query_parses(name: str, tmp_path: Path) -> None:
    dashboard = load_dashboards()[name]
    placeholders = {var["name"]: "x" for var in dashboard["templating"]["list"]}
    exprs = {q.label(): substitute(q.expr, placeholders) for q in queries(name, dashboard)}
    exprs |= {f"{name} / variable {v.name}": substitute(v.expr, placeholders) for v in variables(name, dashboard)}
    _parse_all(exprs, tmp_path)


def test_a_broken_query_is_caught(tmp_path: Path) -> None:
    """The parse check above can fail: promtool rejects a query with an unbalanced parenthesis."""
    with pytest.raises(AssertionError):
        _parse_all({"broken": "sum(rate(gpuadvisor_gpu_energy_joules_total[1m])"}, tmp_path)
