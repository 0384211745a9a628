"""GPU model specifications, so that the models can reason about GPU types they were not trained on.

The throughput and interference models never see a GPU's *name* as a feature, only its specifications (memory,
memory bandwidth, dense FP16/FP32 throughput, compute capability). A model trained on V100 and T4 measurements can
therefore say something sensible about an A100, and the nearest-GPU baseline can pick "the most similar GPU".

Names arrive in many spellings: NVML reports ``NVIDIA H100 80GB HBM3``, Gavel uses ``k80``/``p100``/``v100``, Sia
``rtx`` (its RTX 2080 Ti nodes), Kubernetes labels ``Tesla-T4``. `normalize_gpu_model` maps all of them to one key
of `GPU_SPECS`. An unknown name is kept (lower-cased, vendor words dropped) and `gpu_spec` returns a spec whose numbers
are NaN with ``known=False``: the LightGBM models treat NaN as a missing value, and the baselines fall back to the
unscaled estimate. Nothing guesses numbers for a GPU it does not know.

FP16 figures are dense tensor-core throughput with FP32 accumulation (what mixed-precision training uses; on GeForce
cards that is half the FP16-accumulate figure on the data sheet). Memory sizes are in GiB as sold (80 GB → 80 GiB).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """Data-sheet numbers of one GPU model (one device, not one board)."""

    key: str
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    fp16_tflops: float
    fp32_tflops: float
    compute_capability: float
    known: bool = True


# key, memory GiB, memory bandwidth GB/s, dense FP16 (FP32-accumulate) TFLOPS, FP32 TFLOPS, compute capability
_TABLE: tuple[tuple[str, float, float, float, float, float], ...] = (
    ("h200", 141, 4800, 989, 67, 9.0),
    ("h100", 80, 3350, 989, 67, 9.0),
    ("h100-pcie", 80, 2000, 756, 51, 9.0),
    ("a100-80gb", 80, 2039, 312, 19.5, 8.0),
    ("a100-40gb", 40, 1555, 312, 19.5, 8.0),
    ("a10", 24, 600, 125, 31.2, 8.6),
    ("a10g", 24, 600, 70, 31.2, 8.6),
    ("l40s", 48, 864, 362, 91.6, 8.9),
    ("l4", 24, 300, 121, 30.3, 8.9),
    ("t4", 16, 320, 65, 8.1, 7.5),
    ("v100-32gb", 32, 900, 125, 15.7, 7.0),
    ("v100", 16, 900, 125, 15.7, 7.0),
    ("p100", 16, 732, 18.7, 9.3, 6.0),
    ("k80", 12, 240, 4.1, 4.1, 3.7),
    ("rtx-3090", 24, 936, 71, 35.6, 8.6),
    ("rtx-2080ti", 11, 616, 53.8, 13.4, 7.5),
    ("rtx-6000", 24, 672, 130.5, 16.3, 7.5),
)

GPU_SPECS: dict[str, GpuSpec] = {
    key: GpuSpec(key, memory_gib * GIB, bandwidth_gb_s * 1e9, fp16, fp32, cc)
    for key, memory_gib, bandwidth_gb_s, fp16, fp32, cc in _TABLE
}

# Checked in order; the first pattern found in the cleaned name wins, so more specific names come first.
_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"h200", "h200"),
    (r"h100.*pcie|h100 nvl", "h100-pcie"),
    (r"h100|h800", "h100"),
    (r"a100.*80", "a100-80gb"),
    (r"a100|a800", "a100-40gb"),
    (r"a10g", "a10g"),
    (r"\ba10\b", "a10"),
    (r"l40s", "l40s"),
    (r"\bl4\b", "l4"),
    (r"\bt4\b", "t4"),
    (r"v100.*32", "v100-32gb"),
    (r"v100", "v100"),
    (r"p100", "p100"),
    (r"k80", "k80"),
    (r"3090", "rtx-3090"),
    (r"2080 ?ti", "rtx-2080ti"),
    (r"rtx ?6000", "rtx-6000"),
)

# Short names used by public data sets: Sia calls its RTX 2080 Ti nodes "rtx" and its Quadro RTX 6000 nodes "quad".
ALIASES: dict[str, str] = {"rtx": "rtx-2080ti", "quad": "rtx-6000"}

_VENDOR_WORDS = re.compile(r"\b(nvidia|tesla|geforce|quadro)\b")


@lru_cache(maxsize=1024)
def normalize_gpu_model(name: str) -> str:
    """The `GPU_SPECS` key for `name`, or the cleaned name itself when the model is unknown.

    >>> normalize_gpu_model("NVIDIA H100 80GB HBM3")
    'h100'
    >>> normalize_gpu_model("Tesla-V100-SXM2-32GB")
    'v100-32gb'
    """
    cleaned = name.strip().lower().replace("_", " ").replace("-", " ")
    if cleaned in GPU_SPECS or cleaned.replace(" ", "-") in GPU_SPECS:
        return cleaned.replace(" ", "-")
    if cleaned in ALIASES:
        return ALIASES[cleaned]
    cleaned = " ".join(_VENDOR_WORDS.sub(" ", cleaned).split())
    for pattern, key in _PATTERNS:
        if re.search(pattern, cleaned):
            return key
    return cleaned.replace(" ", "-") or "unknown"


@lru_cache(maxsize=1024)
def gpu_spec(name: str) -> GpuSpec:
    """Specifications of GPU `name` (any spelling); NaN numbers and ``known=False`` for an unknown model."""
    key = normalize_gpu_model(name)
    spec = GPU_SPECS.get(key)
    if spec is not None:
        return spec
    return GpuSpec(key, math.nan, math.nan, math.nan, math.nan, math.nan, known=False)
