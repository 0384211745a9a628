"""Every way a newcomer got a traceback: each ends as one `error:` line on stderr and a non-zero exit code.

Run as a subprocess through the real entry point, as a user runs `gpuadvisor`, so that what reaches the terminal
(including what a native library prints) is what is asserted.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy

from tests.cli.test_cli_smoke import gpuadvisor
from tests.support.net import wait_until

GAVEL_JSON = Path(__file__).resolve().parents[2] / "advisor" / "data" / "gavel" / "simulation_throughputs.json"


def assert_one_error_line(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """The command failed with `code` and said why on exactly one `error:` line naming every needle."""
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("✓")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.mark.parametrize(
    ("args", "variable"),
    [
        (("collector", "run", "--simulate", "1", "--once"), "GPUADVISOR_INTERVAL_SECONDS"),
        (("profiler", "run"), "GPUADVISOR_RECONCILE_INTERVAL_SECONDS"),
        (("advisor", "serve", "--no-kube"), "GPUADVISOR_WEIGHT_JCT"),
    ],
)
def test_a_bad_setting_names_the_variable_and_its_value(args: tuple[str, ...], variable: str) -> None:
    result = gpuadvisor(*args, env={variable: "abc"})
    assert_one_error_line(result, 2, f"invalid setting {variable}", "'abc'")


def test_a_usage_error_is_one_line_with_where_to_look() -> None:
    result = gpuadvisor("models", "list", "--kind", "nope")
    assert_one_error_line(result, 2, "--kind", "'nope'", "models list --help")
    assert "╭" not in result.stderr  # no usage box


def test_models_import_into_a_missing_directory(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "x.csv"
    result = gpuadvisor("models", "import", "gavel-colocations", str(GAVEL_JSON), "--out", str(out))
    assert_one_error_line(result, 2, "--out", str(out.parent), "does not exist")
    assert not out.parent.exists()


def test_models_predict_on_a_damaged_model_file(tmp_path: Path) -> None:
    csv = tmp_path / "coloc.csv"
    assert gpuadvisor("models", "import", "gavel-colocations", str(GAVEL_JSON), "--out", str(csv)).returncode == 0
    model = tmp_path / "model"
    trained = gpuadvisor("models", "train", "interference", "--from-csv", str(csv), "--out", str(model))
    assert trained.returncode == 0, trained.stderr
    booster = sorted(model.glob("*.txt"))[0]
    booster.write_text("tree\nthis is not a LightGBM model\n")
    result = gpuadvisor("models", "predict", "interference", "--model", str(model), "--from-csv", str(csv))
    assert_one_error_line(result, 2, str(model), "cannot load the interference model")
    assert "[LightGBM]" not in result.stdout + result.stderr
    (model / "meta.json").write_text("{")
    result = gpuadvisor("models", "predict", "interference", "--model", str(model), "--from-csv", str(csv))
    assert_one_error_line(result, 2, "meta.json")


def test_models_train_on_one_configuration_per_workload(tmp_path: Path) -> None:
    header = "workload,gpu_model,gpu_count,nodes,batch_size,throughput\n"
    rows = "".join(f"w{i},v100,1,1,32,{100 + i}\n" for i in range(30))
    csv = tmp_path / "one.csv"
    csv.write_text(header + rows)
    result = gpuadvisor("models", "train", "throughput", "--from-csv", str(csv), "--out", str(tmp_path / "m"))
    assert_one_error_line(result, 2, str(csv), "cannot train the throughput model", "two configurations")


def test_profile_show_plot_with_a_file_name_that_is_not_png(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    csv = tmp_path / "t.csv"
    csv.write_text("workload,gpu_model,gpu_count,nodes,batch_size,throughput\nw,v100,1,1,32,100\n")
    assert gpuadvisor("profile", "import", str(csv), "--kind", "throughputs", "--db", url).returncode == 0
    result = gpuadvisor("profile", "show", "w", "--plot", str(tmp_path / "x.txt"), "--db", url)
    assert_one_error_line(result, 2, "--plot", "x.txt", ".png")
    assert not (tmp_path / "x.txt").exists()


def test_db_upgrade_does_not_create_a_missing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    result = gpuadvisor("db", "upgrade", "--db", f"sqlite:///{missing}/x.db")
    assert_one_error_line(result, 2, str(missing), "does not exist")
    assert not missing.parent.exists()


def test_an_empty_db_option_is_refused_not_taken_for_the_default(tmp_path: Path) -> None:
    result = gpuadvisor("db", "upgrade", "--db", "", cwd=tmp_path)
    assert_one_error_line(result, 2, "--db is empty")
    assert not (tmp_path / "gpuadvisor.db").exists()


def test_an_unreachable_store_is_one_line_without_the_drivers_footer(tmp_path: Path) -> None:
    result = gpuadvisor("profile", "list", "--db", f"sqlite:///{tmp_path}")  # a directory, not a database file
    line = assert_one_error_line(result, 2, "unable to open database file")
    assert "Background on this error" not in line


def test_simulate_with_a_directory_for_a_file(tmp_path: Path) -> None:
    result = gpuadvisor(
        "simulate", "--cluster", str(tmp_path), "--trace", str(tmp_path), "--policies", "spread", "--mode", "jct"
    )
    assert_one_error_line(result, 2, str(tmp_path), "a directory, not a CSV file")


def test_models_import_of_a_file_of_another_kind(tmp_path: Path) -> None:
    result = gpuadvisor("models", "import", "sia", str(GAVEL_JSON), "--out", str(tmp_path / "x.csv"))
    assert_one_error_line(result, 2, str(GAVEL_JSON), "not a readable Sia placements CSV")


def test_a_bad_gavel_json_is_the_same_one_line_error_for_the_models_and_the_simulator(tmp_path: Path) -> None:
    """One reader of the format: `models import` and `simulate --throughputs` refuse the same file the same way."""
    bad = tmp_path / "throughputs.json"
    bad.write_text('{"v100": {"(\'A (batch size 32)\', 1)": {"null": 2.0, "(\'B\', 1)": "fast"}}}')
    imported = gpuadvisor("models", "import", "gavel-colocations", str(bad), "--out", str(tmp_path / "x.csv"))
    models_line = assert_one_error_line(imported, 2, str(bad), "expected [own, partner] steps/s")
    cluster = tmp_path / "cluster.csv"
    cluster.write_text("node,gpu_model,gpus\nn1,V100,4\n")
    trace = tmp_path / "trace.csv"
    trace.write_text("job_type,total_steps,scale_factor,arrival_time_s\nA (batch size 32),100,1,0\n")
    simulated = gpuadvisor(
        "simulate", "--cluster", str(cluster), "--trace", str(trace), "--throughputs", str(bad),
        "--policies", "spread", "--mode", "jct",
    )  # fmt: skip
    simulator_line = assert_one_error_line(simulated, 2, str(bad), "expected [own, partner] steps/s")
    assert simulator_line.split(str(bad), 1)[1] == models_line.split(str(bad), 1)[1]


def test_the_help_cites_no_design_file_and_no_history() -> None:
    for args in (("simulate", "--help"), ("profile", "import", "--help"), ("models", "--help")):
        result = gpuadvisor(*args, env={"COLUMNS": "200"})
        assert result.returncode == 0
        assert "DESIGN" not in result.stdout
        assert "2026-" not in result.stdout


@pytest.mark.postgres
def test_profile_import_when_the_store_goes_away_mid_import(postgres_url: str, tmp_path: Path) -> None:
    """The PostgreSQL server drops the import's connection while rows are being written (as a restart or failover
    does): one `error:` line, exit 3, and nothing half-imported."""
    admin = sqlalchemy.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text("DROP DATABASE IF EXISTS import_gone"))
        conn.execute(sqlalchemy.text("CREATE DATABASE import_gone"))
    url = postgres_url.rsplit("/", 1)[0] + "/import_gone"
    assert gpuadvisor("db", "upgrade", "--db", url).returncode == 0  # the import's own check then migrates nothing
    csv = tmp_path / "many.csv"
    csv.write_text(
        "workload,gpu_model,gpu_count,nodes,batch_size,throughput\n"
        + "".join(f"w{i % 50},v100,{1 + i % 8},1,{i},{100 + i}\n" for i in range(20_000))
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "advisor.cli", "profile", "import", str(csv), "--kind", "throughputs", "--db", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    writing = sqlalchemy.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = 'import_gone' AND query ILIKE '%INSERT INTO profiles%'"
    )
    kill = sqlalchemy.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'import_gone'")
    try:
        with admin.connect() as conn:
            assert wait_until(lambda: proc.poll() is not None or conn.execute(writing).scalar_one() > 0, 60)
            while proc.poll() is None:
                conn.execute(kill)
                time.sleep(0.2)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        admin.dispose()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert_one_error_line(result, 3, "lost the connection to the store")
    engine = sqlalchemy.create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(sqlalchemy.text("SELECT count(*) FROM profiles")).scalar_one() == 0
    engine.dispose()
