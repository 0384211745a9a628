"""How a GPU is shared between processes, from what the driver says: one rule for the collector's snapshot and the
profiler's local runner (DESIGN §11, the `sharing` of a co-location).

- ``mig``: MIG is on; each process runs on its own instance.
- ``mps``: the driver lists MPS clients on the GPU, or an MPS control daemon listens where CUDA clients look for it
  (clients then go through its server: kernels of several processes run at once).
- ``time-slicing``: the default compute mode (or a mode that cannot be read): several contexts on one GPU take turns.
- ``""`` (unknown): an exclusive or prohibited compute mode, where two processes cannot share without MPS.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from pathlib import Path

from collector.backend import SharingFacts

TIME_SLICING, MPS, MIG = SHARING_MODES = ("time-slicing", "mps", "mig")
UNKNOWN = ""
# Which source decided a mode (`decide_sharing`): the collector's reading of the GPUs, or the node's labels.
SOURCE_SNAPSHOT, SOURCE_LABEL = "snapshot", "label"
# Where an MPS control daemon listens unless CUDA_MPS_PIPE_DIRECTORY says otherwise (NVIDIA's MPS documentation).
DEFAULT_MPS_PIPE_DIRECTORY = Path("/tmp/nvidia-mps")


def sharing_mode(facts: SharingFacts, pids: Set[int], mps_daemon: bool) -> str:
    """How processes `pids` share their GPU (see the module doc); `pids` empty asks how the GPU is set up for any
    processes: then any MPS client the driver lists means ``mps``."""
    if facts.mig_enabled:
        return MIG
    clients = pids & facts.mps_pids if pids else facts.mps_pids
    if clients or mps_daemon:
        return MPS
    if facts.compute_mode in (None, "default"):
        return TIME_SLICING
    return UNKNOWN


def mps_daemon_running(env: Mapping[str, str]) -> bool:
    """Whether an MPS control daemon listens where CUDA clients started with `env` would look for it."""
    pipe = Path(env.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_MPS_PIPE_DIRECTORY)
    return (pipe / "control").exists()


def decide_sharing(read: Iterable[str], labelled: str) -> tuple[str, str]:
    """The mode of a node (or of the GPU a pair shared) from what its snapshots read (`GpuSnapshot.sharing` values)
    and what its labels say (one of `SHARING_MODES`, or ""), and which of the two decided (`SOURCE_SNAPSHOT`,
    `SOURCE_LABEL`; ("", "") when neither says). The snapshot's positive facts (``mig``, ``mps``) come first, then the
    label, then the snapshot's ``time-slicing``: that one is read from an absence (MPS clients are listed only while
    they run, and the control daemon's pipe is often outside the collector's sight), so a label saying ``mps``
    outranks it."""
    seen = set(read)
    for mode in (MIG, MPS):
        if mode in seen:
            return mode, SOURCE_SNAPSHOT
    if labelled in SHARING_MODES:
        return labelled, SOURCE_LABEL
    if TIME_SLICING in seen:
        return TIME_SLICING, SOURCE_SNAPSHOT
    return UNKNOWN, ""
