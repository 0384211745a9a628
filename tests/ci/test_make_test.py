"""`make test` (.ci/test) overlaps the Go job with the Python work: these tests run the script itself with stand-in
tools (a .venv whose ruff, mypy, lint-imports and pytest only record their calls, a make that does the same, a short
background job in place of the Go build), so what is checked is the script's own handling — which tests run in which
phase, the binaries' folder handed to the second phase, a failed Go job failing `make test` with its log, and no
background process left behind when the foreground fails or is interrupted."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.kube import KUBE_BIN_LATER_ENV, KUBE_BIN_MARKERS, ROOT, kube_bin_dir
from tests.support.net import wait_until

SCRIPT = ROOT / ".ci" / "test"
RECORDER = """#!/usr/bin/env bash
{{ printf '%s' "$(basename "$0")"; for a in "$@"; do printf ' [%s]' "$a"; done
   printf ' later=%s bin=%s\\n' "${{GPUADVISOR_KUBE_BIN_LATER:-}}" "${{GPUADVISOR_KUBE_BIN:-}}"; }} >>"{calls}"
case "$(basename "$0") $*" in {fail}) exit 3 ;; esac
"""


def stand_ins(tmp_path: Path, fail: str = "no-such-call") -> dict[str, str]:
    """Environment for .ci/test with recording stand-ins; a call matching the shell pattern `fail` exits 3."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("ruff", "mypy", "lint-imports", "pytest", "make"):
        path = bin_dir / tool
        path.write_text(RECORDER.format(calls=tmp_path / "calls", fail=fail))
        path.chmod(0o755)
    # Not what the `make test` running this test set (its phase's variables, make's own).
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GPUADVISOR_", "MAKE", "GO_JOB"))}
    return {
        **clean,
        "VENV": str(tmp_path / "venv"),
        "MAKE": str(bin_dir / "make"),
        "TMPDIR": str(tmp_path),
        "GPUADVISOR_GO_NICE": "0",
    }


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls").read_text().splitlines()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_each_test_runs_once_and_the_second_phase_gets_the_built_binaries(tmp_path: Path) -> None:
    env = stand_ins(tmp_path) | {"GO_JOB": 'echo built >&2; echo /kube/bin/folder >"$KUBE_BIN_FILE"'}
    done = subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    markers = " or ".join(KUBE_BIN_MARKERS)
    assert calls(tmp_path) == [
        "make [--no-print-directory] [py-lint] later= bin=",
        f"pytest [-m] [not ({markers})] later=1 bin=",
        f"pytest [-m] [{markers}] later= bin=/kube/bin/folder",
    ]
    phases = re.findall(r"^== make test: (.+?) \d+ s \(total \d+ s\)$", done.stdout, re.MULTILINE)
    assert phases == [
        "install and Python lint",
        "tests without the Kubernetes binaries",
        "waited for the Go checks and the Kubernetes build (/kube/bin/folder)",
        "tests with the Kubernetes binaries",
    ]
    assert "built" not in done.stdout + done.stderr  # the Go job's output went to its log


def test_failing_tests_without_the_binaries_still_let_the_kube_tests_run_and_fail_make_test(tmp_path: Path) -> None:
    """One CI run reports every failing test: the first phase's failures do not skip the second phase."""
    env = stand_ins(tmp_path, fail="pytest*not*") | {"GO_JOB": 'echo /kube/bin/folder >"$KUBE_BIN_FILE"'}
    done = subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 3
    assert [c.split(" [")[0] for c in calls(tmp_path)] == ["make", "pytest", "pytest"]
    assert calls(tmp_path)[-1].endswith("bin=/kube/bin/folder")
    assert "the tests without the Kubernetes binaries failed (exit 3)" in done.stderr


def test_failing_kube_tests_fail_make_test(tmp_path: Path) -> None:
    markers = " or ".join(KUBE_BIN_MARKERS)
    env = stand_ins(tmp_path, fail=f"'pytest -m {markers}'") | {"GO_JOB": 'echo /b >"$KUBE_BIN_FILE"'}
    done = subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    assert len(calls(tmp_path)) == 3


def test_a_failed_go_job_fails_make_test_with_its_log_and_no_kube_tests_run(tmp_path: Path) -> None:
    env = stand_ins(tmp_path) | {"GO_JOB": "echo 'vet: plugin/score.go:12: unreachable code'; exit 7"}
    done = subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 7
    assert "failed (exit 7)" in done.stderr
    assert "vet: plugin/score.go:12: unreachable code" in done.stderr
    assert [c.split(" [")[0] for c in calls(tmp_path)] == ["make", "pytest"]
    assert list(tmp_path.glob("gpuadvisor-test.*")) == []  # its scratch folder removed


@pytest.mark.parametrize("how", ["lint fails", "interrupted"])
def test_the_go_job_and_its_children_end_with_the_foreground(tmp_path: Path, how: str) -> None:
    """A go build starts compile and link processes: the job's whole process group goes, not only its shell. Ctrl-C
    reaches the terminal's foreground process group (the script and its pytest), not the job's own group."""
    child_file = tmp_path / "child"
    env = stand_ins(tmp_path) | {"GO_JOB": f'sleep 300 & echo $! >"{child_file}"; wait'}
    if how == "lint fails":  # once the job has started its child
        (tmp_path / "venv" / "bin" / "make").write_text(
            f"#!/usr/bin/env bash\nwhile [ ! -s '{child_file}' ]; do sleep 0.05; done\nexit 3\n"
        )
    else:
        (tmp_path / "venv" / "bin" / "pytest").write_text("#!/usr/bin/env bash\nexec sleep 300\n")
    script = subprocess.Popen(
        [str(SCRIPT)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        assert wait_until(lambda: child_file.is_file() and child_file.read_text().strip() != "", timeout_s=30)
        child = int(child_file.read_text())
        if how == "interrupted":
            assert wait_until((tmp_path / "calls").is_file, timeout_s=30)  # the lint ran: pytest now
            os.killpg(script.pid, signal.SIGINT)
        returncode = script.wait(timeout=60)
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
    assert returncode == (130 if how == "interrupted" else 3)
    assert wait_until(lambda: gone(child), timeout_s=10), "the background job's child outlived make test"


def test_the_markers_make_test_selects_are_those_the_guard_names() -> None:
    assert f'KUBE_TESTS="{" or ".join(KUBE_BIN_MARKERS)}"' in SCRIPT.read_text()


def test_a_test_reaching_for_the_binaries_before_they_are_built_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make test` runs the unmarked tests before k8s/build.sh is done: one that needs the binaries must say so."""
    monkeypatch.setenv(KUBE_BIN_LATER_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="has none of the markers kube, plugin, kube_bin"):
        kube_bin_dir()
