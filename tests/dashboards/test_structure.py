"""The dashboards import into Grafana as they are: valid layout, unique ids, the data source chosen by a variable."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.dashboards.grafana import iter_panels, load_dashboards, queries

DASHBOARDS = load_dashboards()
EXPECTED = {"cluster-overview", "node-detail", "namespaces-pods", "advisor"}
GRID_COLUMNS = 24


def test_the_four_dashboards_exist_with_unique_uids_and_titles() -> None:
    assert set(DASHBOARDS) == EXPECTED
    uids = [d["uid"] for d in DASHBOARDS.values()]
    titles = [d["title"] for d in DASHBOARDS.values()]
    assert len(set(uids)) == len(uids)
    assert len(set(titles)) == len(titles)
    assert all(len(uid) <= 40 for uid in uids)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_panel_ids_are_unique(name: str) -> None:
    ids = [panel["id"] for panel in iter_panels(DASHBOARDS[name])]
    assert len(ids) == len(set(ids)), f"duplicate panel ids in {name}: {ids}"


def _overlap(a: dict[str, int], b: dict[str, int]) -> bool:
    return (
        a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]
    )


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_panels_fit_the_grid_without_overlapping(name: str) -> None:
    panels = list(iter_panels(DASHBOARDS[name]))
    for panel in panels:
        pos = panel["gridPos"]
        assert min(pos["w"], pos["h"]) > 0, panel["title"]
        assert 0 <= pos["x"] <= pos["x"] + pos["w"] <= GRID_COLUMNS, f"{panel['title']} leaves the 24-column grid"
    for a, b in itertools.combinations(panels, 2):
        assert not _overlap(a["gridPos"], b["gridPos"]), f"{name}: {a['title']!r} overlaps {b['title']!r}"


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_query_uses_the_datasource_variable(name: str) -> None:
    dashboard = DASHBOARDS[name]
    (datasource,) = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert datasource["name"] == "datasource"
    assert datasource["query"] == "prometheus"
    expected = {"type": "prometheus", "uid": "${datasource}"}
    users: list[dict[str, Any]] = [p for p in iter_panels(dashboard) if p["type"] != "row"]
    users += [v for v in dashboard["templating"]["list"] if v["type"] == "query"]
    for item in users:
        assert item["datasource"] == expected, item.get("title", item.get("name"))
        for target in item.get("targets", []):
            assert target["datasource"] == expected, f"{item['title']} / {target['refId']}"


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_panel_has_a_title_a_description_and_queries(name: str) -> None:
    for panel in iter_panels(DASHBOARDS[name]):
        assert panel["title"].strip()
        if panel["type"] == "row":
            continue
        assert panel.get("description", "").strip(), f"{panel['title']} has no description"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert ref_ids, panel["title"]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
    assert queries(name, DASHBOARDS[name])


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboards_are_portable(name: str) -> None:
    """No instance-specific ids: the JSON imports into any Grafana (no `__inputs`, no numeric dashboard id)."""
    dashboard = DASHBOARDS[name]
    assert "__inputs" not in dashboard
    assert dashboard.get("id") is None
    assert "gpuadvisor" in dashboard["tags"]
