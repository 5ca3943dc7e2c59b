"""The one-pass hit-rate curve (kvctl.replay.curve) against explicit LRU simulations.

Streams are random and prefix-structured: each request walks a small random tree of
blocks, so requests share prefixes the way radix-cache traffic does, with fresh output
pages after each prompt. The reference simulations keep an LRU over pages with SGLang's
step order (match every page first, then insert deepest first) and evict at a fixed size;
the curve must give the same hit tokens at every size.
"""

from __future__ import annotations

import random
from collections import OrderedDict

import numpy as np
import pytest

from kvctl.replay.curve.distance import COLD, stack_distances
from kvctl.replay.curve.profile import build_curve
from kvctl.replay.curve.stream import PageStream

pytestmark = pytest.mark.unit

PAGE = 4


def prefix_stream(seed: int, requests: int = 120) -> PageStream:
    """Random prompts over a tree of 3 branches x 4 levels of 2-page blocks, cut at a random
    length; matchable pages = floor((S-1)/P); 0-3 fresh output pages each."""
    rng = random.Random(seed)
    ids: dict[tuple, int] = {}
    keys: list[int] = []
    starts = [0]
    matchable = []
    prompt_tokens = 0
    fresh = 10**9
    for _ in range(requests):
        path: tuple = ()
        pages: list[int] = []
        for _level in range(rng.randint(1, 4)):
            branch = rng.randrange(3)
            for half in range(2):
                path = (*path, branch, half)
                pages.append(ids.setdefault(path, len(ids)))
        size = len(pages) * PAGE - rng.choice((0, 0, 1, PAGE - 1))  # a partial last page
        full = size // PAGE
        outputs = [fresh + i for i in range(rng.randint(0, 3))]
        fresh += len(outputs)
        keys += pages[:full] + outputs
        starts.append(len(keys))
        matchable.append((size - 1) // PAGE)
        prompt_tokens += size
    return PageStream(page_size=PAGE, keys=np.asarray(keys, dtype=np.uint64),
                      starts=np.asarray(starts, dtype=np.int64),
                      matchable=np.asarray(matchable, dtype=np.int64), prompt_tokens=prompt_tokens)


def lru_hit_tokens(stream: PageStream, capacity: int) -> int:
    """Brute force: an LRU of `capacity` pages; per request, look every page up (nothing
    moves), count the leading matchable hits, then touch the pages deepest first."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for r in range(stream.requests):
        pages = stream.keys[stream.starts[r]:stream.starts[r + 1]].tolist()
        for key in pages[: stream.matchable[r]]:
            if key not in cache:
                break
            hits += stream.page_size
        for key in reversed(pages):
            cache[key] = None
            cache.move_to_end(key)
            while len(cache) > capacity:
                cache.popitem(last=False)
    return hits


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_curve_equals_brute_force_lru_at_every_size(seed):
    """At every size from 1 page to past the working set, the curve's hit tokens are the
    brute-force LRU's exactly."""
    stream = prefix_stream(seed)
    curve = build_curve(stream)
    distinct = len(set(stream.keys.tolist()))
    for pages in range(1, distinct + 2):
        expected = lru_hit_tokens(stream, pages)
        assert round(curve.hit_rate(pages * PAGE) * stream.prompt_tokens) == expected, pages


def test_curve_equals_libcachesim_lru():
    """libCacheSim's LRU (an independent C implementation), driven in the same step order
    (find without update, then get deepest first), gives the same hits at 5 sizes."""
    lcs = pytest.importorskip("libcachesim")
    stream = prefix_stream(7, requests=200)
    curve = build_curve(stream)
    for pages in (2, 5, 9, 17, 40):
        cache = lcs.LRU(cache_size=pages)
        hits = 0
        for r in range(stream.requests):
            keys = stream.keys[stream.starts[r]:stream.starts[r + 1]].tolist()
            for key in keys[: stream.matchable[r]]:
                if cache.find(_request(lcs, key), update_cache=False) is None:
                    break
                hits += PAGE
            for key in reversed(keys):
                cache.get(_request(lcs, key))
        assert round(curve.hit_rate(pages * PAGE) * stream.prompt_tokens) == hits, pages


def _request(lcs, key: int):
    req = lcs.Request()
    req.obj_id, req.obj_size = key, 1
    return req


def test_distances_count_distinct_pages_more_recent():
    """Hand-worked: request 1 = [a b], request 2 = [a c], request 3 = [a b]. After request 1
    the order (most recent first) is a b; after 2, a c b. In request 3, a is at distance 0
    and b at 2 (a and c are more recent)."""
    keys = np.array([1, 2, 1, 3, 1, 2])
    starts = np.array([0, 2, 4, 6])
    assert stack_distances(keys, starts).tolist() == [COLD, COLD, 0, COLD, 0, 2]


def test_ceiling_compulsory_and_uncacheable_add_up():
    """Two requests of 9 tokens at page 4 with the same prompt: each has 2 full pages, 2
    matchable ((9-1)//4). The first misses both (8 compulsory tokens), the second hits both
    (8); the 9th token of each is uncacheable: ceiling 8/18, compulsory 8/18, 2/18 left."""
    stream = PageStream(page_size=4, keys=np.array([5, 6, 5, 6], dtype=np.uint64),
                        starts=np.array([0, 2, 4]), matchable=np.array([2, 2]),
                        prompt_tokens=18)
    curve = build_curve(stream)
    assert (curve.ceiling, curve.compulsory_share) == (8 / 18, 8 / 18)
    assert curve.uncacheable_share == pytest.approx(2 / 18)
    assert (curve.hit_rate(4), curve.hit_rate(8)) == (4 / 18, 8 / 18)
    assert curve.pool_for(0.5) == 4 and curve.pool_for(1.0) == 8


def test_points_are_log_spaced_from_one_page_to_the_ceiling():
    """At least 64 distinct sizes, one page first, the ceiling's size last, and the sizes
    spread geometrically (the first 10 within 10 pages, not a linear grid's first step)."""
    stream = prefix_stream(5, requests=400)
    curve = build_curve(stream)
    curve = type(curve)(page_size=1, prompt_tokens=curve.prompt_tokens,
                        reuse=curve.reuse * 1000, compulsory_tokens=curve.compulsory_tokens,
                        accesses=curve.accesses)  # distances in the thousands
    sizes = [size for size, _ in curve.points(64)]
    assert len(sizes) >= 64 and sizes == sorted(set(sizes))
    assert sizes[0] == 1 and sizes[-1] == curve.pool_for(1.0)
    assert sizes[9] <= 10
