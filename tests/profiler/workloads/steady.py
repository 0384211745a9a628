"""A CPU-only trial workload with a known rate: `python steady.py RATE STEPS` reports RATE samples/s.

Each step sleeps batch/RATE seconds after the previous one; the batch size comes from GPUADVISOR_BATCH_SIZE like
in a real trial. With FAKE_NVML_CONFIG set it keeps registering its own PID (with fresh samples) on the stand-in GPU,
so the local runner's NVML sampling finds it. `--crash-after N` exits with an error after N steps.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from profiler import report


def _register_on_fake_gpu(config: Path) -> None:
    from tests.support.fake_nvml import FakeGpu, FakeNvmlConfig, FakeProcess, FakeSample, write_config

    pid = os.getpid()
    gpu = FakeGpu(
        uuid="GPU-fake-0",
        utilization_percent=70,
        memory_utilization_percent=40,
        power_milliwatts=250_000,
        memory_used_bytes=3 << 30,
        processes=[FakeProcess(pid=pid, memory_bytes=3 << 30)],
        samples=[FakeSample(pid=pid, sm_percent=65, timestamp_us=int(time.time() * 1e6))],
    )
    write_config(FakeNvmlConfig(gpus=[gpu]), config)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("rate", type=float, help="samples per second to report")
    parser.add_argument("steps", type=int)
    parser.add_argument("--crash-after", type=int, default=None)
    args = parser.parse_args()
    batch = int(os.environ.get("GPUADVISOR_BATCH_SIZE", "8"))
    fake_nvml = os.environ.get("FAKE_NVML_CONFIG")
    step_seconds = batch / args.rate
    print(f"starting: batch {batch}, {step_seconds:.4f} s per step", flush=True)
    last = time.time()
    for step in range(1, args.steps + 1):
        # Each step takes its time after the previous one, like real work: a late step is not made up by a burst.
        time.sleep(max(0.0, last + step_seconds - time.time()))
        last = time.time()
        if fake_nvml and step % 5 == 1:
            # NVML reports a process's SM utilisation only for samples newer than the last read: keep sampling.
            _register_on_fake_gpu(Path(fake_nvml))
        report(step=step, samples=step * batch)
        if args.crash_after is not None and step >= args.crash_after:
            print("Traceback (most recent call last):\nRuntimeError: simulated crash", file=sys.stderr, flush=True)
            sys.exit(1)


if __name__ == "__main__":
    main()
