"""`gpuadvisor up` fills its store with the bundled data its reference models train from, so that the banner's
`POST /v1/models/train` (which trains on the store) has rows to train on, instead of "0 usable row(s)"."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.cli.up import seed_store
from advisor.models.kinds import MODEL_KINDS
from advisor.serving import store_frame
from profiler.store import db


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_local_store_holds_enough_rows_to_train_every_kind(tmp_path: Path) -> None:
    engine = db.make_engine(f"sqlite:///{tmp_path}/up.db")
    db.upgrade(engine)
    sessions = db.session_factory(engine)
    for kind in MODEL_KINDS:
        assert len(store_frame(sessions, kind)) == 0
    added = seed_store(sessions)
    assert added > 5000
    for kind, spec in MODEL_KINDS.items():
        assert len(spec.labelled(store_frame(sessions, kind))) >= spec.csv.min_train_rows, kind
    assert seed_store(sessions) == 0  # a restart keeps what is there
