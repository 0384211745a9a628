"""`python -m profiler.workloads` on a machine without PyTorch: one `error:` line saying how to install it, exit 3,
not an import traceback. PyTorch is hidden from the child (`sys.modules["torch"] = None`), so this runs whether or not
this machine has it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WITHOUT_TORCH = (
    "import runpy, sys; sys.modules['torch'] = None; sys.argv = ['profiler.workloads', 'cnn', '--seconds', '1']; "
    "runpy.run_module('profiler.workloads', run_name='__main__')"
)


def test_without_pytorch_a_reference_workload_says_how_to_install_it() -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH], capture_output=True, text=True, cwd=REPO, timeout=60, check=False
    )
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: the reference workloads need PyTorch")
    assert "pip install 'gpuadvisor[workloads]'" in line
    assert result.stdout == ""
