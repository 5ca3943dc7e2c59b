"""Accelerator presets: memory capacity, memory bandwidth, host link, peak tensor throughput.

Numbers are the vendors' datasheet figures, per GPU (SXM/OAM module unless named):

| preset    | memory          | HBM bandwidth | host link         | dense BF16    | dense FP8     |
|-----------|-----------------|---------------|-------------------|---------------|---------------|
| A100-80GB | 80 GB HBM2e     | 2,039 GB/s    | PCIe Gen4 x16     | 312 TFLOPS    | none          |
| H100-SXM  | 80 GB HBM3      | 3.35 TB/s     | PCIe Gen5 x16     | 989.4 TFLOPS  | 1,978.9 TFLOPS|
| H200      | 141 GB HBM3e    | 4.8 TB/s      | PCIe Gen5 x16     | 989.4 TFLOPS  | 1,978.9 TFLOPS|
| B200      | 180 GB HBM3e    | 8 TB/s        | PCIe Gen5 x16     | 2,250 TFLOPS  | 4,500 TFLOPS  |
| L40S      | 48 GB GDDR6     | 864 GB/s      | PCIe Gen4 x16     | 362.05 TFLOPS | 733 TFLOPS    |
| MI300X    | 192 GB HBM3     | 5.3 TB/s      | PCIe Gen5 x16     | 1,307.4 TFLOPS| 2,614.9 TFLOPS|

Sources: NVIDIA A100 datasheet (80GB SXM), NVIDIA H100 Tensor Core GPU datasheet (SXM),
NVIDIA H200 datasheet (SXM), NVIDIA HGX/DGX B200 datasheet (1,440 GB over 8 GPUs; 1,000 W
HGX clocks; the 192 GB figure is the physical 8 x 24 GB stack total), NVIDIA L40S datasheet,
AMD Instinct MI300X datasheet. NVIDIA quotes tensor throughput "with sparsity"; the dense
figures here are half of those. A100 has no FP8 tensor cores (`peak_fp8_flops` is None).

Capacity units: memory is sold in stacks of 2^30-byte gigabytes, so "80 GB" is 80 GiB
(85,899,345,920 bytes, the value seed 003 napkin math 0.2 uses; 8 x 80 GiB = the 687.2 GB
node of napkin math 0.1). A driver shows slightly less (81,559 MiB on an H100); the runtime
reserve covers that. Host links are the nominal per-direction rate of the slot (PCIe Gen4
x16: 32 GB/s, Gen5 x16: 64 GB/s); DMA achieves roughly 80-90% of it (seed 003 Table 6:
32-64 GB/s).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace

from kvctl.errors import InputError
from kvctl.util.units import GIB

_TB = 10**12
_TFLOPS = 10**12
_PCIE4_X16 = ("PCIe Gen4 x16", 32 * 10**9)
_PCIE5_X16 = ("PCIe Gen5 x16", 64 * 10**9)


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """One accelerator's datasheet numbers; bytes and bytes/s and FLOP/s throughout.

    `peak_bf16_flops` and `peak_fp8_flops` are dense (no structured sparsity); the engine's
    roofline uses them for compute-bound prefill and `hbm_bandwidth_bytes_per_s` for
    memory-bound decode. `peak_fp8_flops` is None for parts without FP8 tensor cores.
    """

    name: str
    hbm_bytes: int
    hbm_bandwidth_bytes_per_s: float
    host_link_bytes_per_s: float
    host_link_name: str
    peak_bf16_flops: float
    peak_fp8_flops: float | None
    memory_kind: str = "HBM"


def _gpu(name, gib, bandwidth, link, bf16_tflops, fp8_tflops, memory_kind):
    return GpuSpec(
        name=name,
        hbm_bytes=int(gib * GIB),
        hbm_bandwidth_bytes_per_s=bandwidth,
        host_link_bytes_per_s=link[1],
        host_link_name=link[0],
        peak_bf16_flops=bf16_tflops * _TFLOPS,
        peak_fp8_flops=None if fp8_tflops is None else fp8_tflops * _TFLOPS,
        memory_kind=memory_kind,
    )


GPU_PRESETS: dict[str, GpuSpec] = {
    spec.name: spec
    for spec in (
        _gpu("A100-80GB", 80, 2.039 * _TB, _PCIE4_X16, 312, None, "HBM2e"),
        _gpu("H100-SXM", 80, 3.35 * _TB, _PCIE5_X16, 989.4, 1978.9, "HBM3"),
        _gpu("H200", 141, 4.8 * _TB, _PCIE5_X16, 989.4, 1978.9, "HBM3e"),
        _gpu("B200", 180, 8.0 * _TB, _PCIE5_X16, 2250, 4500, "HBM3e"),
        _gpu("L40S", 48, 0.864 * _TB, _PCIE4_X16, 362.05, 733, "GDDR6"),
        _gpu("MI300X", 192, 5.3 * _TB, _PCIE5_X16, 1307.4, 2614.9, "HBM3"),
    )
}

_ALIASES = {
    "a100": "A100-80GB",
    "a100-80g": "A100-80GB",
    "a100-sxm": "A100-80GB",
    "h100": "H100-SXM",
    "h100-sxm5": "H100-SXM",
    "h100-80gb": "H100-SXM",
    "h200-sxm": "H200",
    "b200-sxm": "B200",
}


def resolve_gpu(name: str) -> GpuSpec:
    """The preset called `name` (case-insensitive, a few aliases such as H100).

    Raises InputError naming the closest presets when unknown.
    """
    key = str(name).strip().lower()
    by_lower = {preset.lower(): preset for preset in GPU_PRESETS}
    preset = by_lower.get(key) or _ALIASES.get(key)
    if preset is None:
        close = difflib.get_close_matches(key, list(by_lower) + list(_ALIASES), n=3, cutoff=0.4)
        names = list(dict.fromkeys(by_lower.get(c) or _ALIASES[c] for c in close))
        hint = f"closest: {', '.join(names)}" if names else f"presets: {', '.join(GPU_PRESETS)}"
        raise InputError(f"unknown GPU {name!r}; {hint} (or give --hbm-gb)")
    return GPU_PRESETS[preset]


def with_capacity(spec: GpuSpec, hbm_bytes: int) -> GpuSpec:
    """`spec` with its memory capacity replaced (for --hbm-gb); the name says so."""
    if hbm_bytes <= 0:
        raise InputError(f"HBM capacity must be positive, got {hbm_bytes} bytes")
    return replace(spec, name=f"{spec.name} (custom capacity)", hbm_bytes=int(hbm_bytes))
