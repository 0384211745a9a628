"""The loaders read every supported format and reject bad files naming the row and column."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from advisor.datasets import load_gavel
from advisor.sim.loaders import load_cluster, load_throughputs, load_trace, parse_nvlink_groups
from advisor.sim.model import Job, Pod
from profiler.csv_formats import InputDataError
from tests.advisor.sim.conftest import write


def test_cluster_file_with_nvlink_groups(tmp_path: Path) -> None:
    path = write(tmp_path / "c.csv", "node,gpu_model,gpus,links\nn1,V100,8,0-3/4-7\nn2,K80,4,")
    cluster = load_cluster(path)
    assert [n.name for n in cluster.nodes] == ["n1", "n2"]
    assert cluster.nodes[0].nvlink_groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert cluster.nodes[1].nvlink_groups == ()
    assert cluster.total_gpus == 12


def test_openb_node_list(tmp_path: Path) -> None:
    path = write(
        tmp_path / "n.csv", "sn,cpu_milli,memory_mib,gpu,model\nx-0,64000,262144,2,P100\nx-1,96000,786432,8,G2"
    )
    cluster = load_cluster(path)
    assert cluster.nodes[1].cpu_milli == 96000
    assert cluster.nodes[1].gpu_model == "G2"
    assert cluster.total_gpus == 10


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("node,gpu_model,gpus\nn1,V100,two", "row 2, column 'gpus': expected a number, got 'two'"),
        ("node,gpu_model,gpus\nn1,V100,4\nn2,V100,-1", "row 3, column 'gpus': must not be negative"),
        ("node,gpu_model,gpus\nn1,V100,4\nn1,V100,4", "row 3: node 'n1' listed twice"),
        ("node,gpu_model,gpus,links\nn1,V100,4,0-5", "row 2, column 'links'"),
        ("node,gpu_model,gpus\nn1,V100,4\n\nn2,V100,1.5", "row 4, column 'gpus': expected a whole number"),
        ("node,gpu_model,gpus\nn1,V100,4,extra", "row 2: 4 cells, the header names 3 column(s)"),
        ("node,gpu_model,node\nn1,V100,4", "column 'node' appears twice in the header"),
        ("host,model\nn1,V100", "unrecognised columns"),
        ("node,gpu_model,gpus\nn1,V100,0", "no GPU"),
    ],
)
def test_bad_cluster_files(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(InputDataError, match=re.escape(needle)):
        load_cluster(write(tmp_path / "c.csv", text))


def test_nvlink_group_syntax() -> None:
    assert parse_nvlink_groups("0,1/2,3", 4) == ((0, 1), (2, 3))
    with pytest.raises(ValueError, match="listed twice"):
        parse_nvlink_groups("0-1/1-2", 4)


def test_openb_pods(tmp_path: Path) -> None:
    path = write(
        tmp_path / "p.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        "p0,12000,16384,1,460,,LS,Running,0,100,0\n"
        "p1,4000,8192,0,0,,BE,Running,5,50,5\n"
        "p2,64000,8192,8,1000,,LS,Running,7,70,7",
    )
    pods = load_trace(path)
    assert pods == [
        Pod("p0", 1, 460, 12000, 16384),
        Pod("p1", 0, 0, 4000, 8192),
        Pod("p2", 8, 1000, 64000, 8192),
    ]
    assert [p.gpu_demand for p in pods if isinstance(p, Pod)] == [0.46, 0.0, 8.0]


def test_openb_pods_reject_a_multi_gpu_share(tmp_path: Path) -> None:
    path = write(tmp_path / "p.csv", "name,num_gpu,gpu_milli\np0,1,500\np1,2,500")
    with pytest.raises(InputDataError, match="row 3, column 'gpu_milli'"):
        load_trace(path)


def test_philly_jobs_start_at_zero_in_arrival_order(tmp_path: Path) -> None:
    path = write(
        tmp_path / "philly.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-09 07:01:55,66.0,1,66.0,a\n2017-10-09 06:13:03,2951.0,8,23608.0,b",
    )
    jobs = load_trace(path)
    assert [(j.arrival_s, j.num_gpus, j.work) for j in jobs if isinstance(j, Job)] == [
        (0.0, 8, 2951.0),
        (2932.0, 1, 66.0),
    ]


def test_philly_bad_timestamp_names_the_row(tmp_path: Path) -> None:
    path = write(tmp_path / "philly.csv", "timestamp,duration,num_gpus\n2017-10-09 07:01:55,1,1\nyesterday,1,1")
    with pytest.raises(InputDataError, match="row 3, column 'timestamp'"):
        load_trace(path)


def test_gavel_trace(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.csv",
        "trace,job_idx,job_type,total_steps,scale_factor,arrival_time_s\n"
        "vc,0,A (batch size 32),1000,1,50\nvc,1,B (batch size 64),500,4,0",
    )
    jobs = load_trace(path)
    assert [(j.job_id, j.job_type, j.num_gpus, j.work, j.arrival_s) for j in jobs if isinstance(j, Job)] == [
        ("vc/1", "B (batch size 64)", 4, 500.0, 0.0),
        ("vc/0", "A (batch size 32)", 1, 1000.0, 50.0),
    ]


def test_executions_csv_work_is_run_time(tmp_path: Path) -> None:
    path = write(
        tmp_path / "e.csv",
        "job_id,workload,user,gpu_model,gpu_count,submit_time,start_time,end_time\n"
        "j1,bert,u,V100,2,100,110,410\nj2,bert,u,V100,1,50,60,70",
    )
    jobs = load_trace(path)
    assert [(j.job_id, j.arrival_s, j.work, j.num_gpus) for j in jobs if isinstance(j, Job)] == [
        ("j2", 0.0, 10.0, 1),
        ("j1", 50.0, 300.0, 2),
    ]


def test_unknown_trace_format_lists_the_formats(tmp_path: Path) -> None:
    with pytest.raises(InputDataError, match="Gavel trace"):
        load_trace(write(tmp_path / "t.csv", "a,b\n1,2"))


def test_gavel_throughputs(gavel_json: Path) -> None:
    t = load_throughputs(gavel_json)
    assert t.isolated[("v100", "A (batch size 32)", 1, True)] == 10.0
    assert t.colocated[("v100", "A (batch size 32)", "B (batch size 64)")] == (5.0, 8.0)
    assert ("k80", "A (batch size 32)", "B (batch size 64)") not in t.colocated  # [0, 0] = cannot share


def test_colocations_csv(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.csv",
        "gpu_model,workload_a,workload_b,solo_throughput_a,solo_throughput_b,coloc_throughput_a,coloc_throughput_b\n"
        "V100,a,b,10,20,5,16",
    )
    t = load_throughputs(path)
    assert t.isolated[("v100", "b", 1, True)] == 20.0
    assert t.colocated[("v100", "b", "a")] == (16.0, 5.0)


def test_bad_throughputs_json(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"v100": {"not a tuple": {"null": 1.0}}}')
    with pytest.raises(InputDataError, match="not a \\(job type, scale factor\\) tuple"):
        load_throughputs(path)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"v100": {"(\'A\', 1)": {"null": 1.0, "(\'B\', 1)": 3}}}', "expected [own, partner] steps/s"),
        ('{"v100": {"(\'A\', 1)": {}}}', "no isolated throughput"),
        ('{"v100": {"A": {"null": 1.0}}}', "is not a (job type, scale factor) tuple"),
        ('{"v100": {"(\'A\', 1)": {"null": "fast"}}}', "expected a non-negative number"),
        ("[1, 2]", "expected an object keyed by GPU type"),
    ],
    ids=["pair not a list", "no null entry", "key not a tuple", "steps not a number", "not an object"],
)
def test_gavel_json_has_one_reader_with_one_error(tmp_path: Path, text: str, needle: str) -> None:
    """The models' frames and the simulator's tables read Gavel's JSON through the same checks and error class."""
    path = write(tmp_path / "t.json", text)
    with pytest.raises(InputDataError, match=re.escape(needle)) as by_models:
        load_gavel(path)
    with pytest.raises(InputDataError, match=re.escape(needle)) as by_simulator:
        load_throughputs(path)
    assert str(by_models.value) == str(by_simulator.value)
