"""The progress protocol and the summariser on recorded progress streams (warm-up, a stall, a crash, a restart)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from profiler import report
from profiler.progress import ProgressSample, parse_progress
from profiler.summary import SummaryError, TelemetrySample, summarise

DATA = Path(__file__).parent / "data"


def _stream(name: str) -> list[ProgressSample]:
    return list(parse_progress((DATA / name).read_text().splitlines()).samples)


def test_report_prints_one_protocol_line_that_parses_back() -> None:
    out = io.StringIO()
    report(step=3, samples=192, out=out, clock=lambda: 1700000000.5)
    assert json.loads(out.getvalue()) == {"gpuadvisor": 1, "step": 3, "samples": 192, "t": 1700000000.5}
    assert parse_progress(out.getvalue().splitlines()).samples == (ProgressSample(3, 192, 1700000000.5),)


def test_report_rejects_negative_counts() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        report(step=-1, samples=0, out=io.StringIO())


def test_parser_skips_logs_and_counts_cut_off_protocol_lines() -> None:
    stream = parse_progress((DATA / "progress_crash.log").read_text().splitlines())
    assert len(stream.samples) == 60
    assert stream.malformed_lines == 1
    foreign = parse_progress(['{"gpuadvisor": 2, "step": 1, "samples": 1, "t": 1}', '{"other": 1}', "[1, 2]"])
    assert foreign.samples == ()


def test_warm_up_is_dropped_until_the_rate_settles() -> None:
    summary = summarise(_stream("progress_warmup.log"))
    assert summary.throughput_samples_per_s == pytest.approx(640, rel=0.03)
    assert summary.step_time_seconds == pytest.approx(0.1, rel=0.03)
    assert summary.warmup_seconds == pytest.approx(4.5)  # every 0.5 s step after the first report
    assert summary.steady_steps == 90
    assert summary.stall_seconds == 0


def test_a_checkpoint_stall_is_left_out_of_the_rate() -> None:
    summary = summarise(_stream("progress_stall.log"))
    assert summary.throughput_samples_per_s == pytest.approx(640, rel=0.03)
    assert summary.stall_seconds == pytest.approx(8.05, abs=0.1)
    with_stall = summarise(_stream("progress_stall.log"), stall_factor=1e9)
    assert with_stall.throughput_samples_per_s < 0.85 * summary.throughput_samples_per_s


def test_a_crash_mid_run_still_yields_the_rate_measured_before_it() -> None:
    summary = summarise(_stream("progress_crash.log"))
    assert summary.throughput_samples_per_s == pytest.approx(160, rel=0.03)
    assert summary.steady_steps >= 40


def test_after_a_restart_only_the_last_attempt_counts() -> None:
    summary = summarise(_stream("progress_restart.log"))
    assert summary.throughput_samples_per_s == pytest.approx(100, rel=0.01)


def test_telemetry_is_averaged_over_the_steady_window_and_memory_peaks_over_the_run() -> None:
    progress = [ProgressSample(step, step * 10, 100.0 + step) for step in range(1, 21)]
    telemetry = [
        TelemetrySample(100.0 + i, sm_utilization_ratio=0.1 if i < 5 else 0.5 + i / 100, memory_used_bytes=i << 20)
        for i in range(1, 21)
    ]
    telemetry.append(TelemetrySample(115.5, power_watts=300.0, memory_bandwidth_utilization_ratio=0.4))
    summary = summarise(progress, telemetry)
    steady_sm = [0.5 + i / 100 for i in range(5, 21)]
    assert summary.sm_util_mean_ratio == pytest.approx(sum(steady_sm) / len(steady_sm))
    assert summary.sm_util_p95_ratio == pytest.approx(0.6925)
    assert summary.peak_memory_bytes == 20 << 20
    assert summary.power_watts == 300.0
    assert summary.mem_bw_util_ratio == 0.4
    assert summary.telemetry_samples == 21


def test_too_little_progress_is_an_error_not_a_number() -> None:
    with pytest.raises(SummaryError, match="only 2 progress reports"):
        summarise([ProgressSample(1, 10, 1.0), ProgressSample(2, 20, 2.0)])
    stuck = [ProgressSample(5, 50, float(t)) for t in range(10)]
    with pytest.raises(SummaryError, match="no steady progress"):
        summarise(stuck)


def test_summarising_twice_gives_the_same_figures() -> None:
    stream = _stream("progress_stall.log")
    assert summarise(stream) == summarise(list(reversed(stream)))
