"""CHECK-ONLY: an out-of-tree SGLang platform that serves on CUDA without SGLang's kernel packages.

Why it exists (issue 27 item 2): the lent GPU machine has torch 2.11 and Triton 3.6 but no
network, and a call carries at most 64 MiB; SGLang's CUDA kernel packages (`sglang-kernel`,
`flashinfer`) are hundreds of MB and built for SGLang's pinned torch 2.14. This platform keeps
SGLang's model runner on the GPU with Triton and torch code only.

What it is: SGLang's own CUDA device mixin (`CudaDeviceMixin`: CUDA memory queries, NCCL, pinned
memory) under the out-of-tree enum, SGLang's seam for other hardware
(`sglang/srt/platforms/interface.py`). Out of tree, `BaseFusedOp` layers (RMSNorm, SiLU-and-mul,
rotary) dispatch on `get_dispatch_key_name()` = "native", their torch code; the attention
backend defaults to `triton` (SGLang's Triton kernels, compiled by the image's Triton); with
`supports_triton` the allocator and req-to-token writers keep their Triton kernels. The server
is launched with nokernel_settings.SERVER_FLAGS (benchmarks/gpu_check.sh):
sampling in torch, no graph runner (an out-of-tree platform must supply its own), and SGLang's
Python tree core (nokernel_settings.TREE_CORE says why). Everything else is SGLang's:
scheduler, radix cache, paged allocator, KV pool on CUDA, metrics, KV events, kvctl's plugin.

The one kernel import that cannot be avoided: SGLang decides `is_cuda()` from torch alone, and on
CUDA its modules import 36 `sgl_kernel` names at import time, whatever the platform
(`layers/activation.py`, `layers/layernorm.py`, `layers/sampler.py`,
`layers/attention/triton_backend.py`, and the quantization, MoE and HiCache modules the
server imports). `benchmarks/gpu/nokernel/sgl_kernel` answers exactly those imports with
functions that raise `NoKernelError` when called (a run that reached one fails, naming it),
plus one capability query that is no kernel (`is_arch_support_pdl`: False). flashinfer stays
absent: SGLang imports it lazily or under try/except on these paths.

How it is found: only by a process whose PYTHONPATH holds the repository root, the sentinel
folder and a generated dist-info (benchmarks/gpu/dist_info.py), started with
nokernel_settings.SERVER_ENV (`SGLANG_PLATFORM=kvctl_gpu_check_cuda`, ...). kvctl never imports
this module.
"""

from __future__ import annotations

from sglang.srt.platforms.cuda import CudaDeviceMixin
from sglang.srt.platforms.device_mixin import PlatformEnum
from sglang.srt.platforms.interface import PlatformCapabilities, SRTPlatform

from benchmarks.gpu.nokernel_settings import ATTENTION_BACKEND


class CudaNoKernelPlatform(CudaDeviceMixin, SRTPlatform):
    """SGLang's CUDA device operations, declared out-of-tree so layers use torch/Triton code."""

    _enum = PlatformEnum.OOT
    # Triton launches on CUDA (the image's Triton 3.6); no graph capture, no sgl_kernel
    # HiCache transfer kernels, NCCL left to SGLang's in-tree choice (one GPU: no groups).
    capabilities = PlatformCapabilities(supports_triton=True)

    def get_default_attention_backend(self) -> str:
        return ATTENTION_BACKEND

    def get_default_speculative_draft_attention_backend(self, algorithm: str) -> str:
        return ATTENTION_BACKEND


def activate() -> str:
    """The `sglang.srt.platforms` entry point: the platform class's qualified name."""
    return f"{__name__}.CudaNoKernelPlatform"
