"""CHECK-ONLY sentinels: SGLang's GGUF quantization imports (layers/quantization/gguf.py)."""

from sgl_kernel._sentinel import install

install(__name__, ("ggml_dequantize", "ggml_moe_a8", "ggml_mul_mat_a8", "ggml_mul_mat_vec_a8"))
