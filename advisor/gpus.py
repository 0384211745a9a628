"""One canonical GPU identity from any spelling, and the data-sheet figures the models reason with.

The throughput and interference models never see a GPU's *name* as a feature, only its specifications (memory,
memory bandwidth, dense FP16/FP32 throughput, compute capability). A model trained on V100 and T4 measurements can
therefore say something about an A100, and a GPU the data never saw gets a prior speed from its data sheet.

Names arrive in many spellings: NVML reports ``NVIDIA H100 80GB HBM3`` or ``Tesla V100-SXM2-32GB``, GPU feature
discovery labels nodes ``nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3``, Gavel uses ``k80``/``p100``/``v100``, Sia
``rtx`` (its RTX 2080 Ti nodes) and ``quad`` (Quadro RTX 6000), openb ``V100M32``, people write ``V100`` or
``a100-80g``. `gpu_spec` maps every one of them to one `GpuSpec` (vendor, family, memory, figures);
`normalize_gpu_model` gives its key. An unknown name is kept (lower-cased, vendor words dropped) with ``known=False``
and NaN figures: the LightGBM models treat NaN as a missing value, and the speed prior answers "unknown" instead of
guessing. Nothing is silently mapped to a GPU it is not.

Two spellings of one GPU that differ only in memory (V100 16 GB and 32 GB) have the same figures and so the same
`speed_key`: whatever is known of the speed of one holds for the other.

Figures are NVIDIA's published data-sheet numbers for one device (not one board; a K80 board is two), dense (no
structured sparsity): FP32 (non-tensor), TF32 tensor, FP16 tensor with FP32 accumulate (what mixed-precision training
uses; on GeForce cards that is half the FP16-accumulate figure). A GPU without tensor cores (K80, P100) has its
FP32 (K80) or packed FP16 (P100) rate in the tensor columns: what a framework gets when it asks for them. Memory
sizes are in GiB as sold (80 GB → 80 GiB); bandwidth in GB/s of the data sheet.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

GIB = 1 << 30

DATA_SHEET = "NVIDIA data sheet"


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """The canonical identity and data-sheet figures of one GPU model (one device, not one board)."""

    key: str
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    fp16_tflops: float
    fp32_tflops: float
    compute_capability: float
    known: bool = True
    tf32_tflops: float = math.nan
    vendor: str = "nvidia"
    family: str = ""
    speed_key: str = ""
    source: str = ""

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


# key, family, memory GiB, bandwidth GB/s, FP16 tensor (FP32 acc.), TF32 tensor, FP32 TFLOPS, compute capability,
# source. Dense figures (see the module docstring).
_TABLE: tuple[tuple[str, str, float, float, float, float, float, float, str], ...] = (
    ("b200", "b200", 180, 8000, 2250, 1100, 75, 10.0, f"{DATA_SHEET} (HGX B200, per GPU)"),
    ("h200", "h200", 141, 4800, 989, 494, 67, 9.0, f"{DATA_SHEET} (H200 SXM)"),
    ("h100", "h100", 80, 3350, 989, 494, 67, 9.0, f"{DATA_SHEET} (H100 SXM)"),
    ("h100-nvl", "h100", 94, 3900, 835, 417, 60, 9.0, f"{DATA_SHEET} (H100 NVL)"),
    ("h100-pcie", "h100", 80, 2000, 756, 378, 51, 9.0, f"{DATA_SHEET} (H100 PCIe)"),
    ("a100-80gb", "a100", 80, 2039, 312, 156, 19.5, 8.0, f"{DATA_SHEET} (A100 80GB SXM)"),
    ("a100-80gb-pcie", "a100", 80, 1935, 312, 156, 19.5, 8.0, f"{DATA_SHEET} (A100 80GB PCIe)"),
    ("a100-40gb", "a100", 40, 1555, 312, 156, 19.5, 8.0, f"{DATA_SHEET} (A100 40GB)"),
    ("a30", "a30", 24, 933, 165, 82, 10.3, 8.0, f"{DATA_SHEET} (A30)"),
    ("a40", "a40", 48, 696, 150, 75, 37.4, 8.6, f"{DATA_SHEET} (A40)"),
    ("a10", "a10", 24, 600, 125, 62.5, 31.2, 8.6, f"{DATA_SHEET} (A10)"),
    ("a10g", "a10", 24, 600, 70, 35, 31.2, 8.6, "AWS G5 instance figures (A10G, an A10 variant)"),
    ("l40s", "l40s", 48, 864, 362, 183, 91.6, 8.9, f"{DATA_SHEET} (L40S)"),
    ("l40", "l40", 48, 864, 181, 90.5, 90.5, 8.9, f"{DATA_SHEET} (L40)"),
    ("l4", "l4", 24, 300, 121, 60, 30.3, 8.9, f"{DATA_SHEET} (L4)"),
    ("rtx-6000-ada", "rtx-6000-ada", 48, 960, 364, 182, 91.1, 8.9, f"{DATA_SHEET} (RTX 6000 Ada Generation)"),
    ("t4", "t4", 16, 320, 65, 8.1, 8.1, 7.5, f"{DATA_SHEET} (T4)"),
    ("v100-32gb", "v100", 32, 900, 125, 15.7, 15.7, 7.0, f"{DATA_SHEET} (V100 SXM2 32GB)"),
    ("v100", "v100", 16, 900, 125, 15.7, 15.7, 7.0, f"{DATA_SHEET} (V100 SXM2)"),
    ("v100-pcie", "v100", 16, 900, 112, 14, 14, 7.0, f"{DATA_SHEET} (V100 PCIe)"),
    ("p100", "p100", 16, 732, 18.7, 9.3, 9.3, 6.0, f"{DATA_SHEET} (P100 PCIe 16GB)"),
    ("k80", "k80", 12, 240, 4.1, 4.1, 4.1, 3.7, f"{DATA_SHEET} (K80, one of its two GPUs)"),
    ("rtx-3090", "rtx-3090", 24, 936, 71, 35.6, 35.6, 8.6, "NVIDIA GeForce RTX 3090 specifications"),
    ("rtx-2080ti", "rtx-2080ti", 11, 616, 53.8, 13.4, 13.4, 7.5, "NVIDIA GeForce RTX 2080 Ti specifications"),
    ("rtx-6000", "rtx-6000", 24, 672, 130.5, 16.3, 16.3, 7.5, f"{DATA_SHEET} (Quadro RTX 6000)"),
)


def _speed_figures(row: tuple[str, str, float, float, float, float, float, float, str]) -> tuple[float, ...]:
    return row[3:8]


# The shortest key among the rows with the same speed figures names the speed class: V100 16 GB and 32 GB are one,
# "v100" (the name the public data sets use).
_SPEED_KEYS: dict[tuple[float, ...], str] = {}
for _row in _TABLE:
    _SPEED_KEYS[_speed_figures(_row)] = min(_SPEED_KEYS.get(_speed_figures(_row), _row[0]), _row[0], key=len)

GPU_SPECS: dict[str, GpuSpec] = {
    key: GpuSpec(
        key,
        memory_gib * GIB,
        bandwidth_gb_s * 1e9,
        fp16,
        fp32,
        cc,
        tf32_tflops=tf32,
        family=family,
        speed_key=_SPEED_KEYS[(bandwidth_gb_s, fp16, tf32, fp32, cc)],
        source=source,
    )
    for key, family, memory_gib, bandwidth_gb_s, fp16, tf32, fp32, cc, source in _TABLE
}

# Checked in order on the cleaned name (lower case, vendor words dropped, "-" and "_" as spaces); the first pattern
# found wins, so more specific names come first.
_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"\bb200\b", "b200"),
    (r"\bh200\b", "h200"),
    (r"h100.*nvl", "h100-nvl"),
    (r"h100.*pcie", "h100-pcie"),
    (r"h100|h800", "h100"),
    (r"a100.*80.*pcie|a100.*pcie.*80", "a100-80gb-pcie"),
    (r"a100.*80", "a100-80gb"),
    (r"a100|a800", "a100-40gb"),
    (r"a10g", "a10g"),
    (r"\ba10\b", "a10"),
    (r"\ba30\b", "a30"),
    (r"\ba40\b", "a40"),
    (r"l40s", "l40s"),
    (r"\bl40\b", "l40"),
    (r"\bl4\b", "l4"),
    (r"rtx ?6000 ?ada|6000 ada", "rtx-6000-ada"),
    (r"\bt4\b", "t4"),
    (r"v100.*32", "v100-32gb"),
    (r"v100.*pcie", "v100-pcie"),
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
    """Identity and figures of GPU `name` (any spelling); NaN figures and ``known=False`` for an unknown model."""
    key = normalize_gpu_model(name)
    spec = GPU_SPECS.get(key)
    if spec is not None:
        return spec
    return GpuSpec(key, math.nan, math.nan, math.nan, math.nan, math.nan, known=False, vendor="", speed_key=key)


def speed_key(name: str) -> str:
    """The key of the GPU whose data-sheet speed `name` shares (``Tesla V100-SXM2-32GB`` → ``v100``)."""
    return gpu_spec(name).speed_key
