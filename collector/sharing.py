"""How a GPU is shared between processes, from what the driver says: one rule for the collector's snapshot and the
profiler's local runner (DESIGN §11, the `sharing` of a co-location).

- ``mig``: MIG is on; each process runs on its own instance.
- ``mps``: the driver lists MPS clients on the GPU, or an MPS control daemon listens where CUDA clients look for it
  (clients then go through its server: kernels of several processes run at once).
- ``time-slicing``: the default compute mode (or a mode that cannot be read): several contexts on one GPU take turns.
- ``""`` (unknown): an exclusive or prohibited compute mode, where two processes cannot share without MPS.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from pathlib import Path

from collector.backend import SharingFacts

TIME_SLICING, MPS, MIG = SHARING_MODES = ("time-slicing", "mps", "mig")
UNKNOWN = ""
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
