"""`kvctl sandbox` only: an out-of-tree SGLang platform that runs `sglang.launch_server` on a
plain CPU.

Why it exists: SGLang 0.5.23's in-tree CPU platform (`SGLANG_USE_CPU_ENGINE=1`) calls
`sgl_kernel`'s CPU ops (built for AVX-512 Intel CPUs; no wheel for most machines), and without
it the CPU device falls through to CUDA-or-vllm kernels (`RotaryEmbedding` imports
`vllm._custom_ops`). An out-of-tree platform is SGLang's own seam for other hardware
(`sglang/srt/platforms/interface.py`, entry-point group `sglang.srt.platforms`): with
`current_platform.is_out_of_tree()` true, the layers take their torch-native paths
(`BaseFusedOp` dispatches on `get_dispatch_key_name()` = "native", the rotary embedding
skips the fallback kernel) and the attention backend is `torch_native`.

What it changes: nothing on disk and no SGLang code. It is the CPU device mixin SGLang ships
(`CpuDeviceMixin`: memory from psutil, gloo, no pinned memory) under the OOT platform enum.
Everything above the math kernels (HTTP server, tokenizer manager, scheduler, radix tree,
allocator, metrics, KV-event publisher) is SGLang's real code.

Scope: never active in a user's own server. kvctl's package metadata declares no
`sglang.srt.platforms` entry point (tests/unit/test_sandbox_scope.py checks that); the only
registration is the `*.dist-info/entry_points.txt` that kvctl/sandbox/launcher.py writes into
the sandbox's temp directory, on the sandbox server's PYTHONPATH only, selected with
`SGLANG_PLATFORM=kvctl_sandbox_cpu`. Nothing in kvctl imports this module; only that server
process does (it imports SGLang at module import time).
"""

from __future__ import annotations

from sglang.srt.platforms.cpu import CpuDeviceMixin
from sglang.srt.platforms.device_mixin import PlatformEnum
from sglang.srt.platforms.interface import PlatformCapabilities, SRTPlatform

ENTRY_POINT_NAME = "kvctl_sandbox_cpu"


class TorchNativeCpuPlatform(CpuDeviceMixin, SRTPlatform):
    """SGLang's CPU device operations, declared out-of-tree so layers use torch-native code."""

    _enum = PlatformEnum.OOT
    capabilities = PlatformCapabilities()  # no graph capture: nothing to capture on CPU

    def get_default_attention_backend(self) -> str:
        return "torch_native"

    def get_default_speculative_draft_attention_backend(self, algorithm: str) -> str:
        return "torch_native"

    def is_pin_memory_available(self, device=None) -> bool:
        return False

    def init_backend(self) -> None:
        from kvctl.sandbox import hicache_cpu  # SGLang's HiCache on this CPU (its docstring)

        hicache_cpu.register()


def activate() -> str:
    """The `sglang.srt.platforms` entry point: the platform class's qualified name."""
    return f"{__name__}.TorchNativeCpuPlatform"
