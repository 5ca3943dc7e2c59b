"""The no-kernel CUDA platform's names and launch flags, importable without SGLang.

benchmarks/gpu/cuda_nokernel_platform.py (which imports SGLang) holds the platform itself;
these constants live apart so that a process can read them before SGLang resolves its
platform (importing the platform module first would be a circular import).
"""

ENTRY_POINT_NAME = "kvctl_gpu_check_cuda"
PLATFORM_TARGET = "benchmarks.gpu.cuda_nokernel_platform:activate"
ATTENTION_BACKEND = "triton"
# The server flags this platform is meant for (gpu_check.sh passes them; a test checks that
# SGLang's parser resolves them): SGLang's Triton attention, sampling in torch, and no CUDA
# graphs (an out-of-tree platform must bring its own graph runner).
SERVER_FLAGS = ("--device", "cuda", "--attention-backend", ATTENTION_BACKEND,
                "--sampling-backend", "pytorch", "--cuda-graph-backend-decode=disabled",
                "--cuda-graph-backend-prefill=disabled")
# SGLang's radix tree core: its Python one. SGLang 0.5.23's bundled Rust core is built against
# its pinned torch 2.14.1; with the image's torch 2.11.0 (Python 3.12, measured here on the
# CPU) it crashes the embedded engine (SIGSEGV) and the server's scheduler ("insert value must
# be an int64 tensor, got Uint8"), while the same wheel under torch 2.14.1 works.
TREE_CORE = "python"
SERVER_ENV = {"SGLANG_PLATFORM": ENTRY_POINT_NAME, "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK": "1",
              "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND": TREE_CORE}
# The folder whose `sgl_kernel` sentinel answers SGLang's import-time kernel imports.
SENTINEL_DIR = "benchmarks/gpu/nokernel"
