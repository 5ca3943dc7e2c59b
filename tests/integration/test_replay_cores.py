"""Both SGLang tree cores (Rust, Python) replay a trace to the same report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

HEAD = str(Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake" / "head_500.jsonl")


def test_rust_and_python_cores_give_the_same_report():
    """20 requests on a 100,000-token pool (evictions happen): identical JSON apart from the
    tree core named in the settings and the wall clock."""
    from kvctl.replay.report import deterministic_json
    from kvctl.replay.runner import ReplaySettings, run_replay

    docs = {}
    for core in ("rust", "python"):
        settings = ReplaySettings(workload=HEAD, limit=20, pool_tokens=100_000, tree_core=core)
        doc = run_replay(settings).report.to_dict()
        assert doc["settings"].pop("tree_core") == core
        docs[core] = json.loads(deterministic_json(doc))
    assert docs["rust"]["evictions"] > 0
    assert docs["rust"] == docs["python"]
