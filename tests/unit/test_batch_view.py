"""BatchView: the direct decode path's batch columns, applied from `EngineState`'s join /
leave / reorder calls, equal the columns rebuilt from `running` after any change sequence.
Over real SGLang `Req`s (the view reads their `kv` record)."""

from __future__ import annotations

import random
from array import array

import numpy as np
import pytest

from engine_adapter.embedded.batch_view import BatchView
from engine_adapter.embedded.requests import RequestSpec, Tracked
from engine_adapter.embedded.state import EngineState

pytestmark = pytest.mark.unit


def tracked(rid: str, row: int, committed: int) -> Tracked:
    """A request as the engine builds it, holding `row` with `committed` tokens."""
    from engine_adapter.embedded import sglang_imports

    sglang_imports.load()
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    sampling = SamplingParams(max_new_tokens=64, temperature=0, ignore_eos=True)
    sampling.normalize(None)
    req = Req(rid, "", array("q", range(1, 17)), sampling, vocab_size=1 << 31,
              eos_token_ids=set())
    req.kv.req_pool_idx = row
    req.kv.kv_committed_len = committed
    spec = RequestSpec(rid=rid, tokens=np.arange(1, 17, dtype=np.int64), max_new_tokens=64)
    return Tracked(spec=spec, make_req=lambda _: req, namespace_label="ns", key=("ns", 0))


def state() -> EngineState:
    st = EngineState(config=None, sg=None, cost=None, oracle=None)
    st.batch_view = BatchView()
    return st


def expected(st: EngineState) -> tuple[list, list, list]:
    reqs = [t.req for t in st.running.values()]
    return reqs, [r.kv.req_pool_idx for r in reqs], [r.kv.kv_committed_len for r in reqs]


def observed(st: EngineState) -> tuple[list, list, list]:
    """The view's columns; its kv records and appenders must be those of its Reqs."""
    view = st.batch_view
    view.refresh(st.running)
    assert all(kv is r.kv for kv, r in zip(view.kvs, view.reqs))
    assert all(a.__self__ is r.output_ids for a, r in zip(view.appends, view.reqs))
    return list(view.reqs), view.rows.tolist(), view.committed.tolist()


def test_leavers_are_deleted_and_joiners_appended_in_join_order():
    """The module docstring's example: [a b c d], b finishes, e and f join -> [a c d e f]."""
    st = state()
    a, b, c, d, e, f = (tracked(n, row, committed) for n, row, committed in
                        zip("abcdef", (4, 9, 2, 7, 5, 1), (40, 33, 18, 51, 16, 30)))
    for t in (a, b, c, d):
        st.join_running(t)
    assert observed(st) == ([a.req, b.req, c.req, d.req], [4, 9, 2, 7], [40, 33, 18, 51])
    st.leave_running(b)
    st.join_running(e)
    st.join_running(f)
    assert observed(st) == ([a.req, c.req, d.req, e.req, f.req], [4, 2, 7, 5, 1],
                            [40, 18, 51, 16, 30])


def test_join_then_leave_before_a_refresh_leaves_no_trace():
    st = state()
    a, b = tracked("a", 1, 8), tracked("b", 2, 9)
    st.join_running(a)
    observed(st)
    st.join_running(b)
    st.leave_running(b)
    st.leave_running(b)  # a second leave of a request no longer running is a no-op
    assert observed(st) == ([a.req], [1], [8])


def test_random_change_sequences_match_a_rebuild():
    """Joins, leaves, re-joins, reorders (retraction) and decode steps that advance both the
    view's committed column and each Req's kv_committed_len, as DirectCache.decode does."""
    rng = random.Random(7)
    st = state()
    pool = [tracked(f"r{i}", i, rng.randrange(1, 500)) for i in range(40)]
    reorders = 0
    for _ in range(600):
        move = rng.random()
        idle = [t for t in pool if t.req.rid not in st.running]
        if move < 0.35 and idle:
            st.join_running(rng.choice(idle))
        elif move < 0.6 and st.running:
            st.leave_running(st.running[rng.choice(list(st.running))])
        elif move < 0.65 and st.running:
            rids = list(st.running)
            rng.shuffle(rids)
            st.reorder_running(rids[: rng.randrange(len(rids) + 1)])
            reorders += 1
        else:
            view = st.batch_view
            view.refresh(st.running)
            view.committed += 1
            for kv in view.kvs:
                kv.kv_committed_len += 1
        if rng.random() < 0.5:
            assert observed(st) == expected(st)
    assert observed(st) == expected(st)
    assert reorders > 10
    assert st.batch_view.rebuilds <= 1 + reorders  # applied, not rebuilt (no fallback)


def test_a_leave_of_a_request_the_view_never_held_is_an_error():
    view = BatchView()
    view.refresh({})
    view.left(tracked("x", 3, 1).req)
    with pytest.raises(ValueError, match="without having joined"):
        view.refresh({})


def test_a_leaver_whose_kv_record_was_replaced_raises():
    """SGLang's detach_kv swaps the Req's record; the view's column would have missed the
    tokens decoded since, so the leave reports it instead of dropping it silently."""
    from kvctl.errors import IntegrityError

    st = state()
    a = tracked("a", 1, 8)
    st.join_running(a)
    observed(st)
    a.req.detach_kv()
    st.leave_running(a)
    with pytest.raises(IntegrityError, match="replaced while it decoded"):
        st.batch_view.refresh(st.running)
