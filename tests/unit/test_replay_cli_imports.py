"""`kvctl replay --help` stays light: no torch, SGLang, transformers, numpy or engine module.

The replay itself needs numpy and the engine once it runs; its help does not. Same method
as test_size_imports.py: a fresh interpreter under `python -X importtime`, so any
transitive import counts.
"""

from __future__ import annotations

import pytest

from import_log import imported_modules

pytestmark = pytest.mark.unit

FORBIDDEN_ROOTS = ("torch", "sglang", "transformers", "numpy")
FORBIDDEN_MODULES = ("kvctl.replay.runner", "engine_adapter.embedded.engine")


def test_replay_help_imports_nothing_heavy():
    """`kvctl replay --help` loads no torch/sglang/transformers/numpy module, neither the
    replay runner nor the engine."""
    code, modules = imported_modules("replay", "--help")
    assert code == 0
    # kvctl.cli.app loads command modules with importlib.import_module, which -X importtime
    # does not log; their own imports it does: engine_setup is kvctl.cli.replay's.
    assert "kvctl.replay.engine_setup" in modules
    assert sorted(m for m in modules if m.split(".")[0] in FORBIDDEN_ROOTS) == []
    assert [m for m in FORBIDDEN_MODULES if m in modules] == []


def test_replay_help_lists_the_runners_retention_choices():
    """The help's retention list (spelled in kvctl.cli.replay to avoid importing the runner)
    is exactly the runner's RETENTION_CHOICES, in order."""
    from kvctl.cli.replay import RETENTION_HELP_CHOICES
    from kvctl.replay.runner import RETENTION_CHOICES

    assert RETENTION_HELP_CHOICES == RETENTION_CHOICES
