"""The kubelet's pod-resources API for the collector's tests: `podresources-standin` (k8s/cmd/podresources-standin,
built with the control plane by `make kube-bin`) serves upstream's generated PodResourcesLister on a unix socket,
answering from a JSON file that the test rewrites to make pods appear, change or vanish."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.kube import kube_bin_dir

Obj = dict[str, Any]
READY_TIMEOUT_S = 60.0


def pod(namespace: str, name: str, **containers: Sequence[tuple[str, Sequence[str]]]) -> Obj:
    """A PodResources message in protobuf's JSON mapping: `pod("ml", "a", main=[("nvidia.com/gpu", ["GPU-1"])])`."""
    return {
        "name": name,
        "namespace": namespace,
        "containers": [
            {
                "name": container,
                "devices": [{"resource_name": resource, "device_ids": list(ids)} for resource, ids in devices],
            }
            for container, devices in containers.items()
        ],
    }


@dataclass
class Kubelet:
    """A running stand-in: its socket, and `serve(pods)` to change what it answers from the next call on."""

    socket: Path
    state: Path
    process: subprocess.Popen[str]

    def serve(self, pods: Sequence[Obj]) -> None:
        _write_state(self.state, pods)


def _write_state(state: Path, pods: Sequence[Obj]) -> None:
    staged = state.with_suffix(".new")
    staged.write_text(json.dumps({"pod_resources": list(pods)}))
    os.replace(staged, state)  # atomic: a call never reads half a file


@contextmanager
def kubelet(pods: Sequence[Obj] = (), *, delay_s: float = 0.0) -> Iterator[Kubelet]:
    """A stand-in kubelet serving `pods` on <a fresh folder>/kubelet.sock (each answer held back `delay_s`). The
    folder is short-named under the temp root: a unix socket's path may not exceed 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="kubelet-") as folder, _serving(Path(folder), pods, delay_s) as standin:
        yield standin


@contextmanager
def _serving(directory: Path, pods: Sequence[Obj], delay_s: float) -> Iterator[Kubelet]:
    socket = directory / "kubelet.sock"
    state = directory / "state.json"
    _write_state(state, pods)
    argv = [
        str(kube_bin_dir() / "podresources-standin"),
        f"--socket={socket}",
        f"--state={state}",
        f"--delay={delay_s}s",
    ]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    standin = Kubelet(socket, state, process)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # "ready" once it accepts connections; "" when it exited
        if line.strip() != "ready":
            process.kill()
            _, err = process.communicate(timeout=READY_TIMEOUT_S)
            raise AssertionError(f"podresources-standin did not start: {err.strip()}")
        yield standin
    finally:
        process.terminate()
        try:
            process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
