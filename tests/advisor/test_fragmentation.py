"""FGD fragmentation (advisor.fragmentation): hand-checked values, and the scorer's and simulator's forms agree."""

from __future__ import annotations

import numpy as np
import pytest

from advisor.fragmentation import (
    TaskMixError,
    class_sums,
    expected_fragmentation,
    node_fragmentation_milli,
    validate_task_mix,
    whole_gpu_mix,
    workload_of_requests,
)

HALVES_AND_WHOLES = ((1, 500, 0.5), (1, 1000, 0.5))


def singletons(gpus: int) -> tuple[tuple[int, ...], int]:
    return tuple(1 << i for i in range(gpus)), 1


@pytest.mark.parametrize(
    ("free_milli", "expected"),
    [
        # half shares: nothing below 500 → 0; whole GPU: none free → all 1400 are fragments → 0.5 × 1400
        ((600, 800), 700.0),
        # half shares: the 300 left is a fragment → 0.5 × 300; whole GPU: none free → 0.5 × 1100
        ((300, 800), 700.0),
        # half shares: 0; whole GPU fits on GPU 1, GPU 0's 500 is a fragment → 0.5 × 500
        ((500, 1000), 250.0),
        ((0, 0), 0.0),
    ],
)
def test_expected_fragmentation_by_hand(free_milli: tuple[int, int], expected: float) -> None:
    islands, largest = singletons(2)
    assert node_fragmentation_milli(free_milli, islands, largest, HALVES_AND_WHOLES) == pytest.approx(expected)


def test_a_multi_gpu_task_only_fits_inside_one_nvlink_island() -> None:
    mix = ((2, 1000, 1.0),)
    two_islands = (0b0011, 0b1100)
    split = (1000, 0, 1000, 0)  # one free GPU per island: a 2-GPU task does not fit → all 2000 are fragments
    paired = (1000, 1000, 0, 0)
    assert node_fragmentation_milli(split, two_islands, 2, mix) == 2000.0
    assert node_fragmentation_milli(paired, two_islands, 2, mix) == 0.0
    assert node_fragmentation_milli(split, *singletons(4), mix) == 0.0  # no NVLink: plain FGD, any two GPUs do


def test_the_scalar_and_vectorised_forms_agree_without_cpu_or_memory_limits() -> None:
    requests = [(1, 250, 0.0, 0.0), (1, 500, 0.0, 0.0), (1, 1000, 0.0, 0.0), (2, 1000, 0.0, 0.0), (1, 500, 0.0, 0.0)]
    workload = workload_of_requests(requests)
    mix = ((1, 250, 0.2), (1, 500, 0.4), (1, 1000, 0.2), (2, 1000, 0.2))
    rows = [(1000, 1000, 1000, 1000), (750, 0, 1000, 300), (200, 450, 0, 0), (0, 0, 0, 0), (500, 500, 1000, 999)]
    free = np.array(rows, dtype=np.float64)
    vectorised = expected_fragmentation(
        class_sums(free, workload),
        free.sum(axis=1),
        full=(free >= 1000).sum(axis=1).astype(np.float64),
        max_free=free.max(axis=1),
        cpu_free=np.full(len(rows), np.inf),
        memory_free=np.full(len(rows), np.inf),
        workload=workload,
    )
    scalar = [node_fragmentation_milli(row, *singletons(4), mix) for row in rows]
    assert scalar == pytest.approx(list(vectorised))


def test_bad_task_mixes_name_the_entry() -> None:
    with pytest.raises(TaskMixError, match=r"task_mix\[1\]: milli"):
        validate_task_mix(((1, 500, 0.5), (1, 0, 0.5)))
    with pytest.raises(TaskMixError, match="not all be 0"):
        validate_task_mix(((1, 500, 0.0),))
    assert whole_gpu_mix([(0, 0.1), (2, 0.9)]) == ((2, 1000, 0.9),)
