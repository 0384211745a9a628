"""`python -m profiler.workloads NAME [--steps N] [--batch-size B] [--device cpu|cuda]`: run one reference workload."""

from __future__ import annotations

from profiler.workloads.train import main

if __name__ == "__main__":
    main()
