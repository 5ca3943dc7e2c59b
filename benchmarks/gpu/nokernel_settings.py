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
# The folder whose `sgl_kernel` sentinel answers SGLang's import-time kernel imports.
SENTINEL_DIR = "benchmarks/gpu/nokernel"
