"""Read the Grafana dashboards the way Grafana does: panels, their PromQL, template variables and their substitution."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARDS_DIR = Path(__file__).resolve().parents[2] / "dashboards"
RULES_DIR = DASHBOARDS_DIR / "rules"
RULES_FILE = RULES_DIR / "gpuadvisor.rules.yaml"
RULES_TEST_FILE = RULES_DIR / "gpuadvisor.rules.test.yaml"

# What Grafana puts in for its built-in interval variables; long enough for rate() over a 1 s scrape interval.
BUILTIN_VARIABLES = {"__rate_interval": "15s", "__interval": "15s", "__range": "1m"}
LABEL_VALUES = re.compile(r"^label_values\((?P<expr>.+),\s*(?P<label>\w+)\)$", re.DOTALL)
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


@dataclass(frozen=True)
class Query:
    dashboard: str
    panel: str
    ref_id: str
    expr: str

    def label(self) -> str:
        return f"{self.dashboard} / {self.panel} / {self.ref_id}"


@dataclass(frozen=True)
class Variable:
    """A query variable: `label_values(expr, label)`; the values of `label` over the series of `expr`."""

    dashboard: str
    name: str
    expr: str
    label: str


def load_dashboards() -> dict[str, dict[str, Any]]:
    """File stem -> parsed dashboard JSON, for every dashboards/*.json."""
    return {path.stem: json.loads(path.read_text()) for path in sorted(DASHBOARDS_DIR.glob("*.json"))}


def iter_panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def queries(name: str, dashboard: Mapping[str, Any]) -> list[Query]:
    return [
        Query(name, panel["title"], target["refId"], target["expr"])
        for panel in iter_panels(dashboard)
        for target in panel.get("targets", [])
    ]


def variables(name: str, dashboard: Mapping[str, Any]) -> list[Variable]:
    found = []
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        match = LABEL_VALUES.match(query.strip())
        if match is None:
            raise ValueError(f"{name}: variable {var['name']}: only label_values(expr, label) queries are supported")
        found.append(Variable(name, var["name"], match["expr"], match["label"]))
    return found


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """`expr` with Grafana's `$var` / `${var}` replaced from `values` and the built-in interval variables."""

    def replace(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        if name in values:
            return values[name]
        if name in BUILTIN_VARIABLES:
            return BUILTIN_VARIABLES[name]
        raise KeyError(f"unknown dashboard variable ${name} in {expr!r}")

    return VARIABLE.sub(replace, expr)
