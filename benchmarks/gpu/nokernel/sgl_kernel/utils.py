"""CHECK-ONLY: layers/attention/triton_backend.py asks whether programmatic dependent launch
(PDL) may be used. No kernel: the answer is no, which SGLang's Triton kernels handle by
launching without the PDL attribute."""

SENTINEL_NAMES = ("is_arch_support_pdl",)


def is_arch_support_pdl() -> bool:
    return False
