"""What the replay's direct path imports and how (engine_adapter/embedded/sglang_imports.py).

The import tests run a fresh interpreter, so that every import is the first one and counts:

- SGLang's cache modules load with the garbage collector paused, and the heap is frozen
  afterwards (the start-up and teardown savings the module docstring measures);
- the direct path builds no ModelConfig of its own and sizes its pool as ModelConfig would
  (SGLang's `publish` still builds one internally, in milliseconds: see sglang_imports);
- `transformers` arrives only through SGLang's own module-level imports (the chains in
  sglang_imports' docstring), never through a kvctl module.

Real SGLang 0.5.23 throughout; nothing is mocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def run_child(code: str) -> dict:
    """Run `code` in a fresh interpreter at the repository root; returns the JSON object it
    prints last on stdout."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cache_modules_load_with_the_collector_paused_then_freeze():
    """load() runs (almost) no collection while importing ~5,800 modules, where the collector
    left on runs ~1,700 (1,564 young, 142 middle, 9 full, measured 2026-12-02); an explicit
    gc.collect() inside a dependency still runs, hence the small allowance. The collector
    is enabled again, what was imported is frozen, and a second call imports nothing."""
    doc = run_child("""
        import gc, json, sys
        from engine_adapter.embedded import sglang_imports
        before = [s["collections"] for s in gc.get_stats()]
        loaded = sglang_imports.load()
        after = [s["collections"] for s in gc.get_stats()]
        count = len(sys.modules)
        again = sglang_imports.load()
        print(json.dumps({"before": before, "after": after, "enabled": gc.isenabled(),
                          "frozen": gc.get_freeze_count(), "modules": count,
                          "same": again is loaded, "grew": len(sys.modules) - count,
                          "steps": [m in sys.modules for m in sglang_imports.STEP_MODULES],
                          "version": loaded.sglang_version}))
    """)
    ran = [after - before for before, after in zip(doc["before"], doc["after"])]
    assert sum(ran) <= 5, ran
    assert doc["enabled"] is True
    assert doc["modules"] > 1000  # SGLang's cache really was imported here
    assert doc["frozen"] > 100_000  # the imported heap (~670,000 objects) is frozen
    assert doc["same"] is True and doc["grew"] == 0
    assert all(doc["steps"])
    assert doc["version"].startswith("0.5.23")


def test_direct_path_geometry_from_config_json_matches_model_config():
    """The direct path sizes its pool from config.json without a kvctl-built ModelConfig;
    its (KV heads, head dim, layers) equal what ModelConfig gives the ScheduleBatch path.
    (In this process: the imports are shared with the other tests.)"""
    from engine_adapter.embedded.config import EngineConfig
    from engine_adapter.embedded.sglang_runtime import build_components

    def geometry(sg):
        return (sg.kv_pool.head_num, sg.kv_pool.head_dim, sg.kv_pool.layer_num)

    direct = build_components(EngineConfig(pool_tokens=1024, page_size=16, max_context_len=1024))
    assert direct.model_config is None
    direct_geometry = geometry(direct)
    batches = build_components(EngineConfig(pool_tokens=1024, page_size=16,
                                            max_context_len=1024, exact_batches=True))
    assert batches.model_config is not None
    assert direct_geometry == geometry(batches) == (
        batches.model_config.get_num_kv_heads(1), batches.model_config.head_dim,
        batches.model_config.num_hidden_layers)


def test_transformers_comes_only_through_sglang_modules():
    """Record which module's code triggers the first import of `transformers` while the
    direct path builds its components: it is an `sglang.*` module, not kvctl's (kvctl adds
    no transformers import of its own; SGLang 0.5.23's chains are in sglang_imports)."""
    doc = run_child("""
        import json, sys
        importers = []
        class Watch:
            def find_spec(self, name, path=None, target=None):
                if name == "transformers" and not importers:
                    frame = sys._getframe(1)
                    while frame.f_code.co_filename.startswith("<frozen"):
                        frame = frame.f_back
                    importers.append(frame.f_globals.get("__name__"))
                return None
        sys.meta_path.insert(0, Watch())
        from engine_adapter.embedded.config import EngineConfig
        from engine_adapter.embedded.sglang_runtime import build_components
        build_components(EngineConfig(pool_tokens=1024, page_size=16, max_context_len=1024))
        print(json.dumps({"importers": importers,
                          "loaded": "transformers" in sys.modules}))
    """)
    if doc["loaded"]:
        assert len(doc["importers"]) == 1
        assert doc["importers"][0].split(".")[0] == "sglang", doc
    else:  # a later SGLang dropped the chains: then the direct path imports none at all
        assert doc["importers"] == []
