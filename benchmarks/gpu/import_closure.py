"""Which installed distributions the GPU check's code imports (issue 27 item 1).

    python benchmarks/gpu/import_closure.py [--json]

Imports, in this fresh interpreter, every module the GPU check (benchmarks/gpu_check.sh)
runs first-hand: SGLang's server entry and the modules its scheduler process builds a Llama
model runner from (triton and torch-native attention, the radix cache, the KV pool), kvctl's
CLI commands the check calls, the embedded engine, kvctl's SGLang plugin and the check's load
probe. Then it maps every loaded module to the distribution that installed it
(`importlib.metadata.packages_distributions`) and prints the sorted distribution names, one a
line (or a JSON list). The standard library and the repository's own packages are left out.

Two callers: tests/unit/test_gpu_wheel_set.py (CI's Python 3.11 venv) checks every name is on
the lent image or in the wheel manifest; benchmarks/gpu_wheels.sh --prove runs it under
Python 3.12 with only the image's packages plus the carried wheels, where an import that the
set cannot satisfy fails (exit 1, the missing module named).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# What the check imports first-hand; SGLang's own imports follow from these. The scheduler
# process's model-runner stack is listed because launch_server imports it only in children.
CHECK_MODULES = (
    "sglang.launch_server",
    "sglang.srt.entrypoints.http_server",
    "sglang.srt.managers.scheduler",
    "sglang.srt.managers.detokenizer_manager",
    "sglang.srt.model_executor.model_runner",
    "sglang.srt.models.llama",
    "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.layers.attention.torch_native_backend",
    "sglang.srt.mem_cache.radix_cache",
    "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.model_loader.loader",
    "kvctl.cli.app",
    "kvctl.cli.replay",
    "kvctl.cli.check",
    "kvctl.cli.inspect",
    "engine_adapter.embedded.engine",
    "engine_adapter.plugin.entry",
    "engine_adapter.plugin.hooks",
    "engine_adapter.plugin.server",
    # imported lazily, at the plugin's attach and by the engine's what-if feed: the what-if
    # shadow's numba kernels (numba is on the image; the proof's stand-in once lacked it)
    "engine_adapter.plugin.attach",
    "engine_adapter.plugin.runtime",
    "engine_adapter.instrument.whatif",
    "engine_adapter.embedded.whatif_feed",
    "benchmarks.gpu_check_load",
)
OWN = {"kvctl", "engine_adapter", "telemetry", "benchmarks", "tests"}


def import_all(modules=CHECK_MODULES) -> None:
    """Import each module; the first failure raises, naming the module."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - re-raised with the module named
            raise ImportError(f"importing {name}: {type(exc).__name__}: {exc}") from exc


def loaded_distributions() -> list[str]:
    """Distribution names (normalised: lower case, '_' and '.' as '-') of loaded modules.

    A top-level name that several distributions share (a namespace package such as
    `opentelemetry`) is resolved by the module's file against each one's RECORD."""
    by_top = md.packages_distributions()
    stdlib = set(sys.stdlib_module_names)
    owners: dict[str, set[str]] = {}
    found: set[str] = set()
    for name, module in list(sys.modules.items()):
        top = name.split(".", 1)[0]
        dists = by_top.get(top, ())
        if top in stdlib or top in OWN or not dists:
            continue
        if len(set(dists)) == 1:
            found.add(normalise(dists[0]))
            continue
        path = getattr(module, "__file__", None)
        if path:
            found.update(_owner(path, set(dists), owners))
    return sorted(found)


def _owner(path: str, dists: set[str], owners: dict[str, set[str]]) -> set[str]:
    """The distribution(s) among `dists` whose RECORD lists the file at `path`."""
    for dist in dists:
        if dist not in owners:
            files = md.distribution(dist).files or ()
            owners[dist] = {str(f.locate().resolve()) for f in files}
    real = str(Path(path).resolve())
    return {normalise(d) for d in dists if real in owners[d]}


def normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("SGLANG_PLATFORM", "")  # no platform is activated by importing
    try:
        import_all()
    except ImportError as exc:
        print(f"import_closure: {exc}", file=sys.stderr)
        return 1
    names = loaded_distributions()
    print(json.dumps(names) if "--json" in argv else "\n".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
