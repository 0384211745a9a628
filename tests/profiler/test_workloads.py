"""The reference workloads train a few steps on CPU and speak the progress protocol (skipped without PyTorch)."""

from __future__ import annotations

import io

import pytest

from profiler.progress import parse_progress
from profiler.summary import summarise

torch = pytest.importorskip("torch", reason="the reference workloads need PyTorch (the optional extra `workloads`)")

from profiler.workloads import WORKLOADS  # noqa: E402  (only importable once torch is known to be there)
from profiler.workloads.train import train  # noqa: E402


@pytest.mark.parametrize("name", WORKLOADS)
def test_each_workload_trains_and_reports_progress(name: str) -> None:
    torch.manual_seed(0)
    out = io.StringIO()
    train(name, steps=4, batch_size=2, device="cpu", out=out)
    stream = parse_progress(out.getvalue().splitlines())
    assert [(s.step, s.samples) for s in stream.samples] == [(1, 2), (2, 4), (3, 6), (4, 8)]
    assert summarise(stream.samples, warmup_fraction=0.0).throughput_samples_per_s > 0


def test_scale_widens_the_models_and_seconds_bounds_the_run() -> None:
    from profiler.workloads.train import BUILDERS

    for name in WORKLOADS:
        small = sum(p.numel() for p in BUILDERS[name](1).model.parameters())
        large = sum(p.numel() for p in BUILDERS[name](2).model.parameters())
        assert large > 1.5 * small, name
    out = io.StringIO()
    train("lstm", steps=None, seconds=0.5, batch_size=2, device="cpu", scale=1, out=out)
    stream = parse_progress(out.getvalue().splitlines())
    assert stream.samples
    assert stream.samples[-1].t_seconds - stream.samples[0].t_seconds < 2.0
