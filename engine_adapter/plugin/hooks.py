"""The hook functions and the dotted targets they are registered on (SGLang 0.5.23).

    target (sglang.srt.managers.scheduler.Scheduler.*)   type   what kvctl does there
    __init__                                              AFTER  attach: capture the cache
                                                                 objects, start the endpoint
    ingest_requests                                       AFTER  a scheduling round starts (timer)
    run_batch                                             AFTER  the forward returned (timer)
    process_batch_result                                  AFTER  time the step, tally, maybe sample
    on_idle                                               AFTER  maybe sample (cadence-limited)
    _add_request_to_queue                                 AFTER  count an arrival (and record it)
    sglang.srt.utils.common.build_server_info             AFTER  add `kvctl_plugin` (discovery)

Every scheduler hook is AFTER, so SGLang's own work is complete and the tree is consistent
when kvctl reads it, in the scheduler's own thread. Each hook looks up the runtime stored on
the scheduler (`_kvctl_plugin`); ranks that do not report (attention-TP rank != 0) have
none and return at once. No exception leaves a hook: `attach` catches everything, the others
go through `PluginRuntime.guard`. Every hook returns None, so SGLang's return values pass
through unchanged (HookRegistry's AFTER contract).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from engine_adapter.plugin.settings import RUNTIME_ATTR  # noqa: F401 (re-exported)

logger = logging.getLogger("kvctl.plugin")

SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
SERVER_INFO = "sglang.srt.utils.common.build_server_info"


def after_init(_result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
    try:
        from engine_adapter.plugin.attach import attach_from_runtime_context

        attach_from_runtime_context(scheduler, os.environ)
    except Exception:  # a plugin that cannot start leaves the server exactly as it was
        logger.exception("kvctl plugin: could not attach to the scheduler; plugin inactive")


def after_process_batch_result(_result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
    runtime = getattr(scheduler, RUNTIME_ATTR, None)
    if runtime is not None and runtime.disabled_reason is None:
        try:  # PluginRuntime.guard, inlined: this runs on every step
            runtime.on_batch(kwargs["batch"] if "batch" in kwargs else args[0])
        except Exception as exc:
            runtime.fail(exc)


def after_ingest_requests(_result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
    runtime = getattr(scheduler, RUNTIME_ATTR, None)
    if runtime is not None and runtime.disabled_reason is None and runtime.step_timer is not None:
        try:  # every loop iteration, idle ones too: one clock read
            runtime.step_timer.on_ingested()
        except Exception as exc:
            runtime.fail(exc)


def after_run_batch(_result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
    runtime = getattr(scheduler, RUNTIME_ATTR, None)
    if (runtime is not None and runtime.disabled_reason is None
            and runtime.step_timer is not None and runtime.step_timer.synchronous):
        try:  # only a synchronous device (the CPU) times the forward's return
            runtime.step_timer.on_run_returned(kwargs["batch"] if "batch" in kwargs else args[0])
        except Exception as exc:
            runtime.fail(exc)


def after_on_idle(_result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
    runtime = getattr(scheduler, RUNTIME_ATTR, None)
    if runtime is not None:
        runtime.guard(runtime.on_idle)


def after_add_request_to_queue(_result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
    runtime = getattr(scheduler, RUNTIME_ATTR, None)
    if runtime is not None:
        retracted = kwargs.get("is_retracted", args[1] if len(args) > 1 else False)
        req = kwargs.get("req", args[0] if args else None)
        runtime.guard(runtime.on_arrival, bool(retracted), req)


def after_build_server_info(result: Any, *args: Any, **kwargs: Any) -> None:
    try:
        from engine_adapter.plugin.server_info import add_plugin_address

        add_plugin_address(result, os.environ)
    except Exception:  # discovery is optional: the client also takes --plugin-url
        logger.exception("kvctl plugin: could not add kvctl_plugin to /server_info")


SCHEDULER_HOOKS = (
    (f"{SCHEDULER}.__init__", after_init),
    (f"{SCHEDULER}.ingest_requests", after_ingest_requests),
    (f"{SCHEDULER}.run_batch", after_run_batch),
    (f"{SCHEDULER}.process_batch_result", after_process_batch_result),
    (f"{SCHEDULER}.on_idle", after_on_idle),
    (f"{SCHEDULER}._add_request_to_queue", after_add_request_to_queue),
)
SERVER_INFO_HOOKS = ((SERVER_INFO, after_build_server_info),)
