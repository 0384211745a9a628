"""`gpuadvisor advisor task-mix`: the packing settings computed from a node list and a pod history, in the form the
service reads them."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli.main import app
from advisor.settings import AdvisorSettings

runner = CliRunner()

NODES = "sn,cpu_milli,memory_mib,gpu,model\nt4-0,64000,262144,2,T4\ng2-0,96000,393216,6,G2\n"
HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
)


def _files(tmp_path: Path, pods: str) -> list[str]:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(HEADER + pods)
    return ["--cluster", str(tmp_path / "nodes.csv"), "--trace", str(tmp_path / "pods.csv")]


def _printed(output: str) -> dict[str, str]:
    """KEY='JSON' lines as the shell would read them."""
    return dict(shlex.split(line)[0].split("=", 1) for line in output.splitlines() if line.startswith("GPUADVISOR_"))


def test_per_model_mixes_weigh_constrained_pods_by_the_scarcity_of_their_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pods = (
        "any,4000,8192,1,1000,,LS,Running,0,10,0\n"
        "t4-only,4000,8192,1,1000,T4,LS,Running,1,10,1\n"
        "share,2000,4096,1,500,,LS,Running,2,10,2\n"
    )
    result = runner.invoke(app, ["advisor", "task-mix", *_files(tmp_path, pods)])
    assert result.exit_code == 0, result.output
    printed = _printed(result.output)
    assert json.loads(printed["GPUADVISOR_TASK_MIX"]) == [[1, 500, 1 / 3, 2000, 4096], [1, 1000, 2 / 3, 4000, 8192]]
    # 8 GPUs in the cluster, 2 of them T4: the T4-only pod weighs 4 on the T4 nodes' view and cannot use the G2 ones.
    assert json.loads(printed["GPUADVISOR_MODEL_TASK_MIX"]) == {
        "G2": [[1, 500, 1 / 3, 2000, 4096], [1, 1000, 1 / 3, 4000, 8192], [1, 1000, 4 / 3, 1e12, 8192]],
        "T4": [[1, 500, 1 / 3, 2000, 4096], [1, 1000, 5 / 3, 4000, 8192]],
    }
    for name, value in printed.items():
        monkeypatch.setenv(name, value)
    settings = AdvisorSettings()
    assert settings.task_mix[1][:3] == (1, 1000, 2 / 3)
    assert sorted(settings.model_task_mix) == ["G2", "T4"]


def test_without_model_constraints_only_the_task_mix_is_printed(tmp_path: Path) -> None:
    pods = "a,4000,8192,2,1000,,LS,Running,0,10,0\nb,4000,8192,1,250,,LS,Running,1,10,1\n"
    result = runner.invoke(app, ["advisor", "task-mix", *_files(tmp_path, pods), "--gpu-only"])
    assert result.exit_code == 0, result.output
    assert _printed(result.output) == {"GPUADVISOR_TASK_MIX": "[[1,250,0.5],[2,1000,0.5]]"}


def test_a_pod_list_without_gpu_pods_is_refused_in_one_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["advisor", "task-mix", *_files(tmp_path, "cpu,4000,8192,0,0,,LS,Running,0,10,0\n")])
    assert result.exit_code == 2
    assert result.output.startswith("error: --trace:")
    assert "no pod that requests a GPU" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_coverage_keeps_room_only_for_the_most_popular_specs(tmp_path: Path) -> None:
    """Three pods of one spec, one of another: 0.75 of the pods are covered by the first spec alone."""
    pods = (
        "a,4000,8192,1,1000,,LS,Running,0,10,0\n"
        "b,4000,8192,1,1000,,LS,Running,1,10,1\n"
        "c,4000,8192,1,1000,,LS,Running,2,10,2\n"
        "d,2000,4096,1,500,,LS,Running,3,10,3\n"
    )
    every = runner.invoke(app, ["advisor", "task-mix", *_files(tmp_path, pods)])
    popular = runner.invoke(app, ["advisor", "task-mix", *_files(tmp_path, pods), "--coverage", "0.75"])
    assert every.exit_code == 0, every.output
    assert popular.exit_code == 0, popular.output
    assert len(json.loads(_printed(every.output)["GPUADVISOR_TASK_MIX"])) == 2
    assert json.loads(_printed(popular.output)["GPUADVISOR_TASK_MIX"]) == [[1, 1000, 1.0, 4000, 8192]]


@pytest.mark.parametrize("value", ["0", "1.5", "-0.1"])
def test_a_coverage_outside_0_to_1_is_a_usage_error(tmp_path: Path, value: str) -> None:
    result = runner.invoke(
        app, ["advisor", "task-mix", *_files(tmp_path, "a,4000,8192,1,1000,,LS,Running,0,10,0\n"), "--coverage", value]
    )
    assert result.exit_code == 2
    assert "--coverage" in result.output
