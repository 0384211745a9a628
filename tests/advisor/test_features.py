"""The feature functions' batch forms give, bit for bit, what they give row by row (training and serving agree)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from advisor.features import (
    GPU_FEATURES,
    INTERFERENCE_FEATURES,
    FloatArray,
    SideColumns,
    SoloProfile,
    gpu_feature_table,
    gpu_features,
    interference_features,
    interference_features_of,
    interference_sides,
    side_columns,
)
from advisor.gpus import gpu_spec

NAMES = ["v100", "Tesla V100-SXM2-16GB", "NVIDIA H100 80GB HBM3", "k80", "some unknown gpu", "rtx", ""]


def bits(values: FloatArray) -> bytes:
    """The bytes of `values` in row-major order: equal for equal bits whatever the memory layout (NaN included)."""
    return np.ascontiguousarray(values).tobytes()


def random_sides(rng: np.random.Generator, n: int) -> SideColumns:
    """Sides with every kind of value the features meet: unknown (NaN, 0) and negative throughputs and batch sizes."""

    def maybe(values: FloatArray, share: float) -> FloatArray:
        return np.where(rng.random(n) < share, np.nan, values)

    throughput = np.exp2(rng.normal(4.0, 6.0, n))
    throughput[rng.random(n) < 0.05] = 0.0
    throughput[rng.random(n) < 0.02] = -1.0
    return SideColumns(
        solo_throughput=maybe(throughput, 0.05),
        batch_size=np.where(rng.random(n) < 0.3, 0.0, rng.integers(1, 512, n).astype(np.float64)),
        sm_util=maybe(rng.random(n), 0.5),
        mem_bw_util=maybe(rng.random(n), 0.5),
        mem_bytes=maybe(rng.random(n) * 4e10, 0.5),
        amp=maybe((rng.random(n) < 0.5).astype(np.float64), 0.5),
    )


def test_gpu_features_are_each_names_spec() -> None:
    names = [NAMES[i] for i in np.random.default_rng(1).integers(0, len(NAMES), 300)]
    features = gpu_features(names)
    assert features.shape == (300, len(GPU_FEATURES))
    for name, row in zip(names, features, strict=True):
        spec = gpu_spec(name)
        expected = [
            math.log2(spec.fp16_tflops),
            math.log2(spec.fp32_tflops),
            math.log2(spec.memory_bandwidth_bytes_per_s / 1e9),
            spec.memory_bytes / (1 << 30),
            spec.compute_capability,
        ]
        np.testing.assert_allclose(row, expected, rtol=1e-15)
        assert np.isnan(row).all() == (not spec.known)
    # The table of the distinct names, indexed per row, is the same array.
    distinct = list(dict.fromkeys(names))
    codes = [distinct.index(name) for name in names]
    assert bits(gpu_feature_table(distinct)[codes]) == bits(features)
    assert gpu_features([]).shape == (0, len(GPU_FEATURES))


def test_interference_features_of_distinct_sides_are_the_row_features() -> None:
    """A batch built from a table of its distinct sides (as the model's predict path does) has the features of its
    rows built one pair at a time, bit for bit, in both orders."""
    rng = np.random.default_rng(2)
    k = 40
    sides = random_sides(rng, k)
    gpu_of_side = [NAMES[i] for i in rng.integers(0, len(NAMES), k)]
    # Pairs of sides on the same GPU model, with repeats and swaps.
    this = rng.integers(0, k, 700)
    other = np.array([rng.choice(np.flatnonzero(np.array(gpu_of_side) == gpu_of_side[i])) for i in this])
    table = interference_sides(sides, gpu_features(gpu_of_side))
    together = interference_features_of(table, this, other)
    assert together.shape == (700, len(INTERFERENCE_FEATURES))

    def rows(index: npt.NDArray[np.int64]) -> SideColumns:
        return SideColumns(*(getattr(sides, c)[index] for c in SideColumns.__dataclass_fields__))

    gpus = [gpu_of_side[i] for i in this]
    assert bits(together) == bits(interference_features(rows(this), rows(other), gpus))
    for i in range(0, 700, 97):
        alone = interference_features(rows(this[i : i + 1]), rows(other[i : i + 1]), gpus[i : i + 1])
        assert bits(together[i : i + 1]) == bits(alone)
    swapped = interference_features_of(table, other, this)
    width = len(INTERFERENCE_FEATURES) // 2 - 5
    assert bits(swapped[:, :width]) == bits(together[:, width : 2 * width])


def test_interference_feature_columns() -> None:
    rng = np.random.default_rng(3)
    a, b = random_sides(rng, 200), random_sides(rng, 200)
    gpus = [NAMES[i] for i in rng.integers(0, len(NAMES), 200)]
    features = interference_features(a, b, gpus)
    column = {name: features[:, i] for i, name in enumerate(INTERFERENCE_FEATURES)}
    with np.errstate(divide="ignore", invalid="ignore"):
        log_thr = np.where(a.solo_throughput > 0, np.log2(a.solo_throughput), np.nan)
    np.testing.assert_array_equal(column["self_log2_samples_per_s"], log_thr)
    np.testing.assert_array_equal(column["other_sm_util"], b.sm_util)
    np.testing.assert_array_equal(column["sum_mem_bw_util"], a.mem_bw_util + b.mem_bw_util)
    memory = gpu_features(gpus)[:, GPU_FEATURES.index("gpu_memory_gib")] * (1 << 30)
    np.testing.assert_array_equal(column["self_mem_fraction"], a.mem_bytes / memory)
    known_batch = a.batch_size > 0
    log_batch = np.log2(np.where(known_batch, a.batch_size, 1.0))
    np.testing.assert_array_equal(column["self_log2_steps_per_s"][known_batch], (log_thr - log_batch)[known_batch])
    np.testing.assert_array_equal(column["self_log2_steps_per_s"][~known_batch], log_thr[~known_batch])
    np.testing.assert_array_equal(features[:, -len(GPU_FEATURES) :], gpu_features(gpus))


@pytest.mark.parametrize("n", [0, 1, 5, 300])
def test_side_columns_read_every_field(n: int) -> None:
    rng = np.random.default_rng(n)

    def profile(i: int) -> SoloProfile:
        r = rng.random(5)
        return SoloProfile(
            f"w{i}",
            float(rng.random() * 100) if r[0] > 0.1 else math.nan,
            int(rng.integers(0, 64)),
            sm_util_ratio=float(r[1]) if r[1] < 0.5 else None,
            mem_bytes=4e9 * r[2] if r[2] < 0.5 else None,
            amp=bool(r[3] < 0.5) if r[4] < 0.5 else None,
        )

    profiles = [profile(i) for i in range(n)]
    columns = side_columns(profiles)

    def expected(value: float | bool | None) -> float:
        return math.nan if value is None else float(value)

    for field, name in [
        ("solo_throughput", "solo_throughput"),
        ("batch_size", "batch_size"),
        ("sm_util", "sm_util_ratio"),
        ("mem_bw_util", "mem_bw_util_ratio"),
        ("mem_bytes", "mem_bytes"),
        ("amp", "amp"),
    ]:
        values = getattr(columns, field)
        assert values.dtype == np.float64
        assert values.flags.c_contiguous
        reference = np.array([expected(getattr(p, name)) for p in profiles], dtype=np.float64)
        assert bits(values) == bits(reference), field
    # mem_bw_util is None in every profile: NaN throughout.
    assert np.isnan(columns.mem_bw_util).all()
