"""`models train --from-store` leaves out trial results whose repeats spread too far, unless `--include-flagged`."""

from __future__ import annotations

from pathlib import Path

from profiler.store import repo
from profiler.store.db import make_engine, session_factory
from tests.advisor.models.test_store_frames import stored_pair
from tests.cli.test_cli_smoke import gpuadvisor
from tests.cli.test_errors import assert_one_error_line


def test_flagged_results_train_only_when_asked_for(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    assert gpuadvisor("db", "upgrade", "--db", url).returncode == 0
    sessions = session_factory(make_engine(url))
    with sessions() as session, session.begin():
        repo.save_colocation(session=session, colocation=stored_pair("lstm-bs20", flagged=False))
        repo.save_colocation(session=session, colocation=stored_pair("recommender-bs256", flagged=True))
    # Too few pairs to train either way; the refusal counts the rows each reading kept.
    plain = gpuadvisor("models", "train", "interference", "--from-store", "--db", url)
    assert_one_error_line(plain, 2, "cannot train the interference model", "1 usable row(s)")
    flagged = gpuadvisor("models", "train", "interference", "--from-store", "--include-flagged", "--db", url)
    assert_one_error_line(flagged, 2, "cannot train the interference model", "2 usable row(s)")


def test_include_flagged_without_the_store_is_a_usage_error(tmp_path: Path) -> None:
    csv = tmp_path / "c.csv"
    csv.write_text("gpu_model\n")
    result = gpuadvisor(
        "models", "train", "interference", "--from-csv", str(csv), "--out", str(tmp_path / "m"), "--include-flagged"
    )
    assert_one_error_line(result, 2, "--include-flagged applies to --from-store only")
