"""Benchmark: time and peak RSS of resolving one PID whose `/proc/<pid>/cgroup` file is huge (issue 20).

A real kernel writes a few hundred bytes there, but the collector reads whatever the mounted /proc holds, so its
memory limit (256 MiB in the DaemonSet) must not depend on that file. The fixture is the pod's cgroup line followed
by filler lines up to `--size-mb`; the resolve runs in a fresh interpreter so its peak RSS is its own.

    .venv/bin/python bench/cgroup_read.py                 # 200 MB file
    .venv/bin/python bench/cgroup_read.py --size-mb 20 --pod-line last
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PID = 4242
POD_LINE = "0::/kubepods.slice/kubepods-pod0f0e0d0c_0b0a_4908_8706_050403020100.slice/cri-containerd-" + "ef" * 32
CHILD = """
import json, resource, sys, time
from pathlib import Path
from collector.podmap import CgroupUnreadableError, ProcCgroupResolver
resolver = ProcCgroupResolver(Path(sys.argv[1]))
before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
try:
    outcome = repr(resolver.resolve(int(sys.argv[2])))
except CgroupUnreadableError as e:  # an oversized file's error carries the identity its first lines name
    outcome = f"{type(e).__name__} (identity {getattr(e, 'identity', None)!r})"
elapsed = time.perf_counter() - started
after_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": elapsed, "peak_rss_mb": after_kib / 1024, "rss_growth_mb": (after_kib - before_kib) / 1024,
                  "outcome": outcome}))
"""


def write_fixture(root: Path, size_bytes: int, *, pod_line_first: bool) -> None:
    (root / str(PID)).mkdir(parents=True)
    filler = "".join(f"{i}:name=filler{i}:/system.slice/filler-{i:08d}.service\n" for i in range(1000)).encode()
    with (root / str(PID) / "cgroup").open("wb") as f:
        if pod_line_first:
            f.write((POD_LINE + "\n").encode())
        written = len(POD_LINE) + 1
        while written < size_bytes:
            f.write(filler)
            written += len(filler)
        if not pod_line_first:
            f.write((POD_LINE + "\n").encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=float, default=200.0)
    parser.add_argument("--pod-line", choices=("first", "last"), default="first", help="where the pod's line is")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proc"
        write_fixture(root, int(args.size_mb * 1e6), pod_line_first=args.pod_line == "first")
        result = subprocess.run(
            [sys.executable, "-c", CHILD, str(root), str(PID)],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONPATH": str(ROOT)},
        )
    figures = json.loads(result.stdout)
    print(
        f"cgroup file {args.size_mb:.0f} MB, pod line {args.pod_line}: {figures['seconds']:.3f} s, "
        f"peak RSS {figures['peak_rss_mb']:.1f} MB (+{figures['rss_growth_mb']:.1f} MB while resolving) "
        f"-> {figures['outcome']}"
    )


if __name__ == "__main__":
    main()
