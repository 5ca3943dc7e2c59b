"""Preflight for the no-kernel CUDA platform: what SGLang resolves under it, as one JSON object.

    python benchmarks/gpu/nokernel_probe.py [--fake-cuda] [--model-path DIR]

Run in the environment the GPU check's server gets (nokernel_settings.SERVER_ENV, and PYTHONPATH
with the generated dist-info folder, the repository root and benchmarks/gpu/nokernel). Reports:
the platform SGLang activated, whether `is_cuda()` holds, whether `sgl_kernel` is the sentinel
and flashinfer absent, the forward each fused op dispatches to, SGLang's resolved server flags
(SERVER_FLAGS), and the import of every module the check runs (import_closure.CHECK_MODULES).
Exit 0 when all of these are as the platform intends (`ok` true), else 1.

--fake-cuda (tests on a machine without a GPU only): before SGLang loads, torch.cuda answers as
one H100 would (is_available, device count, name, capability 9.0, properties, memory); no CUDA
tensor is ever made, so what this proves is the import chain and the selection, not a kernel. On
the lent GPU machine the probe runs without it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "tiny_llama" / "config.json"


def fake_cuda() -> None:
    """torch.cuda answers as a one-GPU Hopper machine (mock: no GPU here; no kernel runs)."""
    import torch

    class Properties:
        name, major, minor = "NVIDIA H100 80GB HBM3", 9, 0
        total_memory, multi_processor_count, L2_cache_size = 80 << 30, 132, 50 << 20
        uuid = "fake-cuda-for-tests"

        def __getattr__(self, attr):  # any other property SGLang might read: a number
            return 0

    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.get_device_name = lambda *a, **k: Properties.name
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_properties = lambda *a, **k: Properties()
    torch.cuda.mem_get_info = lambda *a, **k: (70 << 30, 80 << 30)
    assert torch.version.cuda is not None, "--fake-cuda needs a CUDA build of torch"


def dispatch_report() -> dict[str, str]:
    """The method each fused op (built on the CPU) resolves to under the active platform, and
    whether the rotary embedding kept SGLang's rope kernel."""
    import torch
    from sglang.srt.layers.activation import SiluAndMul
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.layers.rotary_embedding.base import RotaryEmbedding

    rope = RotaryEmbedding(64, 64, 2048, 10000, True, torch.float32)
    ops = {"RMSNorm": RMSNorm(64), "SiluAndMul": SiluAndMul(), "RotaryEmbedding": rope}
    report = {name: op._resolve_forward_method().__name__ for name, op in ops.items()}
    report["RotaryEmbedding.use_fallback_kernel"] = str(rope.use_fallback_kernel)
    return report


def server_flags_report(model_path: str) -> dict:
    from sglang.srt.server_args import prepare_server_args

    from benchmarks.gpu.nokernel_settings import SERVER_FLAGS

    args = prepare_server_args(["--model-path", model_path, "--load-format", "dummy",
                                "--skip-tokenizer-init", *SERVER_FLAGS])
    return {"device": args.device, "attention_backend": args.attention_backend,
            "sampling_backend": args.sampling_backend,
            "cuda_graph_backend_decode": str(args.cuda_graph_backend_decode),
            "cuda_graph_backend_prefill": str(args.cuda_graph_backend_prefill)}


def probe(model_path: str) -> dict:
    import importlib.util

    from sglang.srt.platforms import current_platform
    from sglang.srt.utils import is_cuda

    from benchmarks.gpu.import_closure import CHECK_MODULES, import_all
    from benchmarks.gpu.nokernel_settings import ATTENTION_BACKEND, TREE_CORE

    try:
        import sgl_kernel

        sentinel = getattr(sgl_kernel, "NO_KERNEL", False)
    except ImportError:  # SGLang's own imports below then say where it is needed
        sentinel = False
    report = {
        "platform": type(current_platform).__name__,
        "out_of_tree": current_platform.is_out_of_tree(),
        "default_attention_backend": current_platform.get_default_attention_backend(),
        "supports_triton": current_platform.capabilities.supports_triton,
        "graph_capture": current_platform.capabilities.graph_capture,
        "is_cuda": is_cuda(),
        "sgl_kernel_is_sentinel": sentinel,
        "flashinfer_importable": importlib.util.find_spec("flashinfer") is not None,
        "skip_kernel_version_check": os.environ.get("SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK"),
        "tree_core_backend": os.environ.get("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"),
    }
    report["dispatch"] = dispatch_report()
    report["server_args"] = server_flags_report(model_path)
    try:
        import_all(CHECK_MODULES)
        report["imports"] = "ok"
    except ImportError as exc:
        report["imports"] = str(exc)
    report["ok"] = (
        report["platform"] == "CudaNoKernelPlatform" and report["out_of_tree"]
        and report["default_attention_backend"] == ATTENTION_BACKEND and report["is_cuda"]
        and report["sgl_kernel_is_sentinel"] and not report["flashinfer_importable"]
        and report["skip_kernel_version_check"] == "1"
        and report["tree_core_backend"] == TREE_CORE
        and report["dispatch"] == {
            "RMSNorm": "forward_native", "SiluAndMul": "forward_native",
            "RotaryEmbedding": "forward_native", "RotaryEmbedding.use_fallback_kernel": "False"}
        and report["server_args"] == {
            "device": "cuda", "attention_backend": ATTENTION_BACKEND,
            "sampling_backend": "pytorch", "cuda_graph_backend_decode": "disabled",
            "cuda_graph_backend_prefill": "disabled"}
        and report["imports"] == "ok")
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="nokernel_probe.py")
    parser.add_argument("--fake-cuda", action="store_true")
    parser.add_argument("--model-path", default=None)
    args = parser.parse_args(argv)
    if args.fake_cuda:
        fake_cuda()
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model_path or tmp
        if args.model_path is None:
            Path(tmp, "config.json").write_text(TINY.read_text())
        report = probe(model)
    print(json.dumps(report, sort_keys=True))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
