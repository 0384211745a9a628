"""`python -m profiler.workloads NAME [--steps N] [--batch-size B] [--device cpu|cuda]`: run one reference workload.

Without PyTorch (the optional extra `workloads`) it says so on one `error:` line and exits 3, a missing resource as
in the `gpuadvisor` CLI, instead of an import traceback.
"""

from __future__ import annotations

import importlib.util
import sys

EXIT_UNAVAILABLE = 3


def run() -> None:
    if importlib.util.find_spec("torch") is None:
        sys.stderr.write(
            f"error: the reference workloads need PyTorch, which {sys.executable} lacks; "
            "install it with `pip install 'gpuadvisor[workloads]'`\n"
        )
        sys.exit(EXIT_UNAVAILABLE)
    from profiler.workloads.train import main  # imports torch: only once it is known to be there

    main()


if __name__ == "__main__":
    run()
