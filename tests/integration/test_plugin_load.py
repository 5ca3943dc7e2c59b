"""kvctl's entry point loaded by SGLang 0.5.23's own plugin machinery (`load_plugins`).

Real SGLang: the entry point is found through importlib.metadata (an editable install, or
`python -c "import setuptools; setuptools.setup()" egg_info` in a worktree), SGLang's
`load_plugins()` runs it, and `HookRegistry.apply_hooks()` patches SGLang's real classes.
Every test restores what it patched and resets the registry.
"""

from __future__ import annotations

import logging
import pkgutil
import sys
from importlib.metadata import entry_points

import pytest

from engine_adapter.plugin.hooks import SCHEDULER_HOOKS, SERVER_INFO_HOOKS

pytestmark = pytest.mark.integration

TARGETS = [target for target, _ in (*SCHEDULER_HOOKS, *SERVER_INFO_HOOKS)]


def _owner_and_name(target: str):
    path, name = target.rsplit(".", 1)
    return pkgutil.resolve_name(path), name


@pytest.fixture
def fresh_plugins(monkeypatch):
    """SGLang's plugin state reset before and after; every target's original restored,
    also in modules that imported it by name (HookRegistry propagates patches there)."""
    import sglang.srt.managers.scheduler  # noqa: F401  (a scheduler process has it imported)
    import sglang.srt.plugins as plugins
    from sglang.srt.plugins.hook_registry import HookRegistry

    for name in ("KVCTL_SGLANG_PLUGIN", "SGLANG_PLUGINS", "KVCTL_PLUGIN_PORT"):
        monkeypatch.delenv(name, raising=False)
    originals = {}
    for target in TARGETS:
        owner, name = _owner_and_name(target)
        originals[target] = (owner, name, owner.__dict__[name])
    HookRegistry.reset()
    plugins._plugins_loaded = False
    yield plugins
    for owner, name, original in originals.values():
        current = owner.__dict__[name]
        setattr(owner, name, original)
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", {})
            for attr, value in list(namespace.items()):
                if value is current and current is not original:
                    setattr(module, attr, original)
    HookRegistry.reset()
    plugins._plugins_loaded = False


def _kvctl_hooks():
    from sglang.srt.plugins.hook_registry import HookRegistry

    return {target: [(t.value, src.plugin_name if src else None) for t, _, src in hooks]
            for target, hooks in HookRegistry._hooks.items() if hooks}


def test_entry_point_is_discoverable():
    """importlib.metadata lists kvctl in SGLang's general plugin group, pointing at register."""
    found = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
    assert found.get("kvctl") == "engine_adapter.plugin.entry:register"


def test_enabled_plugin_hooks_every_target_without_failure(fresh_plugins, monkeypatch, caplog):
    """KVCTL_SGLANG_PLUGIN=1: load_plugins registers five AFTER hooks from plugin `kvctl`,
    and apply_hooks resolves each against SGLang's real classes ("Failed to apply" never
    logged); the patched methods wrap the originals."""
    monkeypatch.setenv("KVCTL_SGLANG_PLUGIN", "1")
    with caplog.at_level(logging.INFO, logger="sglang.srt.plugins"):
        fresh_plugins.load_plugins()
    assert _kvctl_hooks() == {target: [("after", "kvctl")] for target in TARGETS}
    assert not [r for r in caplog.records if "Failed to apply" in r.getMessage()]
    assert not [r for r in caplog.records if "Failed to execute" in r.getMessage()]
    applied = {r.getMessage().split(" to ")[1].split(" (")[0]
               for r in caplog.records if r.getMessage().startswith("Applied")}
    assert applied == set(TARGETS)
    from sglang.srt.managers.scheduler import Scheduler

    assert Scheduler.process_batch_result.__wrapped__.__qualname__ == \
        "Scheduler.process_batch_result"
    assert Scheduler.__init__.__wrapped__.__qualname__ == "Scheduler.__init__"


def test_sglang_whitelist_also_enables(fresh_plugins, monkeypatch):
    """Naming kvctl in SGLang's own SGLANG_PLUGINS whitelist enables it too."""
    monkeypatch.setenv("SGLANG_PLUGINS", "some_other, kvctl")
    fresh_plugins.load_plugins()
    assert set(_kvctl_hooks()) == set(TARGETS)


def test_disabled_plugin_registers_nothing(fresh_plugins):
    """Without either switch SGLang still runs kvctl's entry point, which registers no hook
    and leaves every target untouched."""
    from sglang.srt.managers.scheduler import Scheduler

    before = Scheduler.__dict__["process_batch_result"]
    fresh_plugins.load_plugins()
    assert _kvctl_hooks() == {}
    assert Scheduler.__dict__["process_batch_result"] is before


def test_bad_setting_registers_nothing_and_says_why(fresh_plugins, monkeypatch, caplog):
    """An unparsable KVCTL_PLUGIN_PORT keeps the plugin off with one error naming it."""
    monkeypatch.setenv("KVCTL_SGLANG_PLUGIN", "1")
    monkeypatch.setenv("KVCTL_PLUGIN_PORT", "http")
    with caplog.at_level(logging.ERROR, logger="kvctl.plugin"):
        fresh_plugins.load_plugins()
    assert _kvctl_hooks() == {}
    assert any("KVCTL_PLUGIN_PORT='http' is not an integer" in r.getMessage()
               for r in caplog.records)


def test_server_info_names_the_plugin_endpoint(fresh_plugins, monkeypatch):
    """Once hooked, SGLang's build_server_info (the /server_info document) carries
    kvctl_plugin with the endpoint computed from the same environment."""
    monkeypatch.setenv("KVCTL_SGLANG_PLUGIN", "1")
    monkeypatch.setenv("KVCTL_PLUGIN_PORT", "31000")
    fresh_plugins.load_plugins()
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils import common

    from engine_adapter.embedded.sglang_runtime import DEFAULT_MODEL_DIR

    server_args = ServerArgs(model_path=str(DEFAULT_MODEL_DIR), device="cpu",
                             skip_tokenizer_init=True)
    info = common.build_server_info(server_args, {})
    assert info["kvctl_plugin"] == {"url": "http://127.0.0.1:31000", "schema_version": 1,
                                    "port_base": 31000, "dp_size": 1}
