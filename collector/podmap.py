"""Host PID → pod UID and container ID, from `<proc-root>/<pid>/cgroup` (docs/design.md §3).

NVML reports host PIDs; the kubelet puts every container in a cgroup whose path names the pod UID and the
container's runtime ID. The parser is pure and total: any text gives an identity or None (a host process),
never an exception. Formats understood, in cgroup v1 (`N:controllers:/path`) and v2 (`0::/path`) files:

- cgroupfs driver: `/kubepods[/burstable|/besteffort]/pod<uid>/<container-id>`
- systemd driver: `/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_with_underscores>.slice/
  <cri-containerd-|crio-|docker-><container-id>.scope` (Guaranteed pods have no QoS segment),
  also nested under `kubelet.slice/kubelet-kubepods.slice` (kind, some distributions)
- cgroup namespaces, where the path is relative to the container's own root: `/../../pod…/<id>`
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

_POD_SEGMENT = re.compile(
    r"(?:^|-)pod(?P<uid>[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}"
    r"|[0-9a-fA-F]{32})(?:\.slice)?$"
)
_CONTAINER_SEGMENT = re.compile(r"^(?:cri-containerd-|crio-|docker-|containerd-)?(?P<id>[0-9a-fA-F]{64})(?:\.scope)?$")


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """The pod (and container, when the path goes that deep) a process runs in."""

    pod_uid: str
    container_id: str | None = None


class ProcessGoneError(LookupError):
    """The PID has no /proc entry any more (it exited between the NVML read and the /proc read)."""


# A kernel writes one short line per hierarchy (v1 has about a dozen); 64 KiB holds any real file many times over.
CGROUP_READ_LIMIT_BYTES = 64 * 1024


class CgroupUnreadableError(OSError):
    """The cgroup file exists but cannot be read (permissions, I/O error), or is over the read limit without naming
    a pod in the part that was read: where the process runs is then unknown (not "host")."""


class CgroupOversizedError(CgroupUnreadableError):
    """The cgroup file is over the read limit, but the part read names the process's pod (`identity`)."""

    def __init__(self, message: str, identity: CgroupIdentity) -> None:
        super().__init__(message)
        self.identity = identity


def parse_cgroup_path(path: str) -> CgroupIdentity | None:
    """Pod identity named by one cgroup path, or None when the path is not inside a pod."""
    segments = [segment for segment in path.split("/") if segment and segment != ".."]
    for position, segment in enumerate(segments):
        pod = _POD_SEGMENT.search(segment)
        if pod is None:
            continue
        uid = pod.group("uid").replace("_", "-").lower()
        container_id = None
        for later in segments[position + 1 :]:
            container = _CONTAINER_SEGMENT.match(later)
            if container is not None:
                container_id = container.group("id").lower()
                break
        return CgroupIdentity(pod_uid=uid, container_id=container_id)
    return None


@functools.lru_cache(maxsize=4096)  # the same processes are parsed every cycle; cgroup texts repeat
def parse_cgroup(text: str) -> CgroupIdentity | None:
    """Pod identity from the content of a `/proc/<pid>/cgroup` file; prefers a line that also names the container."""
    best: CgroupIdentity | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        identity = parse_cgroup_path(parts[2])
        if identity is None:
            continue
        if identity.container_id is not None:
            return identity
        if best is None:
            best = identity
    return best


def read_identity(proc_root: Path | str, pid: int) -> CgroupIdentity | None:
    """Read and parse `<proc_root>/<pid>/cgroup`, at most CGROUP_READ_LIMIT_BYTES of it.

    Raises ProcessGoneError when the process no longer exists, CgroupUnreadableError when the file cannot be read
    or is over the limit without a pod in its complete lines, CgroupOversizedError (carrying the identity) when it is
    over the limit but names a pod.
    """
    path = f"{proc_root}/{pid}/cgroup"  # string join: this runs for every GPU process every cycle
    try:
        with open(path, "rb") as f:
            raw = f.read(CGROUP_READ_LIMIT_BYTES + 1)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError) as e:
        if not os.path.isdir(proc_root):  # no /proc at all (not mounted, wrong --proc-root): not an exited process
            raise CgroupUnreadableError(f"cannot read {path}: {proc_root} is not a readable directory") from e
        raise ProcessGoneError(f"process {pid} has no {path}") from e
    except OSError as e:
        raise CgroupUnreadableError(f"cannot read {path}: {e}") from e
    if len(raw) <= CGROUP_READ_LIMIT_BYTES:
        return parse_cgroup(raw.decode("utf-8", errors="replace"))
    complete_lines = raw[:CGROUP_READ_LIMIT_BYTES].rpartition(b"\n")[0]
    identity = parse_cgroup(complete_lines.decode("utf-8", errors="replace"))
    why = f"{path} is over {CGROUP_READ_LIMIT_BYTES} bytes (read no further)"
    if identity is None:
        raise CgroupUnreadableError(f"{why}; no pod in what was read")
    raise CgroupOversizedError(why, identity)


class PidResolver(Protocol):
    """Maps a host PID to its pod; raises ProcessGoneError / CgroupUnreadableError like `read_identity`."""

    def resolve(self, pid: int) -> CgroupIdentity | None: ...


class ProcCgroupResolver:
    """Resolves PIDs through a /proc tree (the host's, or a fixture tree in tests)."""

    def __init__(self, proc_root: Path = Path("/proc")) -> None:
        self.proc_root = proc_root
        self._root = str(proc_root)

    def resolve(self, pid: int) -> CgroupIdentity | None:
        return read_identity(self._root, pid)
