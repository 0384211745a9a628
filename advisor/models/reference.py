"""The models `gpuadvisor up` starts with: trained from the Gavel data bundled in `advisor.data.gavel`.

Throughput and interference come straight from Gavel's measurements (K80, P100, V100; 26 single-GPU job types,
pairs sharing one GPU). JCT labels are derived: Gavel's job traces give each job's arrival time and step count,
and run time = steps / the job's measured steps/s on its GPU type (`advisor.datasets.gavel_trace_executions`).
Training all three takes a few seconds on two cores.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from advisor.datasets import KINDS, Kind, gavel_trace_executions, load_gavel
from advisor.models.registry import Registration, save_and_register, version_path
from advisor.models.training import train
from profiler.store import repo

GAVEL_THROUGHPUTS = "simulation_throughputs.json"
GAVEL_TRACES = "traces_seed0_top3.csv"


def bundled_gavel_dir() -> Path:
    """The directory holding the bundled Gavel files (inside the installed package)."""
    return Path(str(resources.files("advisor.data.gavel")))


def train_reference_models(
    model_dir: Path,
    sessions: sessionmaker[Session],
    *,
    only_missing: bool = True,
    num_threads: int = 1,
) -> dict[Kind, Registration]:
    """Train, register and promote each kind from the bundled Gavel data.

    With `only_missing` (the default) a kind that already has a promoted version is left alone, so a restart does
    not replace models trained on the cluster's own data. Returns the registrations made.
    """
    if only_missing:
        with sessions() as session:
            kinds = [k for k in KINDS if repo.promoted_model_version(session=session, kind=k) is None]
    else:
        kinds = list(KINDS)
    if not kinds:
        return {}
    gavel = bundled_gavel_dir()
    data = load_gavel(gavel / GAVEL_THROUGHPUTS)
    frames = {
        "throughput": data.throughputs,
        "interference": data.colocations,
        "jct": gavel_trace_executions(gavel / GAVEL_TRACES, data.throughputs),
    }
    source = {
        "throughput": f"bundled gavel/{GAVEL_THROUGHPUTS}",
        "interference": f"bundled gavel/{GAVEL_THROUGHPUTS}",
        "jct": f"bundled gavel/{GAVEL_TRACES}",
    }
    out: dict[Kind, Registration] = {}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for kind in kinds:
        trained = train(kind, frames[kind], source=source[kind], num_threads=num_threads)
        directory = version_path(model_dir, kind, f"{stamp}-reference-{uuid.uuid4().hex[:8]}")
        out[kind] = save_and_register(trained, directory, sessions, kind, force=not only_missing)
    return out
