"""The registry: versions in the store, promotion only when no worse, rollback, loading what is promoted."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from advisor.datasets import GavelData
from advisor.models.interference import InterferenceModel
from advisor.models.reference import train_reference_models
from advisor.models.registry import load_promoted, register, rollback, save_trained
from advisor.models.training import Trained
from profiler.store import repo
from profiler.store.db import session_factory


@pytest.fixture(scope="module")
def small_model(gavel: GavelData) -> InterferenceModel:
    pairs = gavel.colocations[gavel.colocations["gpu_model"] == "p100"].reset_index(drop=True)
    return InterferenceModel(num_boost_round=30, num_threads=1).fit(pairs)


@pytest.fixture
def sessions(store_engine: Engine) -> sessionmaker[Session]:
    return session_factory(store_engine)


def artifact(model: InterferenceModel, directory: Path, mae: float) -> Path:
    save_trained(Trained(model, {"metric": "mae", "mae": mae}, {"source": "test", "rows": 1}), directory)
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
