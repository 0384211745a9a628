"""GPU names in every spelling the data sets and NVML use map to one spec; unknown ones are marked as such."""

from __future__ import annotations

import math

import pytest

from advisor.gpus import GPU_SPECS, gpu_spec, normalize_gpu_model


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
        ("NVIDIA L4", "l4"),
        ("Tesla T4", "t4"),
        ("Tesla-V100-SXM2-32GB", "v100-32gb"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("Tesla P100-PCIE-16GB", "p100"),
        ("Tesla K80", "k80"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("NVIDIA GeForce RTX 2080 Ti", "rtx-2080ti"),
        ("Quadro RTX 6000", "rtx-6000"),
        ("k80", "k80"),
        ("p100", "p100"),
        ("v100", "v100"),
        ("rtx", "rtx-2080ti"),
        ("A100-40GB", "a100-40gb"),
    ],
)
def test_known_names_normalise_to_their_spec(name: str, key: str) -> None:
    assert normalize_gpu_model(name) == key
    assert gpu_spec(name).known
    assert gpu_spec(name).key == key


def test_every_spec_is_complete_and_plausible() -> None:
    for spec in GPU_SPECS.values():
        assert spec.memory_bytes >= 11 * (1 << 30)
        assert spec.fp16_tflops >= spec.fp32_tflops > 0
        assert spec.memory_bandwidth_bytes_per_s > 1e11


def test_newer_gpus_are_faster_in_the_table() -> None:
    assert gpu_spec("h100").fp16_tflops > gpu_spec("a100").fp16_tflops > gpu_spec("v100").fp16_tflops
    assert gpu_spec("v100").fp16_tflops > gpu_spec("p100").fp16_tflops > gpu_spec("k80").fp16_tflops


def test_unknown_model_keeps_its_name_and_has_no_numbers() -> None:
    spec = gpu_spec("NVIDIA Future GPU 9000")
    assert not spec.known
    assert spec.key == "future-gpu-9000"
    assert math.isnan(spec.fp16_tflops)
    assert math.isnan(spec.memory_bytes)
