"""CHECK-ONLY: not sgl_kernel. Sentinels for the names SGLang 0.5.23 imports from it at import
time when torch sees CUDA (see _sentinel.py); found only through the GPU check's PYTHONPATH."""

from sgl_kernel._sentinel import NoKernelError, install

NO_KERNEL = True  # tests and the check tell this sentinel from a real sgl_kernel by it
# layers/activation.py, layers/layernorm.py, layers/sampler.py, layers/moe (moe_sum),
# layers/quantization (int8_scaled_mm)
install(__name__, (
    "fused_add_rmsnorm", "gelu_and_mul", "gelu_tanh_and_mul", "gemma_fused_add_rmsnorm",
    "gemma_rmsnorm", "int8_scaled_mm", "moe_sum", "moe_sum_reduce", "rmsnorm", "silu_and_mul",
    "top_k_renorm_prob", "top_p_renorm_prob",
))
__all__ = ["NoKernelError"]
