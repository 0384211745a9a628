"""`POST /v1/models/train`'s background jobs: held until the store is filled (`gpuadvisor up` imports its bundled data
after the banner, and a training started meanwhile failed with "0 usable row(s)" and "database is locked"), and a
store failure reported as one line, without SQLAlchemy's statement and help link."""

from __future__ import annotations

import threading
from pathlib import Path

import sqlalchemy
from sqlalchemy.orm import Session, sessionmaker

from advisor.serving import TrainingJob, TrainingJobs
from profiler.csv_table import read_csv_lines
from profiler.importers import parse_throughputs
from profiler.store import db, repo
from tests.support.net import wait_until

GPU_MODELS = ("v100", "p100", "k80")
WORKLOADS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")


def _store(path: Path) -> sessionmaker[Session]:
    engine = db.make_engine(f"sqlite:///{path}")
    db.upgrade(engine)
    return db.session_factory(engine)


def _import_throughputs(sessions: sessionmaker[Session]) -> None:
    """24 throughput rows (8 workloads on 3 GPU types): enough to train the throughput model."""
    lines = ["workload,gpu_model,gpu_count,nodes,batch_size,throughput"]
    lines += [
        f"{w},{g},1,1,32,{(i + 1) * 10.0 * (j + 1)}" for i, w in enumerate(WORKLOADS) for j, g in enumerate(GPU_MODELS)
    ]
    with db.transaction(sessions) as session:
        for profile in parse_throughputs(read_csv_lines(lines, source="test"), source="test"):
            repo.save_profile(session=session, profile=profile)


def _finished(job: TrainingJob) -> bool:
    return job.state in ("succeeded", "failed")


def test_a_training_started_while_the_store_is_filled_waits_and_trains_on_the_whole_data(tmp_path: Path) -> None:
    sessions = _store(tmp_path / "s.db")
    jobs = TrainingJobs(sessions, tmp_path / "models")
    filled = threading.Event()
    jobs.wait_for(filled)

    job = jobs.start(("throughput",))
    _import_throughputs(sessions)  # what `up` imports after the banner, while the job is held
    assert job.state == "queued"  # without the hold it had already failed on the empty store
    filled.set()

    assert wait_until(lambda: _finished(job), 120), job
    assert job.state == "succeeded", (job.error, job.results)
    (result,) = job.results
    assert result["kind"] == "throughput"
    assert result["version"] == 1


def test_a_store_failure_is_one_line_without_the_statement(tmp_path: Path) -> None:
    # a file the driver cannot open: the first statement fails
    sessions = sessionmaker(sqlalchemy.create_engine(f"sqlite:///{tmp_path}/missing/s.db"))
    jobs = TrainingJobs(sessions, tmp_path / "models")

    job = jobs.start(("throughput",))

    assert wait_until(lambda: _finished(job), 60), job
    assert job.state == "failed"
    assert job.error.startswith("OperationalError: ")
    assert "\n" not in job.error
    assert "[SQL:" not in job.error
    assert "sqlalche.me" not in job.error
