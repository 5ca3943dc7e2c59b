"""The plugin's step timer on demand (engine_adapter/plugin/runtime.py `read_step_timer`):
by default a server times no step until /step_samples is read (kvctl calibrate, record and
replay --against read it first), stops again when nobody read it for STEP_TIMER_IDLE_S, and
times every step from startup with KVCTL_PLUGIN_STEP_TIMING=1.

The runtime sits on SGLang's real tree and allocator (no HiCache); the batches are stand-ins
with `ScheduleBatch`'s attribute names (a real Scheduler only runs inside a server:
tests/e2e/test_e2e_calibrate.py times real steps), fed through the hooks SGLang calls."""

from __future__ import annotations

import json
import urllib.request
from types import SimpleNamespace

import pytest

from tests.integration.hicache_support import build_hicache_cache

pytestmark = pytest.mark.integration


class _Decode:
    def is_decode(self) -> bool:
        return True

    def is_extend(self) -> bool:
        return False


def _runtime(env, clock):
    from engine_adapter.plugin.attach import engine_info
    from engine_adapter.plugin.runtime import PluginRuntime
    from engine_adapter.plugin.settings import RUNTIME_ATTR, PluginSettings

    stack = build_hicache_cache(hicache=False)
    scheduler = SimpleNamespace(
        tree_cache=stack.cache, token_to_kv_pool_allocator=stack.allocator,
        running_batch=SimpleNamespace(reqs=[]), last_batch=None, cur_batch_for_debug=None,
        chunked_req=None, waiting_queue=[], server_args=SimpleNamespace(device="cpu"))
    runtime = PluginRuntime(scheduler, PluginSettings.from_env(env), dp_rank=0,
                            info=engine_info(scheduler), clock=clock)
    setattr(scheduler, RUNTIME_ATTR, runtime)
    return scheduler, runtime


def _step(scheduler, now: float, index: int) -> None:
    """One scheduler loop iteration that ran a 2-request decode batch, through the hooks."""
    from engine_adapter.plugin.hooks import (after_ingest_requests, after_process_batch_result,
                                             after_run_batch)
    from engine_adapter.plugin.settings import RUNTIME_ATTR

    # stand-ins for Req: the plugin's sample reads `req.kv` of every batch member; these
    # hold no KV rows of their own (SGLang's allocator here has none in use, so a ledger
    # that reconciles against it must not count any)
    reqs = [SimpleNamespace(finished_reason=None, kv=SimpleNamespace(holds_kv=False))
            for _ in range(2)]
    batch = SimpleNamespace(forward_mode=_Decode(), reqs=reqs, launch_ts=now, seq_lens_sum=40,
                            forward_iter=index)
    after_ingest_requests(None, scheduler)
    after_run_batch(None, scheduler, batch)
    after_process_batch_result(None, scheduler, batch, None)
    runtime = getattr(scheduler, RUNTIME_ATTR)
    assert (runtime.failures, runtime.disabled_reason) == (0, None)  # no hook failed


def test_by_default_steps_are_timed_only_after_the_first_read():
    """Unset KVCTL_PLUGIN_STEP_TIMING: 3 steps before any read are not timed (the hooks have
    no timer); the read returns the timer with nothing in it; the 2 steps after it are
    samples 0 and 1."""
    now = [10.0]
    scheduler, runtime = _runtime({}, lambda: now[0])
    for index in range(3):
        now[0] += 0.1
        _step(scheduler, now[0], index)
    assert runtime.step_timer is None
    timer = runtime.read_step_timer()
    assert timer.log.after(0)[1] == 0
    for index in range(3, 5):
        now[0] += 0.1
        _step(scheduler, now[0], index)
    assert [s.seq for s in timer.log.after(0)[2]] == [0, 1]


def test_an_unread_timer_stops_and_the_next_read_is_a_restart():
    """Read at 10 s, steps timed; a sample at 10 s + 600 s keeps timing, one at 10 s + 601 s
    stops it (steps after it are not timed); the next read serves a new timer_id numbered
    from 0 (a reader sees a restart, as after a server restart)."""
    from engine_adapter.plugin.runtime import STEP_TIMER_IDLE_S

    now = [10.0]
    scheduler, runtime = _runtime({}, lambda: now[0])
    first = runtime.read_step_timer()
    _step(scheduler, now[0], 0)
    now[0] = 10.0 + STEP_TIMER_IDLE_S
    runtime.maybe_sample(None)
    _step(scheduler, now[0], 1)
    assert runtime.step_timer is first and first.log.next_seq == 2
    now[0] = 10.0 + STEP_TIMER_IDLE_S + 1.0
    runtime.maybe_sample(None)
    _step(scheduler, now[0], 2)
    assert runtime.step_timer is None and first.log.next_seq == 2
    second = runtime.read_step_timer()
    assert second.timer_id != first.timer_id and second.log.next_seq == 0
    _step(scheduler, now[0] + 0.1, 3)
    assert second.log.next_seq == 1


def test_step_timing_1_times_from_startup_and_never_stops():
    """KVCTL_PLUGIN_STEP_TIMING=1: steps are timed with no read at all, and an hour without
    a read does not stop it."""
    now = [10.0]
    scheduler, runtime = _runtime({"KVCTL_PLUGIN_STEP_TIMING": "1"}, lambda: now[0])
    _step(scheduler, now[0], 0)
    now[0] += 3600.0
    runtime.maybe_sample(None)
    _step(scheduler, now[0], 1)
    assert runtime.read_step_timer().log.next_seq == 2


def test_the_http_route_arms_the_timer():
    """GET /step_samples on the plugin's real endpoint arms the timer: a step before it is
    not served, the step after it is (next 0, then 1)."""
    from engine_adapter.plugin.server import PluginServer

    now = [10.0]
    scheduler, runtime = _runtime({}, lambda: now[0])
    server = PluginServer(runtime, "127.0.0.1", 0)
    try:
        _step(scheduler, now[0], 0)

        def read() -> dict:
            with urllib.request.urlopen(f"{server.url}/step_samples?since=0", timeout=5) as r:
                return json.loads(r.read())

        assert read()["next"] == 0
        _step(scheduler, now[0] + 0.1, 1)
        assert read()["next"] == 1
    finally:
        server.close()


def test_step_timing_values():
    """Unset: on demand; 1: from startup; 0: off (/step_samples 404s); anything else is
    refused naming the variable and its three settings."""
    from engine_adapter.base.errors import InputError
    from engine_adapter.plugin.settings import PluginSettings

    read = [(s.step_timing, s.step_timing_from_start) for s in (
        PluginSettings.from_env(env) for env in (
            {}, {"KVCTL_PLUGIN_STEP_TIMING": "1"}, {"KVCTL_PLUGIN_STEP_TIMING": "0"}))]
    assert read == [(True, False), (True, True), (False, False)]
    with pytest.raises(InputError, match=r"KVCTL_PLUGIN_STEP_TIMING='2' must be 1 \(time every "
                                         r"step from startup\), 0 \(never\) or unset"):
        PluginSettings.from_env({"KVCTL_PLUGIN_STEP_TIMING": "2"})
