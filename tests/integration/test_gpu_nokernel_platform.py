"""The GPU check's no-kernel CUDA platform (issue 27 item 2): what can be proven without a GPU.

SGLang's real platform discovery, fused-op dispatch, server-argument parsing and import chain
run here. The GPU itself cannot: `nokernel_probe.py --fake-cuda` makes torch.cuda answer as one
H100 would (availability, name, capability, memory) so that SGLang takes its CUDA import
branches; no CUDA tensor is made and no kernel runs (a mock, because no GPU is here). On the
lent machine benchmarks/gpu_check.sh runs the same probe without the fake, then the server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu.dist_info import write_all  # noqa: E402
from benchmarks.gpu.nokernel_settings import SENTINEL_DIR, SERVER_ENV  # noqa: E402

PROBE = ROOT / "benchmarks" / "gpu" / "nokernel_probe.py"


def _env(dists: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
    env["PYTHONPATH"] = os.pathsep.join([str(dists), str(ROOT), str(ROOT / SENTINEL_DIR)])
    env.update(SERVER_ENV, **extra)
    return env


@pytest.mark.unit
def test_dist_info_declares_the_plugin_and_the_platform_entry_points(tmp_path):
    """The generated dist-info folders carry kvctl's SGLang plugin entry point (read from
    pyproject.toml) and the platform's, which is how SGLang finds both on the device."""
    write_all(tmp_path)
    found = {(ep.group, ep.name, ep.value)
             for dist in distributions(path=[str(tmp_path)]) for ep in dist.entry_points}
    assert found >= {
        ("sglang.srt.plugins", "kvctl", "engine_adapter.plugin.entry:register"),
        ("sglang.srt.platforms", "kvctl_gpu_check_cuda",
         "benchmarks.gpu.cuda_nokernel_platform:activate")}


@pytest.mark.unit
def test_the_sentinel_raises_on_a_call_and_lacks_unlisted_names(tmp_path):
    """Calling a sentinel kernel raises NoKernelError naming it; a name SGLang does not import
    at import time stays missing (ImportError), as if sgl_kernel were absent."""
    code = (
        "import sgl_kernel, torch\n"
        "try:\n    sgl_kernel.silu_and_mul(torch.ones(2, 4))\n"
        "except sgl_kernel.NoKernelError as e:\n    print('raised:', e)\n"
        "try:\n    from sgl_kernel import merge_state\n"
        "except ImportError:\n    print('merge_state: ImportError')\n"
        "from sgl_kernel.utils import is_arch_support_pdl\n"
        "print('pdl:', is_arch_support_pdl())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "raised: sgl_kernel.silu_and_mul was called, but the GPU check runs without sgl_kernel "
        "(benchmarks/gpu/cuda_nokernel_platform.py)",
        "merge_state: ImportError",
        "pdl: False"]


@pytest.mark.integration
@pytest.mark.slow
def test_under_cuda_sglang_selects_the_platform_native_ops_and_imports_without_kernels(
        tmp_path):
    """With torch reporting CUDA (faked), SGLANG_PLATFORM picks the no-kernel platform:
    out of tree, Triton attention by default; RMSNorm, SiLU-and-mul and the rotary embedding
    dispatch to their torch forward (no rope kernel); the check's server flags resolve to
    cuda / triton / pytorch sampling / no CUDA graphs; is_cuda() holds, so SGLang's CUDA
    import branches ran, against the sentinel sgl_kernel with flashinfer absent; and every
    module the check runs imports."""
    write_all(tmp_path)
    done = subprocess.run([sys.executable, str(PROBE), "--fake-cuda"], capture_output=True,
                          text=True, timeout=600, env=_env(tmp_path), cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert json.loads(done.stdout) == {
        "platform": "CudaNoKernelPlatform", "out_of_tree": True,
        "default_attention_backend": "triton", "supports_triton": True, "graph_capture": False,
        "is_cuda": True, "sgl_kernel_is_sentinel": True, "flashinfer_importable": False,
        "skip_kernel_version_check": "1", "tree_core_backend": "python",
        "dispatch": {"RMSNorm": "forward_native", "SiluAndMul": "forward_native",
                     "RotaryEmbedding": "forward_native",
                     "RotaryEmbedding.use_fallback_kernel": "False"},
        "server_args": {"device": "cuda", "attention_backend": "triton",
                        "sampling_backend": "pytorch", "cuda_graph_backend_decode": "disabled",
                        "cuda_graph_backend_prefill": "disabled"},
        "imports": "ok", "ok": True}


@pytest.mark.integration
@pytest.mark.slow
def test_without_the_sentinel_sglang_cannot_import_its_cuda_layers(tmp_path):
    """The sentinel is needed: under faked CUDA with no sgl_kernel on the path, the probe
    fails inside SGLang, at activation.py's import-time `from sgl_kernel import ...`."""
    write_all(tmp_path)
    env = _env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    done = subprocess.run([sys.executable, str(PROBE), "--fake-cuda"], capture_output=True,
                          text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 1
    assert "sglang/srt/layers/activation.py" in done.stderr
    assert "ModuleNotFoundError: No module named 'sgl_kernel'" in done.stderr
