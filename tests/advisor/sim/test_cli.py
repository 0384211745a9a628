"""`gpuadvisor simulate` as a user runs it: JSON on small files, exit 2 with one line on bad input, real data."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from advisor.cli.main import app
from tests.advisor.sim.conftest import write

DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"
runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["simulate", *args])
    return result.exit_code, result.output


@pytest.fixture
def small(tmp_path: Path) -> dict[str, Path]:
    return {
        "cluster": write(tmp_path / "cluster.csv", "node,gpu_model,gpus,links\nn1,V100,8,0-3/4-7\nn2,V100,8,0-3/4-7"),
        "pods": write(
            tmp_path / "pods.csv",
            "name,num_gpu,gpu_milli,cpu_milli\np1,1,1000,1000\np2,1,500,1000\np3,2,1000,2000\np4,0,0,4000",
        ),
        "jobs": write(
            tmp_path / "executions.csv",
            "job_id,workload,user,gpu_model,gpu_count,submit_time,start_time,"
            "end_time\nj1,bert,u,V100,4,0,0,100\nj2,bert,u,V100,8,10,10,60\nj3,bert,u,V100,2,20,20,40",
        ),
    }


def test_fragmentation_json_and_plot(small: dict[str, Path], tmp_path: Path) -> None:
    code, out = _run(
        "--cluster",
        str(small["cluster"]),
        "--trace",
        str(small["pods"]),
        "--mode",
        "fragmentation",
        "--policies",
        "random,spread,binpack,fgd,advisor",
        "--json",
        "--plot",
        str(tmp_path / "plots"),
    )
    assert code == 0, out
    report = json.loads(out)
    assert set(report["policies"]) == {"random", "spread", "binpack", "fgd", "advisor"}
    for result in report["policies"].values():
        assert 0.0 < result["gpu_allocation_ratio"] <= 1.0
        assert result["failed_pods"] >= 0
        assert len(result["curve"]["arrived_demand_ratio"]) == len(result["curve"]["gpu_allocation_ratio"])
    assert (tmp_path / "plots" / "allocation.png").stat().st_size > 1000
    # the advisor's configuration is reported: what an admin sets to score as it did (the packing profile)
    assert report["advisor"]["profile"] == "packing"
    assert report["advisor"]["weights"] == {"packing": 1.0, "affinity": 0.0, "interference": 0.0, "jct": 0.0}
    assert report["advisor"]["extender_span_points"] == 0.001
    assert report["advisor"]["extender_weight"] == 2.0
    assert report["advisor"]["wait_slack"] is None  # the packing profile never holds a pod back


def test_jct_table(small: dict[str, Path]) -> None:
    code, out = _run(
        "--cluster",
        str(small["cluster"]),
        "--trace",
        str(small["jobs"]),
        "--mode",
        "jct",
        "--policies",
        "spread,binpack,advisor",
    )
    assert code == 0, out
    assert "avg_jct_s" in out
    assert "heuristic predictors" in out
    assert "advisor: default profile (weights packing 1, affinity 1, interference 1, jct 1;" in out
    assert "waits for a faster GPU at slack 1.5)" in " ".join(out.split())  # however the console wraps it


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"--policies": "spread,nope"}, "'nope' is not a fragmentation policy"),
        ({"--policies": "oracle"}, "'oracle' is not a fragmentation policy"),
        ({"--cluster": "missing.csv"}, "no such file"),
        ({"--trace": "BAD"}, "row 3, column 'num_gpu'"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    small: dict[str, Path], tmp_path: Path, change: dict[str, str], needle: str
) -> None:
    bad = write(tmp_path / "bad.csv", "name,num_gpu,gpu_milli\np1,1,1000\np2,one,1000")
    args = {"--cluster": str(small["cluster"]), "--trace": str(small["pods"]), "--policies": "spread"}
    for key, value in change.items():
        args[key] = str(bad) if value == "BAD" else (str(tmp_path / value) if value.endswith(".csv") else value)
    code, out = _run(*[x for kv in args.items() for x in kv], "--mode", "fragmentation")
    assert code == 2
    assert needle in out
    assert "Traceback" not in out


def test_the_advisor_knows_job_lengths_from_a_history(small: dict[str, Path], tmp_path: Path) -> None:
    jct = ("--cluster", str(small["cluster"]), "--trace", str(small["jobs"]), "--mode", "jct", "--json")
    code, out = _run(*jct, "--policies", "spread,advisor")
    assert code == 0, out
    assert json.loads(out)["advisor_lengths"].startswith("the median of the trace's other jobs of each job's type")
    code, out = _run(*jct, "--policies", "spread,advisor", "--clairvoyant-lengths")
    assert code == 0, out
    assert json.loads(out)["advisor_lengths"].startswith("each job's own (clairvoyant")
    code, out = _run(*jct, "--policies", "spread,advisor", "--advisor-history", str(small["jobs"]))
    assert code == 0, out
    assert json.loads(out)["advisor_lengths"] == f"the median of each job's type over the 3 jobs of {small['jobs']}"
    assert "advisor_lengths" not in json.loads(_run(*jct, "--policies", "spread,binpack")[1])  # neither uses them
    code, out = _run(*jct, "--policies", "advisor", "--advisor-history", str(small["cluster"]))
    assert code == 2
    assert f"{small['cluster']}: unrecognised columns" in out
    assert "Traceback" not in out
    code, out = _run(*jct, "--policies", "advisor", "--advisor-history", str(small["jobs"]), "--clairvoyant-lengths")
    assert code == 2
    assert "--clairvoyant-lengths and --advisor-history exclude each other" in out


def test_oracle_without_throughputs_exits_2(small: dict[str, Path]) -> None:
    code, out = _run(
        "--cluster", str(small["cluster"]), "--trace", str(small["jobs"]), "--mode", "jct", "--policies", "oracle"
    )
    assert code == 2
    assert "needs --throughputs" in out


def test_job_type_missing_from_the_throughputs_exits_2(small: dict[str, Path], gavel_json: Path) -> None:
    code, out = _run(
        "--cluster",
        str(small["cluster"]),
        "--trace",
        str(small["jobs"]),
        "--mode",
        "jct",
        "--policies",
        "spread",
        "--throughputs",
        str(gavel_json),
    )
    assert code == 2
    assert "no throughput for job type 'bert'" in out


def test_real_openb_sample(tmp_path: Path) -> None:
    """A few hundred pods of the real openb trace on 60 of its nodes (skips outside CI when the data is absent)."""
    nodes_csv = DATA / "openb" / "openb_node_list_gpu_node.csv"
    pods_csv = DATA / "openb" / "openb_pod_list_default.csv"
    if not nodes_csv.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{nodes_csv} is missing under CI")
        pytest.skip(f"public data not found at {DATA}")
    pd.read_csv(nodes_csv).iloc[::20].to_csv(tmp_path / "nodes.csv", index=False)
    pd.read_csv(pods_csv).iloc[::20].to_csv(tmp_path / "pods.csv", index=False)
    code, out = _run(
        "--cluster",
        str(tmp_path / "nodes.csv"),
        "--trace",
        str(tmp_path / "pods.csv"),
        "--mode",
        "fragmentation",
        "--policies",
        "random,fgd,advisor",
        "--json",
    )
    assert code == 0, out
    policies = json.loads(out)["policies"]
    assert policies["fgd"]["gpu_allocation_ratio"] > policies["random"]["gpu_allocation_ratio"]
    assert policies["advisor"]["gpu_allocation_ratio"] > policies["random"]["gpu_allocation_ratio"]


def test_the_advisor_profile_can_be_chosen_and_a_bad_one_exits_2(small: dict[str, Path]) -> None:
    common = ["--cluster", str(small["cluster"]), "--trace", str(small["pods"]), "--mode", "fragmentation"]
    code, out = _run(*common, "--policies", "advisor", "--json", "--advisor-profile", "default")
    assert code == 0, out
    setup = json.loads(out)["advisor"]
    assert setup["profile"] == "default"
    assert setup["weights"] == {"packing": 1.0, "affinity": 1.0, "interference": 1.0, "jct": 1.0}
    assert setup["extender_span_points"] == 40.0
    code, out = _run(*common, "--policies", "advisor", "--advisor-profile", "tight")
    assert code == 2
    assert "'tight' is not one of" in out


def test_the_papers_policies_run_and_every_policy_honours_the_gpu_model_a_pod_accepts(tmp_path: Path) -> None:
    """Every pod accepts only T4 and the cluster has one T4 GPU beside four P100s: at 100 % of demand no policy can
    have allocated more than that one GPU (a fifth of the cluster)."""
    cluster = write(
        tmp_path / "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn1,32000,65536,1,T4\nn2,32000,65536,4,P100"
    )
    pods = write(
        tmp_path / "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np1,1000,1024,1,1000,T4\np2,1000,1024,1,500,T4",
    )
    names = "random,dotprod,gpuclustering,gpupacking,bestfit,fgd,spread,binpack,advisor"
    code, out = _run(
        "--cluster", str(cluster), "--trace", str(pods), "--mode", "fragmentation", "--policies", names, "--json"
    )  # fmt: skip
    assert code == 0, out
    report = json.loads(out)["policies"]
    assert set(report) == set(names.split(","))
    for name, result in report.items():
        assert 0.0 < result["gpu_allocation_ratio"] <= 0.2, name
        assert result["failed_pods"] > 0, name
