"""SANDBOX: the CPU HiCache stack strategy, re-exported from engine_adapter/embedded/hicache_cpu.py.

It moved there because the embedded engine's replay (`kvctl replay --hicache-ratio`) registers
it too and engine_adapter never imports kvctl; one module, so `register()` runs once per process
whichever path imports it first.
"""

from engine_adapter.embedded.hicache_cpu import (  # noqa: F401
    IO_BACKEND,
    MEM_LAYOUT,
    CpuHiCacheStrategy,
    CpuMHATokenToKVPoolHost,
    register,
    transfer_kv_direct,
)
