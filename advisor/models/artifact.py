"""On-disk form of a trained model: a directory with LightGBM text files and one JSON metadata file.

``meta.json`` holds the kind, the hyperparameters, the small fitted state (clip range, history tables, blend
weight, ...), the validation metrics and a summary of the training data; each booster is ``<name>.txt`` in
LightGBM's own format. No pickles: everything can be inspected with a text editor and loaded without our classes.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lightgbm as lgb

FORMAT_VERSION = 1
META_FILE = "meta.json"


class ArtifactError(ValueError):
    """A model directory that is missing, incomplete or of another kind."""


@dataclass
class Artifact:
    kind: str
    params: dict[str, Any]
    state: dict[str, Any]
    boosters: dict[str, str]
    metrics: dict[str, Any] = field(default_factory=dict)
    training_summary: dict[str, Any] = field(default_factory=dict)


def save_artifact(artifact: Artifact, directory: Path) -> None:
    """Write `artifact` into `directory` (created if needed); the metadata file is replaced atomically, last."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in artifact.boosters.items():
        (directory / f"{name}.txt").write_text(text)
    meta = {
        "format": FORMAT_VERSION,
        "kind": artifact.kind,
        "created_at": datetime.now(UTC).isoformat(),
        "lightgbm_version": lgb.__version__,
        "params": artifact.params,
        "state": artifact.state,
        "boosters": sorted(artifact.boosters),
        "metrics": artifact.metrics,
        "training_summary": artifact.training_summary,
    }
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".meta-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True, allow_nan=False)
    os.replace(tmp, directory / META_FILE)


def load_artifact(directory: Path, *, kind: str | None = None) -> Artifact:
    """Read a model directory written by `save_artifact`; `kind` checks that it holds that kind of model."""
    meta_path = directory / META_FILE
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError as e:
        raise ArtifactError(f"{directory}: not a model directory (no {META_FILE})") from e
    except (OSError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{meta_path}: unreadable model metadata ({e})") from e
    if meta.get("format") != FORMAT_VERSION:
        raise ArtifactError(f"{meta_path}: unsupported artifact format {meta.get('format')!r}")
    if kind is not None and meta.get("kind") != kind:
        raise ArtifactError(f"{directory}: holds a {meta.get('kind')!r} model, not {kind!r}")
    boosters = {}
    for name in meta["boosters"]:
        try:
            boosters[name] = (directory / f"{name}.txt").read_text()
        except OSError as e:
            raise ArtifactError(f"{directory}: missing model file {name}.txt") from e
    return Artifact(
        kind=meta["kind"],
        params=meta["params"],
        state=meta["state"],
        boosters=boosters,
        metrics=meta.get("metrics", {}),
        training_summary=meta.get("training_summary", {}),
    )
