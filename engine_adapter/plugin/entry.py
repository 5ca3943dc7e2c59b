"""The `sglang.srt.plugins` entry point: `kvctl = "engine_adapter.plugin.entry:register"`.

SGLang's `load_plugins()` calls `register()` once in every process it starts (HTTP server,
schedulers, DP controller, detokenizer). Unless the operator enabled kvctl explicitly
(`KVCTL_SGLANG_PLUGIN=1`, or `kvctl` named in SGLang's own `SGLANG_PLUGINS`), it registers
nothing: installing kvctl never changes a server silently.

Enabled, it registers the scheduler hooks only in processes that have imported SGLang's
scheduler module (the scheduler processes import it to run `run_scheduler_process`; the
HTTP process imports it through the engine entry, where the hooks stay inert because no
Scheduler is built there), so the detokenizer never imports the scheduler for kvctl. The
discovery hook on `build_server_info` is registered everywhere it is importable. A bad
KVCTL_PLUGIN_* value logs one error and registers nothing.
"""

from __future__ import annotations

import logging
import os
import sys

from engine_adapter.plugin.hooks import SCHEDULER_HOOKS, SERVER_INFO_HOOKS
from engine_adapter.plugin.settings import PluginSettings, plugin_enabled
from engine_adapter.base.errors import InputError

logger = logging.getLogger("kvctl.plugin")

SCHEDULER_MODULE = "sglang.srt.managers.scheduler"


def register() -> list[str]:
    """Register kvctl's hooks with SGLang's HookRegistry; returns the targets registered."""
    if not plugin_enabled(os.environ):
        return []
    try:
        PluginSettings.from_env(os.environ)  # refuse bad settings before touching SGLang
    except InputError as exc:
        logger.error("kvctl plugin not enabled: %s", exc)
        return []
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    hooks = list(SERVER_INFO_HOOKS)
    if SCHEDULER_MODULE in sys.modules:
        hooks += SCHEDULER_HOOKS
    for target, hook in hooks:
        HookRegistry.register(target, hook, HookType.AFTER)
    return [target for target, _ in hooks]
