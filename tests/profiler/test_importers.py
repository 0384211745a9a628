"""CSV import (DESIGN §6): parsing, clear errors for bad files, and `profile import` as a user runs it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from advisor.cli.main import app
from advisor.datasets import read_csv
from profiler.csv_formats import COLOCATIONS as COLOCATIONS_FORMAT
from profiler.csv_formats import THROUGHPUTS as THROUGHPUTS_FORMAT
from profiler.csv_formats import InputDataError
from profiler.csv_table import read_csv_lines
from profiler.importers import parse_colocations, parse_throughputs
from profiler.store import db, repo

COLOCATIONS = """gpu_model,workload_a,workload_b,solo_throughput_a,solo_throughput_b,coloc_throughput_a,\
coloc_throughput_b,sm_util_a,mem_bw_util_a,mem_bytes_a,sm_util_b,mem_bw_util_b,mem_bytes_b,batch_size_a
v100,resnet18,lstm,100,50,70,40,0.6,0.3,4294967296,0.4,,2147483648,64
k80,resnet18,lstm,30,20,15,18,,,,,,,
"""
THROUGHPUTS = """workload,gpu_model,gpu_count,nodes,batch_size,throughput,sm_util_mean
resnet50,A100,2,1,64,2400.5,0.81
bert,A100,1,1,32,310,
"""


def test_colocations_parse_with_optional_columns_and_blanks() -> None:
    rows = parse_colocations(read_csv_lines(io.StringIO(COLOCATIONS), source="t.csv"), source="import:test")
    assert [(r.gpu_model, r.batch_size_a, r.batch_size_b) for r in rows] == [("v100", 64, 0), ("k80", 0, 0)]
    assert rows[0].norm_a == pytest.approx(0.7)
    assert rows[0].mem_bw_util_b is None
    assert rows[1].sm_util_a is None


def test_throughputs_parse() -> None:
    rows = parse_throughputs(read_csv_lines(io.StringIO(THROUGHPUTS), source="t.csv"), source="import:test")
    assert [(r.workload, r.gpu_count, r.throughput_samples_per_s, r.sm_util_mean_ratio) for r in rows] == [
        ("resnet50", 2, 2400.5, 0.81),
        ("bert", 1, 310.0, None),
    ]


def test_throughputs_in_the_models_csv_format_import_their_sm_utilisation() -> None:
    """`sm_util` is what docs/formats.md (and `models train throughput`) call the mean SM utilisation."""
    text = (
        "workload,gpu_model,gpu_count,nodes,batch_size,throughput,sm_util,mem_bw_util,mem_bytes\n"
        "b,a100,1,1,32,420,0.6,0.3,1024\n"
    )
    (row,) = parse_throughputs(read_csv_lines(io.StringIO(text), source="t.csv"), source="import:test")
    assert (row.sm_util_mean_ratio, row.mem_bw_util_ratio, row.peak_memory_bytes) == (0.6, 0.3, 1024)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workload,gpu_model,throughput\nx,A100,1\n", "missing required column(s): gpu_count, nodes, batch_size"),
        (
            "workload,gpu_model,gpu_count,nodes,batch_size,throughput,sm_util,sm_util_mean\nx,A,1,1,8,5,0.5,0.6\n",
            "row 2: columns 'sm_util' (0.5) and 'sm_util_mean' (0.6) are the same measurement and disagree",
        ),
        ("workload,gpu_model,gpu_count,nodes,batch_size,throughput,sm_util\nx,A,1,1,8,5,81\n", "a ratio 0..1"),
        ("workload,gpu_model,gpu_count,nodes,batch_size,throughput\nx,A100,two,1,8,1\n", "row 2, column 'gpu_count'"),
        ("workload,gpu_model,gpu_count,nodes,batch_size,throughput\nx,A100,1,1,8,-5\n", "must not be negative"),
        ("workload,gpu_model,gpu_count,nodes,batch_size,throughput\n,A100,1,1,8,5\n", "column 'workload': must not"),
        (
            "workload,gpu_model,gpu_count,nodes,batch_size,throughput,sm_util_mean\nx,A,1,1,8,5,81\n",
            "a ratio 0..1 is expected",
        ),
    ],
)
def test_bad_throughput_files_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(InputDataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_throughputs(read_csv_lines(io.StringIO(text), source="t.csv"), source="x")


def _cli(*args: str) -> Result:
    """The `gpuadvisor` command in-process (the subprocess path is covered by the local-runner tests)."""
    return CliRunner().invoke(app, list(args))


def test_profile_import_is_idempotent_and_a_bad_csv_exits_2(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store.db"
    good = tmp_path / "colocations.csv"
    good.write_text(COLOCATIONS)
    first = _cli("profile", "import", "--kind", "colocations", str(good), "--db", url)
    assert first.exit_code == 0, first.stderr
    assert "imported 2 colocations rows" in first.stdout
    assert _cli("profile", "import", "--kind", "colocations", str(good), "--db", url).exit_code == 0
    engine = db.make_engine(url)
    with db.session_factory(engine)() as s:
        assert len(repo.list_colocations(session=s)) == 2
    engine.dispose()

    bad = tmp_path / "throughputs.csv"
    bad.write_text("workload,throughput\nx,1\n")
    result = _cli("profile", "import", "--kind", "throughputs", str(bad), "--db", url)
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "gpu_model, gpu_count, nodes, batch_size" in line


MINIMAL = {
    "colocations": "gpu_model,workload_a,workload_b,solo_throughput_a,solo_throughput_b,coloc_throughput_a,"
    "coloc_throughput_b\nv100,resnet18,lstm,100,50,70,40\n",
    "throughputs": "workload,gpu_model,gpu_count,nodes,batch_size,throughput\nresnet50,a100,2,1,64,2400\n",
}
PARSERS = {"colocations": parse_colocations, "throughputs": parse_throughputs}
FORMATS = {"colocations": COLOCATIONS_FORMAT, "throughputs": THROUGHPUTS_FORMAT}


@pytest.mark.parametrize("kind", ["colocations", "throughputs"])
def test_profile_import_and_the_models_accept_the_same_minimal_file(kind: str, tmp_path: Path) -> None:
    """A file with only the required columns (no utilisation: Gavel publishes none) is one both readers take."""
    (record,) = PARSERS[kind](read_csv_lines(io.StringIO(MINIMAL[kind]), source="t.csv"), source="x")
    assert record.gpu_model in ("v100", "a100")
    path = tmp_path / "f.csv"
    path.write_text(MINIMAL[kind])
    frame = read_csv(path, FORMATS[kind], with_labels=True)
    assert len(frame) == 1


@pytest.mark.parametrize(
    ("kind", "column"),
    [(k, c) for k, text in MINIMAL.items() for c in text.splitlines()[0].split(",")],
)
def test_a_required_column_missing_is_refused_by_both_readers_by_name(kind: str, column: str, tmp_path: Path) -> None:
    header, row = (line.split(",") for line in MINIMAL[kind].splitlines())
    keep = [i for i, name in enumerate(header) if name != column]
    text = "\n".join(",".join(cells[i] for i in keep) for cells in (header, row)) + "\n"
    with pytest.raises(InputDataError, match=f"missing required column\\(s\\): {column}$"):
        PARSERS[kind](read_csv_lines(io.StringIO(text), source="t.csv"), source="x")
    path = tmp_path / "f.csv"
    path.write_text(text)
    with pytest.raises(InputDataError, match=f"missing column\\(s\\) {column}"):
        read_csv(path, FORMATS[kind], with_labels=True)


def test_the_profilers_optional_throughput_columns_are_read_by_the_models(tmp_path: Path) -> None:
    text = (
        "workload,gpu_model,gpu_count,nodes,batch_size,throughput,amp,sm_util_mean,sm_util_p95,power_watts\n"
        "b,a100,1,1,32,420,yes,0.6,0.9,250\n"
    )
    (record,) = parse_throughputs(read_csv_lines(io.StringIO(text), source="t.csv"), source="x")
    assert (record.amp, record.sm_util_p95_ratio, record.power_watts) == (True, 0.9, 250.0)
    path = tmp_path / "f.csv"
    path.write_text(text)
    frame = read_csv(path, THROUGHPUTS_FORMAT, with_labels=True)
    assert (frame["amp"].iloc[0], frame["sm_util_p95"].iloc[0]) == (1.0, 0.9)
    path.write_text(text.replace("0.9,250", "90,250"))
    with pytest.raises(InputDataError, match="sm_util_p95"):
        read_csv(path, THROUGHPUTS_FORMAT, with_labels=True)


def test_the_sharing_column_is_imported_stored_and_checked(tmp_path: Path) -> None:
    text = (
        "gpu_model,workload_a,workload_b,solo_throughput_a,solo_throughput_b,coloc_throughput_a,coloc_throughput_b,"
        "sharing\nH100,cnn,lstm,100,50,50,25,mps\nH100,cnn,bert,100,40,45,20,\n"
    )
    rows = parse_colocations(read_csv_lines(io.StringIO(text), source="t.csv"), source="import:test")
    assert [r.sharing for r in rows] == ["mps", ""]
    engine = db.make_engine(f"sqlite:///{tmp_path}/store.db")
    db.upgrade(engine)
    with db.transaction(db.session_factory(engine)) as session:
        for row in rows:
            repo.save_colocation(session=session, colocation=row)
    with db.session_factory(engine)() as session:
        assert [c.sharing for c in repo.list_colocations(session=session)] == ["mps", ""]
    engine.dispose()
    with pytest.raises(InputDataError, match=r"row 2, column 'sharing': expected one of time-slicing, mps, mig"):
        parse_colocations(
            read_csv_lines(io.StringIO(text.replace(",mps\n", ",MPS-ish\n")), source="t.csv"), source="import:test"
        )
