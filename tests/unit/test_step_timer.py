"""The plugin's step timer (engine_adapter/plugin/step_timer.py) and its route: the arithmetic
of a step's duration in SGLang's two loop orders, a batch's shape, the numbered ring.

The batches are stand-ins with `ScheduleBatch`'s attribute names and a fake clock: a real
`Scheduler` only runs inside a server, where tests/e2e/test_e2e_calibrate.py times real
steps through the same hooks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine_adapter.plugin.step_route import step_samples_response
from engine_adapter.plugin.step_timer import StepTimer, batch_shape
from engine_adapter.step_samples import decode_samples

pytestmark = pytest.mark.unit


class _Mode:
    def __init__(self, name: str) -> None:
        self.name = name

    def is_decode(self) -> bool:
        return self.name == "decode"

    def is_extend(self) -> bool:
        return self.name in ("extend", "mixed")


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _decode(forward_iter: int, launch: float, seq_lens: list[int]) -> SimpleNamespace:
    return SimpleNamespace(forward_mode=_Mode("decode"), reqs=[object()] * len(seq_lens),
                           seq_lens_sum=sum(seq_lens), seq_lens_cpu=None,
                           forward_iter=forward_iter, launch_ts=launch)


def _processed(timer: StepTimer, batch) -> object:
    """on_processed, then the sample it recorded as /step_samples derives it."""
    assert timer.on_processed(batch) is True
    return timer.log.after(timer.log.next_seq - 1)[2][-1]


def test_shape_of_a_mixed_batch():
    """Two prefill chunks (extend 30 on prefix 16, extend 8 on 0) then two decoding requests
    (contexts 41 and 51, held last as 1-token extends on prefixes 40 and 50)."""
    batch = SimpleNamespace(forward_mode=_Mode("mixed"), reqs=[object()] * 4,
                            extend_lens=[30, 8, 1, 1], prefix_lens=[16, 0, 40, 50],
                            decoding_reqs=[object(), object()])
    pairs = 30 * 16 + 30 * 31 // 2 + 8 * 9 // 2
    assert batch_shape(batch) == ("mixed", 38, 2, 16, pairs, 2, 92)


def test_synchronous_steps_are_the_scheduler_threads_work():
    """Overlap loop on a CPU: round k+1 is scheduled and run before step k is processed.
    Step k = (its run_batch return - its round's start) + (processed - latest return)."""
    clock = _Clock()
    timer = StepTimer(synchronous=True, clock=clock)
    clock.now = 101.0
    timer.on_ingested()                      # round 1 starts
    first = _decode(1, 101.002, [10, 20])    # scheduling took 2 ms
    clock.now = 101.050
    timer.on_run_returned(first)             # forward 1: 48 ms
    clock.now = 101.051
    timer.on_ingested()                      # round 2 starts
    second = _decode(2, 101.053, [11, 21])
    clock.now = 101.090
    timer.on_run_returned(second)            # forward 2 runs before step 1 is processed
    clock.now = 101.094
    sample = _processed(timer, first)        # 4 ms of result processing
    assert sample.wall_s == pytest.approx(0.002 + 0.048 + 0.004)  # schedule, forward, process
    assert sample.run_s == pytest.approx(0.092)
    assert (sample.kind, sample.decode_requests, sample.decode_context_tokens) == ("decode", 2, 30)
    assert sample.seq == 0 and sample.end_s == pytest.approx(1.094)


def test_asynchronous_steps_are_intervals_between_processed_steps():
    """On a device that only launches in run_batch: the first step after an idle gap runs
    from its round's start, the next one from the previous step's end."""
    clock = _Clock()
    timer = StepTimer(synchronous=False, clock=clock)
    clock.now = 200.0
    timer.on_ingested()
    first = _decode(1, 200.001, [5])
    timer.on_run_returned(first)
    clock.now = 200.010
    timer.on_ingested()
    second = _decode(2, 200.011, [6])
    timer.on_run_returned(second)
    clock.now = 200.030
    assert _processed(timer, first).wall_s == pytest.approx(0.030)
    clock.now = 200.045
    assert _processed(timer, second).wall_s == pytest.approx(0.015)


def test_the_ring_is_bounded_and_served_from_a_position():
    """Capacity 3, 5 steps: /step_samples?since=1 returns samples 2-4, first=2, next=5."""
    clock = _Clock()
    timer = StepTimer(synchronous=False, clock=clock, capacity=3)
    for index in range(5):
        clock.now += 0.01
        timer.on_ingested()
        timer.on_processed(_decode(index, clock.now, [index + 1]))
    status, doc = step_samples_response(timer, {"since": "1"})
    assert status == 200
    assert (doc["first"], doc["next"], doc["timer_id"]) == (2, 5, timer.timer_id)
    samples = decode_samples(doc["samples"], where="test")
    assert [s.seq for s in samples] == [2, 3, 4]
    assert [s.decode_context_tokens for s in samples] == [3, 4, 5]


def test_the_shape_is_derived_at_read_time_from_what_the_step_ran():
    """A decode without seq_lens_sum keeps its seq_lens_cpu tensor; SGLang's next decode
    rebinds the batch's tensor (`seq_lens_cpu + 1`), and the sample still sums the step's
    own (10 + 20 = 30, not 32). An extend keeps its lists the same way."""
    import torch

    clock = _Clock()
    timer = StepTimer(synchronous=False, clock=clock)
    batch = _decode(1, 100.0, [10, 20])
    batch.seq_lens_sum, batch.seq_lens_cpu = None, torch.tensor([10, 20], dtype=torch.int64)
    clock.now = 100.01
    timer.on_processed(batch)
    batch.seq_lens_cpu = batch.seq_lens_cpu + 1
    extend = SimpleNamespace(forward_mode=_Mode("extend"), reqs=[object()], launch_ts=100.02,
                             extend_lens=[30], prefix_lens=[16], decoding_reqs=None)
    clock.now = 100.03
    timer.on_processed(extend)
    extend.extend_lens, extend.prefix_lens = [5], [0]
    samples = timer.log.after(0)[2]
    assert (samples[0].kind, samples[0].decode_requests, samples[0].decode_context_tokens) == (
        "decode", 2, 30)
    assert (samples[1].kind, samples[1].extend_tokens, samples[1].prefix_tokens) == (
        "prefill", 30, 16)


def test_a_reader_skips_slots_reused_while_it_read():
    """A slot rewritten after `next` was read (a newer number in it) and those before it are
    reported lost, never served under the wrong number."""
    from engine_adapter.plugin.step_ring import StepRing

    ring = StepRing(3, lambda record: record[0])
    for seq in range(3):
        ring.write((seq,))
    ring.slots[1] = (4,)  # the writer reused slot 1 (numbers 3 and 4) during the read
    assert ring.after(0) == (2, 3, [2])


def test_a_bad_since_is_a_400():
    """since=-1 and since=x are refused with the parameter named."""
    timer = StepTimer(synchronous=False)
    assert step_samples_response(timer, {"since": "-1"})[0] == 400
    status, doc = step_samples_response(timer, {"since": "x"})
    assert status == 400 and "since='x'" in doc["error"]


def test_a_batch_without_a_launch_stamp_or_requests_is_not_timed():
    """A batch SGLang never ran (no launch_ts), or one without requests, gives no sample."""
    timer = StepTimer(synchronous=True)
    assert timer.on_processed(SimpleNamespace(forward_mode=_Mode("decode"))) is False
    assert timer.on_processed(_decode(1, 5.0, [])) is False
    assert timer.log.next_seq == 0


def test_step_timing_can_be_switched_off():
    """KVCTL_PLUGIN_STEP_TIMING=0 builds no timer; /step_samples then answers 404 naming the
    variable; a value other than 0, 1 or unset is refused by name."""
    from engine_adapter.plugin.settings import PluginSettings
    from kvctl.errors import InputError

    assert PluginSettings.from_env({}).step_timing is True
    assert PluginSettings.from_env({"KVCTL_PLUGIN_STEP_TIMING": "0"}).step_timing is False
    with pytest.raises(InputError, match="KVCTL_PLUGIN_STEP_TIMING='2' must be 1 "):
        PluginSettings.from_env({"KVCTL_PLUGIN_STEP_TIMING": "2"})
    status, doc = step_samples_response(None, {})
    assert status == 404
    assert doc["error"].startswith("step timing is off: the server runs with "
                                   "KVCTL_PLUGIN_STEP_TIMING=0")
