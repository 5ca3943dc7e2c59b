"""CHECK-ONLY sentinels for the names SGLang imports from `sgl_kernel` at import time on CUDA.

Not a kernel library: every name here is a `KernelSentinel` that raises `NoKernelError`, naming
itself, when called. benchmarks/gpu/cuda_nokernel_platform.py explains why the imports cannot
be avoided (SGLang's `is_cuda()` reads torch, not the platform) and why the calls are not made
(out of tree, SGLang's fused ops dispatch to their torch code; Triton attention; torch sampling).
A run that calls one fails loudly: the GPU check then reports which kernel it reached.
"""

from __future__ import annotations

import sys


class NoKernelError(RuntimeError):
    """A path that needs a real sgl_kernel kernel was reached under the no-kernel platform."""


class KernelSentinel:
    """Stands for `module.name`: calling it raises; its attributes are sentinels too
    (`scalar_types.uint4b8`)."""

    def __init__(self, qualname: str) -> None:
        self._qualname = qualname

    def __call__(self, *args, **kwargs):
        raise NoKernelError(f"{self._qualname} was called, but the GPU check runs without "
                            "sgl_kernel (benchmarks/gpu/cuda_nokernel_platform.py)")

    def __getattr__(self, attr: str) -> KernelSentinel:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return KernelSentinel(f"{self._qualname}.{attr}")

    def __repr__(self) -> str:
        return f"<no-kernel sentinel {self._qualname}>"


def install(module_name: str, names: tuple[str, ...]) -> None:
    """Bind each of `names` in `module_name` to a sentinel; any other name stays missing, so
    `from sgl_kernel import <other>` still raises ImportError as if sgl_kernel were absent."""
    module = sys.modules[module_name]
    for name in names:
        setattr(module, name, KernelSentinel(f"{module_name}.{name}"))
    module.SENTINEL_NAMES = names
