"""The model registry: versions in the store's ``models`` table, artifacts on disk, promotion and rollback.

A version row records where its artifact directory is, its validation metrics and a summary of its training data.
A new version is promoted only when its primary validation metric (`advisor.models.training.PRIMARY_METRIC`, lower is
better) is no worse than the promoted version's, unless forced; promotion demotes the previous version in the same
transaction. Serving code calls `load_promoted` and gets whichever models exist — a missing or unreadable artifact is
logged once and left out, so the scorer falls back to its heuristics instead of failing.
"""

from __future__ import annotations

import logging
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from advisor.datasets import KINDS, Kind
from advisor.models.artifact import ArtifactError, load_artifact, save_artifact
from advisor.models.interference import InterferenceModel
from advisor.models.jct import JctModel
from advisor.models.kinds import PRIMARY_METRIC, Model, model_from_artifact
from advisor.models.throughput import ThroughputModel
from advisor.models.training import Trained, Validation, score
from profiler.store import repo
from profiler.store.db import transaction
from profiler.store.models import ModelVersion

log = logging.getLogger(__name__)


def load_model(directory: Path, *, kind: Kind | None = None) -> Model:
    """The model stored in `directory` (raises `ArtifactError` when it is not a model directory of `kind`)."""
    return model_from_artifact(load_artifact(directory, kind=kind))


def save_trained(trained: Trained, directory: Path) -> None:
    """Write a trained model, its metrics and training summary as an artifact directory."""
    artifact = trained.model.to_artifact()
    artifact.metrics = trained.metrics
    artifact.training_summary = trained.training_summary
    save_artifact(artifact, directory)


@dataclass(frozen=True)
class LoadedModels:
    """The promoted models the scorer and the simulator use; None where a kind has no usable promoted version."""

    throughput: ThroughputModel | None = None
    interference: InterferenceModel | None = None
    jct: JctModel | None = None
    versions: dict[str, int] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def describe(self) -> dict[str, str]:
        """Per kind, ``"<kind> v<N>"`` or ``"none"`` (reported with every score)."""
        return {k: f"{k} v{self.versions[k]}" if k in self.versions else "none" for k in KINDS}


def promoted_versions(sessions: sessionmaker[Session]) -> dict[str, int]:
    """The promoted version of each kind (kinds without one left out): one small query, for replicas that poll for
    promotions made elsewhere without reading any artifact."""
    with sessions() as session:
        return repo.promoted_versions(session=session)


def load_promoted(sessions: sessionmaker[Session], kinds: tuple[Kind, ...] = KINDS) -> LoadedModels:
    """Load the promoted version of each kind; kinds without one (or with a broken artifact) are None."""
    loaded: dict[str, Any] = {}
    versions: dict[str, int] = {}
    sources: dict[str, str] = {}
    with sessions() as session:
        rows = {k: repo.promoted_model_version(session=session, kind=k) for k in kinds}
    for kind, row in rows.items():
        if row is None:
            continue
        try:
            loaded[kind] = load_model(Path(row.artifact_path), kind=kind)
        except ArtifactError as e:
            log.warning("promoted %s model v%d is unusable, serving without it: %s", kind, row.version, e)
            continue
        versions[kind] = row.version
        sources[kind] = str((row.training_summary or {}).get("source", ""))
    return LoadedModels(
        throughput=loaded.get("throughput"),
        interference=loaded.get("interference"),
        jct=loaded.get("jct"),
        versions=versions,
        sources=sources,
    )


@dataclass(frozen=True)
class Registration:
    kind: Kind
    version: int
    promoted: bool
    reason: str


def _metric(metrics: dict[str, Any], kind: Kind) -> float:
    value = metrics.get(PRIMARY_METRIC[kind])
    return float(value) if isinstance(value, int | float) else math.inf


def _comparable_metric(
    kind: Kind, current: ModelVersion, candidate_metrics: dict[str, Any], validation: Validation | None
) -> tuple[float, str] | None:
    """The promoted version's metric on the candidate's validation data, and how it was obtained; None when the two
    cannot be compared.

    When both were trained on the same data with the same held-out split, their recorded metrics are the fair
    comparison: each was fitted without those rows. Re-scoring the promoted version on them would score it on rows
    its final refit (on everything) trained on, so a retrain on identical data could never be promoted (issue 40).
    Otherwise it is re-scored on the candidate's validation rows when they are at hand, and else not compared."""
    mine = candidate_metrics.get("validation") or {}
    theirs = current.metrics.get("validation") or {}
    same_data = mine.get("data") is not None and mine.get("data") == theirs.get("data")
    if same_data and mine.get("split") == theirs.get("split"):
        return _metric(current.metrics, kind), "validated on the same held-out rows of the same data"
    if validation is not None:
        try:
            model = load_model(Path(current.artifact_path), kind=kind)
        except ArtifactError as e:
            log.warning("promoted %s v%d cannot be re-scored: %s", kind, current.version, e)
        else:
            return score(kind, model, validation), "re-scored on this version's validation rows"
    if same_data:
        return _metric(current.metrics, kind), "validated on the same data"
    return None


def register(
    sessions: sessionmaker[Session],
    kind: Kind,
    directory: Path,
    *,
    force: bool = False,
    validation: Validation | None = None,
) -> Registration:
    """Add the artifact in `directory` as a new version of `kind`; promote it unless it validates worse than the
    promoted version on the same data (`validation`: the candidate's validation rows, from `training.train`).

    Metrics of different data sets are never compared: without `validation`, a candidate validated on other data
    than the promoted version is registered but not promoted (unless `force`).
    """
    artifact = load_artifact(directory, kind=kind)
    new_metric = _metric(artifact.metrics, kind)
    name = PRIMARY_METRIC[kind]
    with transaction(sessions) as session:
        version = repo.add_model_version(
            session=session,
            kind=kind,
            artifact_path=str(directory.resolve()),
            metrics=artifact.metrics,
            training_summary=artifact.training_summary,
        )
        current = repo.promoted_model_version(session=session, kind=kind)
        if current is None:
            reason = "first version of this kind"
        else:
            compared = _comparable_metric(kind, current, artifact.metrics, validation)
            if compared is None:
                if not force:
                    return Registration(
                        kind,
                        version,
                        False,
                        f"not promoted: v{current.version} was validated on other data and cannot be re-scored "
                        f"on this version's validation rows, so their {name} are not comparable "
                        "(use --force to promote anyway)",
                    )
                reason = f"forced: v{current.version} was validated on other data"
            else:
                old_metric, basis = compared
                if new_metric <= old_metric:
                    reason = f"{name} {new_metric:.4g} is no worse than v{current.version}'s {old_metric:.4g} ({basis})"
                elif force:
                    reason = (
                        f"forced although {name} {new_metric:.4g} is worse than v{current.version}'s "
                        f"{old_metric:.4g} ({basis})"
                    )
                else:
                    return Registration(
                        kind,
                        version,
                        False,
                        f"not promoted: {name} {new_metric:.4g} is worse than v{current.version}'s {old_metric:.4g} "
                        f"({basis}; use --force to promote anyway)",
                    )
        repo.promote_model_version(session=session, kind=kind, version=version)
    return Registration(kind, version, True, reason)


def save_and_register(
    trained: Trained, directory: Path, sessions: sessionmaker[Session], kind: Kind, *, force: bool = False
) -> Registration:
    """Write `trained` to `directory` and register it; a failure removes the directory it wrote, so no failed
    training leaves an artifact behind that no version row points to."""
    existed = directory.exists()
    try:
        save_trained(trained, directory)
        return register(sessions, kind, directory, force=force, validation=trained.validation)
    except BaseException:
        if not existed:
            shutil.rmtree(directory, ignore_errors=True)
        raise


def rollback(sessions: sessionmaker[Session], kind: Kind, *, to_version: int | None = None) -> int:
    """Promote `to_version`, or the newest version older than the promoted one; returns the promoted version.

    Raises LookupError when there is nothing to roll back to.
    """
    with transaction(sessions) as session:
        if to_version is None:
            current = repo.promoted_model_version(session=session, kind=kind)
            if current is None:
                raise LookupError(f"no promoted {kind} model to roll back from")
            older = [
                v.version for v in repo.list_model_versions(session=session, kind=kind) if v.version < current.version
            ]
            if not older:
                raise LookupError(f"{kind} v{current.version} is the oldest version: nothing to roll back to")
            to_version = max(older)
        repo.promote_model_version(session=session, kind=kind, version=to_version)
    return to_version


def version_path(model_dir: Path, kind: Kind, stamp: str) -> Path:
    """Where a newly trained artifact of `kind` goes under the service's model directory."""
    return model_dir / kind / stamp
