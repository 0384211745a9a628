"""bench/scheduler_throughput.py's rounds: how several rounds become the figures of the JSON line, and the arguments
it refuses. The bench itself needs the control plane and minutes; these parts are plain functions."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "scheduler_throughput.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scheduler_throughput", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_round(vanilla: float, plugin: float, *, scheduler_ms: float, neutral: int = 0) -> dict[str, Any]:
    return {
        "vanilla_pods_per_second": vanilla,
        "vanilla_cpu_ms_per_pod": {"scheduler": scheduler_ms, "advisor": 1.0},
        "plugin_pods_per_second": plugin,
        "plugin_cpu_ms_per_pod": {"scheduler": scheduler_ms + 1, "advisor": 3.0},
        "plugin_neutral_cycles": neutral,
        "plugin_cycle_ms": {"Score": 4.0},
        "load_average_1m": 1.0,
    }


def test_rounds_give_medians_and_the_median_of_each_rounds_ratio(bench: ModuleType) -> None:
    # The host's speed halves in round 2: the ratio is read within each round, never across.
    rounds = [
        one_round(100.0, 90.0, scheduler_ms=6.0),
        one_round(50.0, 45.0, scheduler_ms=12.0, neutral=3),
        one_round(120.0, 60.0, scheduler_ms=5.0),
    ]
    out = bench.summarise(rounds)
    assert out["vanilla_pods_per_second"] == 100.0
    assert out["plugin_pods_per_second"] == 60.0
    assert out["plugin_over_vanilla_rounds"] == [0.9, 0.9, 0.5]
    assert out["plugin_over_vanilla"] == 0.9  # the ratio of the medians would say 0.6
    assert out["vanilla_cpu_ms_per_pod"] == {"scheduler": 6.0, "advisor": 1.0}
    assert out["plugin_cpu_ms_per_pod"] == {"scheduler": 7.0, "advisor": 3.0}
    assert out["plugin_neutral_cycles"] == 3  # one round scored neutrally is not hidden by the median
    assert "vanilla_over_vanilla" not in out


def test_one_round_keeps_its_figures(bench: ModuleType) -> None:
    figures = one_round(147.0, 114.7, scheduler_ms=5.95)
    out = bench.summarise([figures])
    assert out["vanilla_pods_per_second"] == 147.0
    assert out["plugin_pods_per_second"] == 114.7
    assert out["plugin_over_vanilla"] == round(114.7 / 147.0, 3)
    assert out["plugin_cycle_ms"] == {"Score": 4.0}


def test_each_round_is_listed_with_every_figure_of_each_kind(bench: ModuleType) -> None:
    rounds = [one_round(100.0, 90.0, scheduler_ms=6.0), one_round(50.0, 45.0, scheduler_ms=12.0)]
    for figures in rounds:
        figures["plugin_baseline_pods_per_second"] = 40.0
    table = bench.round_table(rounds, ["vanilla", "plugin", "plugin_baseline"])
    assert [row["order"] for row in table] == [
        ["vanilla", "plugin", "plugin_baseline"],
        ["plugin_baseline", "plugin", "vanilla"],
    ]
    assert table[1]["vanilla"] == {"pods_per_second": 50.0, "cpu_ms_per_pod": {"scheduler": 12.0, "advisor": 1.0}}
    assert table[1]["plugin"]["neutral_cycles"] == 0
    assert "baseline_pods_per_second" not in table[0]["plugin"]
    assert table[0]["plugin_baseline"] == {"pods_per_second": 40.0}


def test_rounds_alternate_their_order(bench: ModuleType) -> None:
    kinds = ["vanilla", "plugin", "extender"]
    assert bench.round_order(kinds, 0) == kinds
    assert bench.round_order(kinds, 1) == ["extender", "plugin", "vanilla"]
    assert bench.round_order(kinds, 2) == kinds


def test_prometheus_text_is_summed_by_the_labels_asked(bench: ModuleType) -> None:
    text = "\n".join(
        [
            "# HELP apiserver_request_total Counter",
            'apiserver_request_total{code="201",resource="pods",subresource="binding",verb="POST"} 7',
            'apiserver_request_total{code="409",resource="pods",subresource="binding",verb="POST"} 1',
            'apiserver_request_total{code="201",resource="events",subresource="",verb="POST"} 8',
            'apiserver_request_total_other{resource="pods",verb="GET"} 100',
        ]
    )
    found = bench.parse_metrics(text, "apiserver_request_total", "verb", "resource", "subresource")
    assert found == {"POST pods binding": 8.0, "POST events ": 8.0}
    assert bench.counter_delta({"a": 1.0, "b": 2.0}, {"a": 4.0, "b": 2.0, "c": 1.0}) == {"a": 3.0, "c": 1.0}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rounds", "0"], "--rounds must be at least 1, not 0"),
        (["--pods", "1"], "--pods must be at least 2, not 1"),
        (["--nodes", "0"], "--nodes must be at least 1, not 0"),
        (["--plugin-baseline", os.devnull], "is not an executable file"),
        (["--advisor-cpus", "one"], "is not a comma-separated list of CPU numbers"),
        (["--advisor-cpus", "4096"], "must name some of this process's CPUs"),
        (["--advisor-cpus", ",".join(map(str, sorted(os.sched_getaffinity(0))))], "leaves no CPU for the control"),
    ],
)
def test_bad_arguments_are_refused_with_one_error_line(
    bench: ModuleType, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    (last,) = [line for line in err.splitlines() if ": error: " in line]
    assert message in last
    assert "Traceback" not in err


def test_defaults_are_one_round(bench: ModuleType) -> None:
    args = bench.parse_args([])
    assert (args.rounds, args.nodes, args.pods, args.pprof) == (1, 500, 500, None)


def test_the_advisor_gets_its_cpus_and_everything_else_the_others(bench: ModuleType) -> None:
    assert bench.split_cpus(None, {0, 1}) is None
    assert bench.split_cpus("1", {0, 1}) == ({1}, {0})
    assert bench.split_cpus("2,3", {0, 1, 2, 3}) == ({2, 3}, {0, 1})


def test_pinned_sets_this_process_cpus_and_gives_them_back(bench: ModuleType) -> None:
    before = os.sched_getaffinity(0)
    one = {min(before)}
    with bench.pinned(one):
        assert os.sched_getaffinity(0) == one
    assert os.sched_getaffinity(0) == before
    with bench.pinned(None):
        assert os.sched_getaffinity(0) == before
