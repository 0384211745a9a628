"""GPU names in every spelling the data sets and NVML use map to one spec; unknown ones are marked as such."""

from __future__ import annotations

import math

import pytest

from advisor.gpus import GPU_SPECS, gpu_spec, normalize_gpu_model, speed_key
from advisor.predictors import prior_speed_ratio


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


@pytest.mark.parametrize(
    ("spellings", "key"),
    [
        (("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", "H100", "h100"), "h100"),
        (("NVIDIA H100 PCIe", "NVIDIA-H100-PCIe", "h100-pcie"), "h100-pcie"),
        (("NVIDIA H200", "NVIDIA-H200", "H200 SXM 141GB"), "h200"),
        (("NVIDIA B200", "NVIDIA-B200", "b200"), "b200"),
        (("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB", "a100-80g", "A100 80GB"), "a100-80gb"),
        (("NVIDIA A30", "NVIDIA-A30", "a30"), "a30"),
        (("NVIDIA A10", "NVIDIA-A10", "A10"), "a10"),
        (("NVIDIA L40S", "NVIDIA-L40S", "l40s"), "l40s"),
        (("NVIDIA L4", "NVIDIA-L4", "L4"), "l4"),
        (("NVIDIA RTX 6000 Ada Generation", "NVIDIA-RTX-6000-Ada-Generation"), "rtx-6000-ada"),
        (("Tesla T4", "Tesla-T4", "T4"), "t4"),
        (("Tesla V100-SXM2-16GB", "Tesla-V100-SXM2-16GB", "V100", "V100M16", "v100"), "v100"),
        (("Tesla K80", "k80"), "k80"),
    ],
)
def test_every_spelling_names_one_gpu(spellings: tuple[str, ...], key: str) -> None:
    assert {normalize_gpu_model(s) for s in spellings} == {key}


def test_the_table_holds_the_data_sheet_figures_with_their_source() -> None:
    for spec in GPU_SPECS.values():
        assert spec.source, spec.key
        assert spec.vendor == "nvidia"
        assert spec.family
        assert spec.fp16_tflops >= spec.tf32_tflops >= min(spec.fp32_tflops, spec.tf32_tflops) > 0
    assert gpu_spec("b200").fp16_tflops > gpu_spec("h100").fp16_tflops > gpu_spec("a100").fp16_tflops


def test_memory_variants_share_one_speed_class_and_unknown_names_stay_unknown() -> None:
    assert speed_key("Tesla V100-SXM2-32GB") == speed_key("V100") == "v100"
    assert gpu_spec("Tesla V100-SXM2-32GB").memory_gib == 32
    assert speed_key("a100-80g") != speed_key("a100-40gb")  # different bandwidth
    assert not gpu_spec("G2").known  # openb's anonymised models are not guessed
    assert prior_speed_ratio("G2", "v100") is None
    assert prior_speed_ratio("Tesla V100-SXM2-32GB", "V100") == 1.0
