"""The what-if shadow driven by the cache's events (instrument/whatif_events.py) on hand-built
event sequences where the arrival-order model (`observe_tokens`: each request matched and
inserted whole at arrival, a pool holding only cached prefixes) answers differently.

Every case runs unsampled (rate 1: each page weighs 1) at page 16, so expected hit rates
are page counts: a prompt of S tokens has floor(S/16) full pages and can match
floor((S-1)/16) of them (SGLang's S-1 cap); the estimate is hit tokens / prompt tokens.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_adapter.instrument.whatif import WhatIfShadow

pytestmark = pytest.mark.unit

A = np.arange(1, 82)  # 81 tokens: 5 full pages, 5 matchable
B = np.arange(1001, 1082)  # 81 tokens, shares nothing with A


def shadow(pool_tokens: int, scales=(1.0, 2.0)) -> WhatIfShadow:
    return WhatIfShadow(pool_tokens=pool_tokens, page_size=16, rate=1.0, seed=3, scales=scales)


def run_whole(sh: WhatIfShadow, rid, tokens, *, reserved: int = 0) -> None:
    """One request admitted, prefilled and finished with no output, nothing in between."""
    sh.admit(rid, tokens, reserved_tokens=reserved)
    sh.insert(rid, len(tokens), reserved_tokens=reserved)
    sh.release(rid, prompt_tokens=len(tokens), output_tokens=0, reserved_tokens=reserved)


def rates(sh: WhatIfShadow) -> list[float]:
    return [p.hit_rate for p in sh.curve().points]


def test_requests_matched_in_one_step_cannot_hit_each_other():
    """A and a copy of A are matched in one step (both admissions before either insert):
    the copy hits nothing, as in SGLang. A third copy after both finished hits 5 pages
    (80 tokens). Event-driven: 80 / (3 x 81). Arrival order: the second and third hit
    80 each: 160 / 243."""
    sh = shadow(10_000)
    sh.admit("a", A)
    sh.admit("b", A)
    sh.insert("a", 81)
    sh.insert("b", 81)
    sh.release("a", prompt_tokens=81, output_tokens=0)
    sh.release("b", prompt_tokens=81, output_tokens=0)
    run_whole(sh, "c", A)
    assert rates(sh) == pytest.approx([80 / 243] * 2)
    old = shadow(10_000)
    for _ in range(3):
        old.observe_tokens(A)
    assert rates(old) == pytest.approx([160 / 243] * 2)


def test_running_requests_private_pages_shrink_the_cache():
    """Pool 160 tokens = 10 pages. A runs and finishes: its 5 pages are cached, released
    deepest first, so page 4 is the least recent. A copy of A is matched while other
    requests hold 96 private tokens (6 pages): the 1x cache holds 10 - 6 = 4 pages, page 4
    is evicted, the copy hits pages 0-3 = 64 tokens; at 2x (20 - 6 = 14 pages) all 5 = 80.
    Rates over 2 x 81 prompt tokens: 64/162 and 80/162. Arrival order ignores the private
    pages: 80/162 at both."""
    sh = shadow(160)
    run_whole(sh, "a", A)
    run_whole(sh, "copy", A, reserved=96)
    assert rates(sh) == pytest.approx([64 / 162, 80 / 162])
    old = shadow(160)
    for _ in range(2):
        old.observe_tokens(A)
    assert rates(old) == pytest.approx([80 / 162] * 2)


def test_a_running_requests_pages_are_pinned():
    """Pool 128 tokens = 8 pages, 1x only. A is matched and prefilled (5 pages, pinned
    while it runs); B runs whole (5 pages) meanwhile: 10 pages held > 8, so B's two least
    recent (its deepest) pages go, A's cannot. A copy of A matched while A still runs hits
    all 5 pages: 80 tokens over 3 x 81. Arrival order: A is inserted whole, B evicts A's
    two deepest pages, the copy hits 3 pages = 48 tokens."""
    sh = shadow(128, scales=(1.0,))
    sh.admit("a", A)
    sh.insert("a", 81)
    run_whole(sh, "b", B)
    run_whole(sh, "copy", A)
    assert rates(sh) == pytest.approx([80 / 243])
    old = shadow(128, scales=(1.0,))
    for tokens in (A, B, A):
        old.observe_tokens(tokens)
    assert rates(old) == pytest.approx([48 / 243])


def test_a_next_turn_hits_the_pages_its_output_completed():
    """Turn 1: a 40-token prompt (2 full pages) and 40 output tokens: SGLang inserts the
    committed 79 tokens, 4 full pages. Turn 2 carries them (its first 80 tokens are turn
    1's sequence) plus 20 new: 100 tokens, 6 matchable pages, of which 4 are cached:
    64 tokens over 40 + 100. Arrival order keys outputs as fresh pages: 32 / 140."""
    prompt, outputs = np.arange(1, 41), np.arange(5001, 5041)
    turn2 = np.concatenate((prompt, outputs, np.arange(9001, 9021)))
    sh = shadow(10_000)
    sh.admit("t1", prompt)
    sh.insert("t1", 40)
    sh.release("t1", prompt_tokens=40, output_tokens=40, output_ids=outputs)
    run_whole(sh, "t2", turn2)
    assert rates(sh) == pytest.approx([64 / 140] * 2)
    old = shadow(10_000)
    old.observe_tokens(prompt, output_tokens=40)
    old.observe_tokens(turn2)
    assert rates(old) == pytest.approx([32 / 140] * 2)


def test_a_retained_turn_stays_pinned_until_its_lease_goes():
    """Pool 96 tokens = 6 pages, 1x only. Turn A (5 pages) finishes retained (a lease pins
    it); B runs whole: 10 pages > 6, so B loses its 4 deepest pages, A none. A copy of A
    hits 5 pages (80). `unlock`: A's pages join the recent end deepest first, behind B0.
    B again: B0 hits (16), B1-B4 enter pinned, evicting A4..A1 (the least recent). A last
    copy of A hits A0 only (16). Total 112 over 5 x 81."""
    sh = shadow(96, scales=(1.0,))
    sh.admit("a", A)
    sh.insert("a", 81)
    sh.release("a", prompt_tokens=81, output_tokens=0, retain=True)
    run_whole(sh, "b", B)
    run_whole(sh, "copy", A)
    sh.unlock("a")
    run_whole(sh, "b2", B)
    run_whole(sh, "copy2", A)
    assert rates(sh) == pytest.approx([112 / 405])


def test_a_flush_empties_every_unpinned_page():
    """A runs whole; B is matched and prefilled (pinned); the engine flushes its cache:
    A's pages go, B's stay. Copies of A and B then hit 0 and 80: 80 / (4 x 81)."""
    sh = shadow(10_000, scales=(1.0,))
    run_whole(sh, "a", A)
    sh.admit("b", B)
    sh.insert("b", 81)
    sh.flush_cache()
    run_whole(sh, "a2", A)
    run_whole(sh, "b2", B)
    assert rates(sh) == pytest.approx([80 / 324])


def test_an_unauthorized_read_and_a_host_tier_reload():
    """lookup False: no hit though A is cached (the engine never consulted the tree).
    host_tokens 48: a host tier returns the first 3 pages whatever the device holds: a
    copy of B, never seen, counts 48. Total 48 over 3 x 81 (A, the refused copy, B)."""
    sh = shadow(10_000, scales=(1.0,))
    run_whole(sh, "a", A)
    sh.admit("refused", A, lookup=False)
    sh.release("refused", prompt_tokens=81, output_tokens=0)
    sh.admit("b", B, host_tokens=48)
    sh.release("b", prompt_tokens=81, output_tokens=0)
    assert rates(sh) == pytest.approx([48 / 243])
