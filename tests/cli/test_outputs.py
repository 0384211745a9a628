"""What a newcomer reads: tables (units, whole columns, the nodes column, hints), plots (bounded size, where they
go), progress lines, and `simulate` refusing to merge a file's traces."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from advisor.cli.main import app

GAVEL = Path(__file__).resolve().parents[2] / "advisor" / "data" / "gavel"
runner = CliRunner()


def cli(*args: str) -> Result:
    return runner.invoke(app, list(args))


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels, from the PNG's IHDR chunk."""
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


@pytest.fixture(scope="module")
def gavel_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A store with Gavel's throughputs and co-locations imported, as docs/quickstart.md's reader would have it."""
    root = tmp_path_factory.mktemp("gavel")
    url = f"sqlite:///{root}/store.db"
    for source, kind in (("gavel-throughputs", "throughputs"), ("gavel-colocations", "colocations")):
        csv = root / f"{kind}.csv"
        assert (
            cli("models", "import", source, str(GAVEL / "simulation_throughputs.json"), "--out", str(csv)).exit_code
            == 0
        )
        imported = cli("profile", "import", str(csv), "--kind", kind, "--db", url)
        assert imported.exit_code == 0, imported.output
    return url, root


def test_import_reports_progress_and_where_to_look(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("workload,gpu_model,gpu_count,nodes,batch_size,throughput\nw,v100,1,1,32,100\nw,v100,2,1,64,190\n")
    result = cli("profile", "import", str(csv), "--kind", "throughputs", "--db", f"sqlite:///{tmp_path}/s.db")
    assert result.exit_code == 0
    assert "✓ stored 2 throughputs rows (" in result.output  # one line per stage without a terminal
    assert "gpuadvisor profile show WORKLOAD" in result.output


def test_profile_list_after_an_import_lists_the_imported_workloads(gavel_store: tuple[str, Path]) -> None:
    url, _ = gavel_store
    result = cli("profile", "list", "--db", url)
    assert result.exit_code == 0
    assert "no trial runs" in result.output
    assert "ResNet-50 (batch size 64)" in result.output
    assert "profile show WORKLOAD" in result.output


def test_profile_show_has_a_nodes_column_so_rows_differ(gavel_store: tuple[str, Path]) -> None:
    url, _ = gavel_store
    result = cli("profile", "show", "ResNet-50 (batch size 64)", "--db", url)
    assert result.exit_code == 0
    header = next(line for line in result.output.splitlines() if "samples/s" in line)
    assert "nodes" in header
    rows = [line for line in result.output.splitlines() if "import:" in line]
    assert len(rows) == len(set(rows))  # Gavel's consolidated and spread runs no longer look like duplicates


def test_profile_show_plot_has_a_bounded_size_and_goes_where_it_says(gavel_store: tuple[str, Path]) -> None:
    url, root = gavel_store
    plots = root / "plots"  # a directory that does not exist yet: created, as `simulate --plot` does
    result = cli("profile", "show", "ResNet-50 (batch size 64)", "--plot", str(plots), "--db", url)
    assert result.exit_code == 0, result.output
    written = plots / "ResNet-50_batch_size_64.png"
    assert f"plot written to {written}" in result.output
    width, height = png_size(written)
    assert width <= 1400
    assert height <= 600
    missing = root / "no" / "such" / "dir"
    refused = cli("profile", "show", "ResNet-50 (batch size 64)", "--plot", str(missing), "--db", url)
    assert refused.exit_code == 2
    assert f"directory {missing.parent} does not exist" in refused.output


def test_profile_show_finds_a_trial_run_in_any_namespace(tmp_path: Path) -> None:
    from profiler.store import db, repo

    url = f"sqlite:///{tmp_path}/s.db"
    engine = db.make_engine(url)
    db.upgrade(engine)
    with db.transaction(db.session_factory(engine)) as session:
        repo.save_trial_run(session=session, namespace="team-a", name="probe", workload="w", spec={}, phase="Running")
        repo.save_trial_run(session=session, namespace="team-b", name="twice", workload="w", spec={})
        repo.save_trial_run(session=session, namespace="team-c", name="twice", workload="w", spec={})
    engine.dispose()
    result = cli("profile", "show", "probe", "--db", url)
    assert result.exit_code == 0, result.output
    assert "trialrun team-a/probe (w): Running" in result.output
    ambiguous = cli("profile", "show", "twice", "--db", url)
    assert ambiguous.exit_code == 2
    assert "team-b, team-c" in ambiguous.output
    assert "--namespace" in ambiguous.output
    chosen = cli("profile", "show", "twice", "--namespace", "team-c", "--db", url)
    assert chosen.exit_code == 0
    assert "team-c/twice" in chosen.output


def test_models_predict_table_has_units_and_the_rows_inputs(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    assert cli("models", "import", "gavel-throughputs", str(GAVEL / "simulation_throughputs.json"), "--out", str(csv))
    assert cli("models", "train", "throughput", "--from-csv", str(csv), "--out", str(tmp_path / "m")).exit_code == 0
    result = cli("models", "predict", "throughput", "--model", str(tmp_path / "m"), "--from-csv", str(csv))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if "throughput" in line)
    assert "throughput (samples/s)" in header
    assert "workload" in header
    assert " row " not in header
    assert "e+" not in result.output  # no scientific notation
    assert any("ResNet-50 (batch size 64)" in line and "v100" in line for line in lines)


def test_models_list_keeps_a_long_artifact_path_whole(tmp_path: Path) -> None:
    csv = tmp_path / "c.csv"
    assert cli("models", "import", "gavel-colocations", str(GAVEL / "simulation_throughputs.json"), "--out", str(csv))
    out = tmp_path / ("a-rather-long-directory-name-for-artifacts-" * 2) / "interference-v1"
    out.parent.mkdir()
    url = f"sqlite:///{tmp_path}/s.db"
    trained = cli("models", "train", "interference", "--from-csv", str(csv), "--out", str(out), "--db", url)
    assert trained.exit_code == 0, trained.output
    result = cli("models", "list", "--db", url)
    assert str(out) in result.output.replace("\n", "") or str(out) in result.output
    assert "…" not in result.output


def _gavel_trace(tmp_path: Path) -> Path:
    """Two named traces of three jobs each, in Gavel's trace format."""
    lines = ["trace,job_idx,job_type,total_steps,scale_factor,arrival_time_s"]
    for trace in ("vc_a", "vc_b"):
        lines += [f"{trace},{i},ResNet-18 (batch size 32),{1000 * (i + 1)},1,{10 * i}" for i in range(3)]
    path = tmp_path / "traces.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_simulate_refuses_to_merge_a_files_traces_and_replays_the_one_named(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.csv"
    cluster.write_text("node,gpu_model,gpus\nn1,v100,2\n")
    trace = _gavel_trace(tmp_path)
    common = ("simulate", "--cluster", str(cluster), "--trace", str(trace), "--policies", "spread", "--mode", "jct")
    merged = cli(*common)
    assert merged.exit_code == 2
    assert "holds 2 traces (vc_a, vc_b)" in merged.output
    assert "--trace-name" in merged.output
    unknown = cli(*common, "--trace-name", "vc_c")
    assert unknown.exit_code == 2
    assert "vc_a, vc_b" in unknown.output
    one = cli(*common, "--trace-name", "vc_b", "--json")
    assert one.exit_code == 0, one.output
    report = json.loads(one.stdout)
    assert report["trace"] == {"file": str(trace), "entries": 3, "name": "vc_b"}
    assert report["policies"]["spread"]["jobs"] == 3


def test_simulate_shows_a_stage_per_policy_and_writes_titled_plots(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.csv"
    cluster.write_text("node,gpu_model,gpus\nn1,v100,4\nn2,v100,4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text("name,num_gpu,gpu_milli\n" + "".join(f"p{i},1,{250 * (1 + i % 4)}\n" for i in range(12)))
    plots = tmp_path / "plots"
    result = cli(
        "simulate", "--cluster", str(cluster), "--trace", str(pods), "--policies", "spread,binpack",
        "--mode", "fragmentation", "--plot", str(plots),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "✓ policy spread (1 of 2)" in result.output
    assert "✓ policy binpack (2 of 2)" in result.output
    width, _ = png_size(plots / "allocation.png")
    assert width >= 1000  # the allocation curves and, beside them, the difference from the first policy
