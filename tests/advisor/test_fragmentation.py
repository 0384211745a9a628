"""FGD fragmentation (advisor.placement.fragmentation): hand-checked values (CPU/memory binding included), the scorer's
and simulator's forms agree, and task mixes are checked with clear messages."""

from __future__ import annotations

import numpy as np
import pytest

from advisor.placement.fragmentation import (
    TaskMixError,
    class_sums,
    expected_fragmentation,
    mix_resources,
    node_fragmentation_fit_milli,
    node_fragmentation_milli,
    parse_task_mix,
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


# A CPU-bound mix: whole GPUs need 8 CPUs, half GPUs 2 CPUs (memory 1 GiB each).
CPU_MIX = ((1, 1000, 0.5, 8000.0, 1024.0), (1, 500, 0.5, 2000.0, 1024.0))


@pytest.mark.parametrize(
    ("cpu_free_milli", "expected"),
    [
        (16000.0, 0.0),  # both types fit: no fragment on two free GPUs
        (4000.0, 1000.0),  # the whole-GPU type no longer fits by CPU → 0.5 × all 2000 free milli
        (1000.0, 2000.0),  # neither fits → every free milli is a fragment
    ],
)
def test_cpu_that_no_longer_fits_makes_free_gpus_fragments(cpu_free_milli: float, expected: float) -> None:
    resources = mix_resources(CPU_MIX)
    assert resources is not None
    fit = resources.fit_index(cpu_free_milli, 4096.0)
    assert node_fragmentation_fit_milli((1000, 1000), *singletons(2), resources, fit) == pytest.approx(expected)


def test_memory_binds_like_cpu_and_a_task_without_gpu_only_counts_through_them() -> None:
    mix = ((1, 1000, 0.5, None, 8192.0), (0, 0, 0.5, 1000.0, 1024.0))
    resources = mix_resources(mix)
    assert resources is not None
    free = (1000, 0, 1000, 600)
    assert node_fragmentation_fit_milli(free, *singletons(4), resources, resources.fit_index(1e9, 8192.0)) == (
        pytest.approx(0.5 * 600)  # the 1-GPU type fits: only the 600 partial is a fragment; no-GPU type: none
    )
    # 4 GiB free: the 1-GPU type does not fit → 0.5 × 2600; the no-GPU type still fits → 0
    assert node_fragmentation_fit_milli(free, *singletons(4), resources, resources.fit_index(1e9, 4096.0)) == (
        pytest.approx(0.5 * 2600)
    )
    # no CPU left: the no-GPU type does not fit either → + 0.5 × 2600
    assert node_fragmentation_fit_milli(free, *singletons(4), resources, resources.fit_index(0.0, 4096.0)) == (
        pytest.approx(2600)
    )
    # GPU-only (CPU/memory unknown): the no-GPU type always fits and never fragments
    assert node_fragmentation_milli(free, *singletons(4), mix) == pytest.approx(0.5 * 600)


def test_a_mix_without_cpu_or_memory_has_no_resource_side() -> None:
    assert mix_resources(HALVES_AND_WHOLES) is None
    assert mix_resources(((1, 500, 1.0, None, None),)) is None


def test_the_scalar_and_vectorised_forms_agree_with_cpu_and_memory() -> None:
    requests = [
        (1, 250, 1000.0, 2048.0),
        (1, 500, 4000.0, 8192.0),
        (1, 1000, 8000.0, 16384.0),
        (2, 1000, 16000.0, 65536.0),
        (0, 0, 2000.0, 4096.0),
    ]
    weights = [0.1, 0.3, 0.3, 0.2, 0.1]
    workload = workload_of_requests(requests, weights=weights)
    mix = tuple((k, m, w, c, mem) for (k, m, c, mem), w in zip(requests, weights, strict=True))
    resources = mix_resources(mix)
    assert resources is not None
    rows = [(1000, 1000, 1000, 1000), (750, 0, 1000, 300), (200, 450, 0, 0), (500, 500, 1000, 999)]
    cpu = [20000.0, 5000.0, 1500.0, 9000.0]
    memory = [100000.0, 10000.0, 100000.0, 3000.0]
    free = np.array(rows, dtype=np.float64)
    vectorised = expected_fragmentation(
        class_sums(free, workload),
        free.sum(axis=1),
        full=(free >= 1000).sum(axis=1).astype(np.float64),
        max_free=free.max(axis=1),
        cpu_free=np.array(cpu),
        memory_free=np.array(memory),
        workload=workload,
    )
    scalar = [
        node_fragmentation_fit_milli(row, *singletons(4), resources, resources.fit_index(c, m))
        for row, c, m in zip(rows, cpu, memory, strict=True)
    ]
    assert scalar == pytest.approx(list(vectorised))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[[1, 500, 0.5]]", r"task_mix must be a list"),
        ([[1, 500]], r"task_mix\[0\]: expected \[gpus, milli, probability\]"),
        ([[1, 500, 0.5, 2000]], r"task_mix\[0\]: expected"),
        ([[1, "half", 0.5]], r"task_mix\[0\]: milli must be a number"),
        ([[1, 500, None]], r"task_mix\[0\]: probability must be a number"),
        ([[1, 500, 0.5, "4 cores", 1024]], r"task_mix\[0\]: cpu_milli must be a number or null"),
        ([[1, 500, 0.5], [1, 500, 0.5, -1, 1024]], r"task_mix\[1\]: cpu_milli must be >= 0"),
        ([[1, 500, 0.5, 1000, -5]], r"task_mix\[0\]: memory_mib must be >= 0"),
        ([[0, 0, 1.0]], r"task_mix\[0\]: a task without GPU needs its cpu_milli or memory_mib"),
        ([[0, 0, 1.0, None, None]], r"task_mix\[0\]: a task without GPU needs"),
        ([[0, 500, 1.0, 1000, 1024]], r"task_mix\[0\]: gpus 0 \(a task without GPU\) needs milli 0"),
        ([[1.5, 500, 1.0]], r"task_mix\[0\]: gpus and milli must be whole numbers"),
        ([[True, 500, 1.0]], r"task_mix\[0\]: gpus must be a number"),
    ],
)
def test_bad_task_mix_input_names_the_entry_and_field(raw: object, message: str) -> None:
    with pytest.raises(TaskMixError, match=message):
        parse_task_mix(raw)


def test_task_mix_parsing_keeps_three_field_entries_and_fills_five_field_ones() -> None:
    parsed = parse_task_mix([[1, 500, 0.5], [2, 1000, 0.25, 16000, None], [0, 0, 0.25, 4000, 8192]])
    assert parsed == ((1, 500, 0.5), (2, 1000, 0.25, 16000.0, None), (0, 0, 0.25, 4000.0, 8192.0))
