"""The registry: versions in the store, promotion only when no worse, rollback, loading what is promoted."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from advisor.datasets import GavelData
from advisor.models.interference import InterferenceModel
from advisor.models.reference import train_reference_models
from advisor.models.registry import load_promoted, register, rollback, save_and_register, save_trained
from advisor.models.training import Trained, train
from profiler.store import repo
from profiler.store.db import session_factory


@pytest.fixture(scope="module")
def small_model(gavel: GavelData) -> InterferenceModel:
    pairs = gavel.colocations[gavel.colocations["gpu_model"] == "p100"].reset_index(drop=True)
    return InterferenceModel(num_boost_round=30, num_threads=1).fit(pairs)


@pytest.fixture
def sessions(store_engine: Engine) -> sessionmaker[Session]:
    return session_factory(store_engine)


def artifact(model: InterferenceModel, directory: Path, mae: float, data: str = "same rows") -> Path:
    metrics = {"metric": "mae", "mae": mae, "validation": {"split": "test", "rows": 1, "data": data}}
    save_trained(Trained(model, metrics, {"source": "test", "rows": 1}), directory)
    return directory


def promoted(sessions: sessionmaker[Session]) -> int | None:
    with sessions() as session:
        row = repo.promoted_model_version(session=session, kind="interference")
        return None if row is None else row.version


def test_promotion_only_when_no_worse_unless_forced(
    sessions: sessionmaker[Session], small_model: InterferenceModel, tmp_path: Path
) -> None:
    first = register(sessions, "interference", artifact(small_model, tmp_path / "v1", 0.10))
    assert (first.version, first.promoted) == (1, True)
    worse = register(sessions, "interference", artifact(small_model, tmp_path / "v2", 0.20))
    assert (worse.version, worse.promoted) == (2, False)
    assert "--force" in worse.reason
    assert promoted(sessions) == 1
    better = register(sessions, "interference", artifact(small_model, tmp_path / "v3", 0.05))
    assert better.promoted
    forced = register(sessions, "interference", artifact(small_model, tmp_path / "v4", 0.30), force=True)
    assert forced.promoted
    assert promoted(sessions) == 4
    with sessions() as session:
        versions = repo.list_model_versions(session=session, kind="interference")
    assert [v.version for v in versions] == [1, 2, 3, 4]
    assert versions[0].metrics["mae"] == 0.10


@pytest.fixture(scope="module")
def p100_candidate(gavel: GavelData) -> Trained:
    """A model trained by `training.train` on Gavel's P100 pairs, with its validation rows."""
    pairs = gavel.colocations[gavel.colocations["gpu_model"] == "p100"].reset_index(drop=True)
    return train("interference", pairs, source="p100 pairs", params={"num_boost_round": 30})


def test_metrics_of_different_data_are_not_compared(
    sessions: sessionmaker[Session], small_model: InterferenceModel, tmp_path: Path
) -> None:
    register(sessions, "interference", artifact(small_model, tmp_path / "v1", 0.30, data="gavel"))
    other = register(sessions, "interference", artifact(small_model, tmp_path / "v2", 0.07, data="sia"))
    assert not other.promoted
    assert "validated on other data" in other.reason
    assert promoted(sessions) == 1


def test_the_promoted_version_is_rescored_on_the_candidates_validation_rows(
    sessions: sessionmaker[Session], gavel: GavelData, p100_candidate: Trained, tmp_path: Path
) -> None:
    """A promoted model that recorded a great metric on other data loses once scored on the candidate's rows."""
    pairs = gavel.colocations[gavel.colocations["gpu_model"] == "p100"].reset_index(drop=True)
    never_slowed = pairs.assign(
        coloc_throughput_a=pairs["solo_throughput_a"], coloc_throughput_b=pairs["solo_throughput_b"]
    )
    wrong = InterferenceModel(num_boost_round=30, num_threads=1).fit(never_slowed)
    register(sessions, "interference", artifact(wrong, tmp_path / "v1", 0.001, data="elsewhere"))
    candidate = p100_candidate
    assert candidate.validation is not None
    assert "held out" in candidate.metrics["validation"]["split"]
    registration = save_and_register(candidate, tmp_path / "v2", sessions, "interference")
    assert registration.promoted, registration.reason
    assert "re-scored" in registration.reason
    assert promoted(sessions) == 2


def test_a_failed_registration_removes_the_artifact_it_wrote(p100_candidate: Trained, tmp_path: Path) -> None:
    trained = p100_candidate
    broken = session_factory(create_engine(f"sqlite:///{tmp_path / 'missing' / 'no.db'}"))
    with pytest.raises(OperationalError):
        save_and_register(trained, tmp_path / "v1", broken, "interference")
    assert not (tmp_path / "v1").exists()


def test_rollback_goes_to_the_previous_version_or_the_one_named(
    sessions: sessionmaker[Session], small_model: InterferenceModel, tmp_path: Path
) -> None:
    with pytest.raises(LookupError):
        rollback(sessions, "interference")
    for i in (1, 2, 3):
        register(sessions, "interference", artifact(small_model, tmp_path / f"v{i}", 0.1), force=True)
    assert rollback(sessions, "interference") == 2
    assert rollback(sessions, "interference", to_version=3) == 3
    with pytest.raises(LookupError):
        rollback(sessions, "interference", to_version=9)


def test_load_promoted_skips_missing_and_broken_artifacts(
    sessions: sessionmaker[Session], small_model: InterferenceModel, tmp_path: Path
) -> None:
    assert load_promoted(sessions).interference is None
    directory = artifact(small_model, tmp_path / "v1", 0.1)
    register(sessions, "interference", directory)
    loaded = load_promoted(sessions)
    assert isinstance(loaded.interference, InterferenceModel)
    assert loaded.throughput is None
    assert loaded.describe()["interference"] == "interference v1"
    (directory / "interference.txt").unlink()
    assert load_promoted(sessions).interference is None


def test_reference_models_train_once_from_bundled_data(tmp_path: Path) -> None:
    from profiler.store import db

    engine = db.make_engine(f"sqlite:///{tmp_path}/store.db")
    db.upgrade(engine)
    sessions = session_factory(engine)
    made = train_reference_models(tmp_path / "models", sessions, num_threads=1)
    assert set(made) == {"throughput", "interference", "jct"}
    assert all(r.promoted for r in made.values())
    loaded = load_promoted(sessions)
    assert loaded.throughput is not None
    assert loaded.interference is not None
    assert loaded.jct is not None
    frame = pd.DataFrame(
        {
            "workload": ["ResNet-50 (batch size 64)"],
            "gpu_model": ["p100"],
            "gpu_count": [1.0],
            "nodes": [1.0],
            "batch_size": [64.0],
        }
    )
    assert loaded.throughput.predict_frame(frame)[0] > 0
    assert train_reference_models(tmp_path / "models", sessions) == {}
    engine.dispose()


def test_a_retrain_on_identical_data_is_promoted(
    sessions: sessionmaker[Session], gavel: GavelData, p100_candidate: Trained, tmp_path: Path
) -> None:
    """Both versions held out the same rows of the same data: their held-out metrics are compared, not the first
    one's score on rows its final refit trained on (which made every retrain look worse, issue 40)."""
    pairs = gavel.colocations[gavel.colocations["gpu_model"] == "p100"].reset_index(drop=True)
    assert save_and_register(p100_candidate, tmp_path / "v1", sessions, "interference").promoted
    again = train("interference", pairs, source="p100 pairs", params={"num_boost_round": 30})
    registration = save_and_register(again, tmp_path / "v2", sessions, "interference")
    assert registration.promoted, registration.reason
    assert "same held-out rows" in registration.reason
    assert promoted(sessions) == 2
