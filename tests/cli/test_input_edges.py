"""Inputs that gave a newcomer a traceback, a stored `Infinity` or a 93 GiB allocation (issue: "a newcomer's second
hour"): each is one `error:` line naming the field, with the documented exit code, and nothing is created or stored.

Run through the real entry point, as `tests/cli/test_errors.py` does.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import sqlalchemy

from tests.cli.test_cli_smoke import gpuadvisor
from tests.cli.test_errors import assert_one_error_line

THROUGHPUTS_HEADER = "workload,gpu_model,gpu_count,nodes,batch_size,throughput\n"

TRIALRUN = """\
apiVersion: gpuadvisor.io/v1alpha1
kind: TrialRun
metadata: {{name: edge}}
spec:
  workload: edge-bs8
  image: python:3.11
  command: [python, -c, pass]
  colocateWith: []
  matrix: {{gpuCounts: [{count}], batchSizes: [8]}}
"""


def _profiles(db: Path) -> int:
    engine = sqlalchemy.create_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            return int(conn.execute(sqlalchemy.text("SELECT count(*) FROM profiles")).scalar_one())
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("row", "column", "says"),
    [
        ("w,V100,1,1,64,nan", "throughput", "finite"),
        ("w,V100,1,1,64,inf", "throughput", "finite"),
        ("w,V100,1,1,64,1e400", "throughput", "finite"),
        ("w,V100,1,1,1e23,100", "batch_size", "at most 2147483647"),
        ("w,V100,1e23,1,64,100", "gpu_count", "at most 2147483647"),
    ],
)
def test_profile_import_refuses_non_finite_and_out_of_range_numbers(
    tmp_path: Path, row: str, column: str, says: str
) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text(THROUGHPUTS_HEADER + "w,V100,1,1,64,100\n" + row + "\n")
    db = tmp_path / "s.db"
    result = gpuadvisor("profile", "import", str(csv), "--kind", "throughputs", "--db", f"sqlite:///{db}")
    assert_one_error_line(result, 2, "row 3", f"column {column!r}", says)
    assert not db.exists()  # refused before the store is opened: nothing half-imported


def test_profile_import_of_a_utf16_csv_is_one_line(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_bytes((THROUGHPUTS_HEADER + "w,V100,1,1,64,100\n").encode("utf-16"))
    result = gpuadvisor("profile", "import", str(csv), "--kind", "throughputs", "--db", f"sqlite:///{tmp_path}/s.db")
    assert_one_error_line(result, 2, str(csv), "not UTF-8")


@pytest.mark.parametrize(
    "content",
    [TRIALRUN.format(count=1).encode("utf-16"), bytes(range(256)) * 4],
    ids=["utf16", "binary"],
)
def test_profile_request_of_a_file_that_is_not_text_is_one_line(tmp_path: Path, content: bytes) -> None:
    spec = tmp_path / "run.yaml"
    spec.write_bytes(content)
    result = gpuadvisor("profile", "request", str(spec), "--local", "--db", f"sqlite:///{tmp_path}/s.db")
    assert_one_error_line(result, 2, "invalid TrialRun", str(spec))


def test_a_trialrun_count_beyond_what_the_store_holds_names_the_field(tmp_path: Path) -> None:
    spec = tmp_path / "run.yaml"
    spec.write_text(TRIALRUN.format(count=10**23))
    result = gpuadvisor("profile", "request", str(spec), "--local", "--db", f"sqlite:///{tmp_path}/s.db")
    assert_one_error_line(result, 2, "spec.matrix.gpuCounts[0]", "2147483647")
    assert not (tmp_path / "s.db").exists()


def test_simulate_with_a_negative_seed_is_a_usage_error(tmp_path: Path) -> None:
    result = gpuadvisor(
        "simulate", "--cluster", "c.csv", "--trace", "t.csv", "--policies", "spread", "--mode", "jct", "--seed", "-1"
    )
    assert_one_error_line(result, 2, "--seed", "greater than or equal to 0")


def test_simulate_on_a_node_with_more_gpus_than_any_machine_names_the_row(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.csv"
    cluster.write_text("node,gpu_model,gpus\nn1,V100,8\nn2,V100,100000000000\n")
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,duration,num_gpus\n0,60,1\n")
    result = gpuadvisor(
        "simulate", "--cluster", str(cluster), "--trace", str(trace), "--policies", "spread", "--mode", "jct"
    )
    assert_one_error_line(result, 2, str(cluster), "row 3", "'gpus'", "at most 1024")


@pytest.mark.parametrize("command", [("profile", "list"), ("profile", "show", "w"), ("models", "list")])
def test_a_read_only_command_on_a_mistyped_store_creates_nothing(tmp_path: Path, command: tuple[str, ...]) -> None:
    result = gpuadvisor(*command, "--db", "sqlite:///typo.db", cwd=tmp_path)
    assert_one_error_line(result, 2, "no store at", "typo.db")
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_command_does_not_migrate_an_empty_database(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    sqlalchemy.create_engine(f"sqlite:///{empty}").connect().close()
    result = gpuadvisor("profile", "list", "--db", f"sqlite:///{empty}")
    assert_one_error_line(result, 2, "holds no gpuadvisor store", "gpuadvisor db upgrade")
    assert sqlalchemy.inspect(sqlalchemy.create_engine(f"sqlite:///{empty}")).get_table_names() == []


def test_read_only_commands_read_a_store_that_exists(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text(THROUGHPUTS_HEADER + "w,V100,1,1,64,100\n")
    url = f"sqlite:///{tmp_path}/s.db"
    assert gpuadvisor("profile", "import", str(csv), "--kind", "throughputs", "--db", url).returncode == 0
    assert _profiles(tmp_path / "s.db") == 1
    shown = gpuadvisor("profile", "show", "w", "--json", "--db", url)
    assert shown.returncode == 0, shown.stderr
    assert '"throughput_samples_per_s": 100.0' in shown.stdout


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", [("profile", "list"), ("db", "upgrade"), ("profile", "import")])
def test_an_unreachable_postgresql_exits_3(tmp_path: Path, command: tuple[str, ...]) -> None:
    """docs/design.md §2: a needed resource that is missing exits 3 (bad input exits 2)."""
    port = _closed_port()
    url = f"postgresql+psycopg://nobody@127.0.0.1:{port}/gpuadvisor?connect_timeout=5"
    extra: tuple[str, ...] = ()
    if command[-1] == "import":
        csv = tmp_path / "t.csv"
        csv.write_text(THROUGHPUTS_HEADER + "w,V100,1,1,64,100\n")
        extra = (str(csv), "--kind", "throughputs")
    result = gpuadvisor(*command, *extra, "--db", url)
    assert_one_error_line(result, 3, "cannot reach the store", f"127.0.0.1:{port}")


@pytest.mark.parametrize(
    ("host", "says"),
    [("999.1.1.1", "is not an address or a name"), ("192.0.2.1", "is not an address of this machine")],
)
def test_up_with_a_host_that_is_not_this_machines_blames_the_host(tmp_path: Path, host: str, says: str) -> None:
    result = gpuadvisor("up", "--host", host, "--port", "18979", "--db", f"sqlite:///{tmp_path}/u.db")
    line = assert_one_error_line(result, 2, "--host", host, says)
    assert "--port" not in line


def test_a_training_refusal_names_its_source_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    assert gpuadvisor("db", "upgrade", "--db", url).returncode == 0
    result = gpuadvisor("models", "train", "jct", "--from-store", "--db", url)
    line = assert_one_error_line(result, 2, "cannot train the jct model", "0 usable row(s)")
    assert line.count("store:") == 1
