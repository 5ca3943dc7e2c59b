"""A hit-rate curve: the token hit rate at every pool size, from one stack-distance pass.

    hit tokens(C pages) = sum over requests of P * #{leading matchable pages whose prefix
                          maximum stack distance < C}          (distance.py, stream.py)
    H(C)                = hit tokens(C) / prompt tokens        (seed 003 eq. (2), H_prefix)

It assumes LRU over pages (SGLang's `--radix-eviction-policy lru`, leaf eviction; a parent
is never older than its child, so leaf eviction keeps what a page LRU keeps). With a
replay's schedule (`build_curve(stream, schedule)`, what `--curve` does) the pass runs in
that replay's event order (scheduled.py: running requests' pinned pages, same-batch
misses, prompts inserted after prefill, waiting-prefix refreshes), which holds at pools
that fit the replay's running requests (`anchor_pages`); below, and without a schedule,
each request alone in arrival order (distance.py). At a single pool below the anchor,
`hit_rate_at` reads the pass in another schedule's order (synth.py synthesizes the one a
replay at that pool would run: `--curve`'s table rows there). Every output states which
(`assumption`); `--verify-points` measures the error.

The prompt tokens split four ways, at an unbounded pool:

    prompt = ceiling hits + compulsory misses (first touches) + in flight (matched while
             the request computing them ran: event order only) + uncacheable (the S-1
             cap and the partial last page: tokens no match can ever return)

The sampled estimate of the arrival-order curve, for a live engine, is
engine_adapter.instrument.whatif (SHARDS-style, depth-stratified).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvctl.replay.curve.distance import COLD, prefix_max, stack_distances
from kvctl.replay.curve.schedule import Schedule
from kvctl.replay.curve.scheduled import event_distances
from kvctl.replay.curve.stream import PageStream

LRU_ASSUMPTION = ("curve assumes LRU eviction over pages, each request alone in arrival "
                  "order (no replay's schedule: running requests' pinned pages, same-batch "
                  "misses, queueing and whole-leaf eviction not modeled); exact replays "
                  "measure the error (--verify-points)")


# How far the rows below the schedule's peak were measured from exact replays
# (docs/curve.md "How far": the shipped trace's first 500 requests, 2M / 2.63M / 3.3M tokens:
# synthesized schedule -0.34 / -0.28 / -0.44 pp; arrival order -1.40 / -4.40 / -2.38 pp;
# the dense-reuse trace at 150,000 / 300,000: synthesized -0.50 / -1.08 pp). Measurements on
# two traces, stated as such.
BELOW_PEAK_MEASURED = ("on the shipped trace's first 500 requests, 2M to 3.3M tokens, the "
                       "table's rows there read 0.3 to 0.5 points below exact replays, the "
                       "curve's points 1.4 to 4.4; on a dense-reuse trace the rows read up "
                       "to 1.1 points low")


def scheduled_assumption(schedule_pool: int, anchor_tokens: int) -> str:
    """The assumption line of a curve in one replay's event order (scheduled.py)."""
    return (f"curve assumes LRU eviction over pages in the event order of one replay at "
            f"{schedule_pool:,} tokens (match at admission, running requests' pages pinned, "
            f"same-batch requests miss each other's new pages, prompt inserted after "
            f"prefill, waiting prefixes refreshed); valid from {anchor_tokens:,} tokens (the "
            f"running requests' peak): below it a replay queues differently, and the "
            f"table's rows there follow a schedule synthesized at their pool (fcfs, every "
            f"output token reserved, the replay's clock; prefix hits do not shorten a "
            f"prefill, no waiting-prefix refresh), the curve's points the arrival-order "
            f"estimate, low where a replay is memory-bound ({BELOW_PEAK_MEASURED}); not "
            f"modeled: chunked-prefill publication, retractions, whole-leaf eviction; "
            f"exact replays measure the error (--verify-points)")


@dataclass(frozen=True, kw_only=True)
class HitCurve:
    """H(C) for every pool size C. `reuse` holds, sorted, the prefix-maximum stack
    distance (pages) of every cacheable page access a large enough pool hits; each is one
    page of prompt tokens. With a schedule (scheduled.py) `reuse` is in its event order and
    holds from `anchor_pages` up; below it `below` (arrival order) answers:

        H(C) = #{reuse < C} P / prompt      C >= anchor_pages (or no schedule)
             = #{below < C} P / prompt      C <  anchor_pages
    """

    page_size: int
    prompt_tokens: int
    reuse: np.ndarray  # sorted ascending
    compulsory_tokens: int  # first touches within the cap
    accesses: int  # page accesses in the stream
    below: np.ndarray | None = None  # sorted, arrival order; None: no schedule
    anchor_pages: int = 0  # with a schedule: the running requests' peak, in pages
    assumption: str = LRU_ASSUMPTION

    @property
    def ceiling(self) -> float:
        """H with an unbounded pool."""
        return len(self.reuse) * self.page_size / self.prompt_tokens

    @property
    def anchor_tokens(self) -> int:
        return self.anchor_pages * self.page_size

    @property
    def compulsory_share(self) -> float:
        return self.compulsory_tokens / self.prompt_tokens

    @property
    def concurrent_share(self) -> float:
        """Prompt tokens an unbounded pool still misses because the request computing
        them was running, not yet inserted, when they were matched (0 without a
        schedule; can be negative where the schedule's refreshes keep what arrival
        order loses)."""
        if self.below is None:
            return 0.0
        return (len(self.below) - len(self.reuse)) * self.page_size / self.prompt_tokens

    @property
    def uncacheable_share(self) -> float:
        return max(0.0, 1.0 - self.ceiling - self.concurrent_share - self.compulsory_share)

    def _hits(self, pages: int) -> int:
        """Page hits at a pool of `pages`; below the anchor the arrival-order count, never
        more than the event order's at the anchor (the curve stays monotone)."""
        hits = int(np.searchsorted(self.reuse, pages, side="left"))
        if self.below is None or pages >= self.anchor_pages:
            return hits
        return min(int(np.searchsorted(self.below, pages, side="left")), self._anchor_hits)

    @property
    def _anchor_hits(self) -> int:
        return int(np.searchsorted(self.reuse, self.anchor_pages, side="left"))

    def hit_rate(self, pool_tokens: int) -> float:
        """H at a pool of `pool_tokens` (rounded down to whole pages)."""
        return self._hits(pool_tokens // self.page_size) * self.page_size / self.prompt_tokens

    def pool_for(self, share_of_ceiling: float) -> int | None:
        """The smallest pool (tokens) whose H reaches `share_of_ceiling` of the ceiling;
        None for an empty curve."""
        if len(self.reuse) == 0:
            return None
        need = max(math.ceil(share_of_ceiling * len(self.reuse) - 1e-9), 1)
        if self.below is not None and need <= min(len(self.below), self._anchor_hits):
            pages = int(math.floor(self.below[need - 1])) + 1
            if pages < self.anchor_pages:
                return pages * self.page_size
        pages = int(math.floor(self.reuse[need - 1])) + 1
        if self.below is not None:
            pages = max(pages, self.anchor_pages)
        return pages * self.page_size

    def points(self, count: int = 64) -> list[tuple[int, float]]:
        """At least `count` log-spaced pool sizes (whole pages, distinct) from one page to
        the size that reaches the ceiling, each with H; every page size when fewer exist."""
        top = max((self.pool_for(1.0) or self.page_size) // self.page_size, 1)
        if top <= count:
            pages = np.arange(1, top + 1)
        else:
            drawn = count
            pages = np.unique(np.geomspace(1, top, drawn).round())
            while len(pages) < count:  # rounding merges the smallest sizes: draw denser
                drawn += count
                pages = np.unique(np.geomspace(1, top, drawn).round())
        return [(int(p) * self.page_size, self.hit_rate(int(p) * self.page_size)) for p in pages]


def build_curve(stream: PageStream, schedule: Schedule | None = None) -> HitCurve:
    """The curve of `stream` from every access (the sampled estimate lives in
    engine_adapter.instrument.whatif, for a live engine): in arrival order, each request
    alone (distance.py); with `schedule`, in its event order from the running requests'
    peak up (scheduled.py), arrival order below."""
    cacheable = _matchable_mask(stream)
    peaks = prefix_max(stack_distances(stream.keys, stream.starts), stream.starts)[cacheable]
    cold = peaks == COLD
    arrival = np.sort(peaks[~cold])
    page = stream.page_size
    compulsory = int(cold.sum()) * page
    if schedule is None:
        return HitCurve(page_size=page, prompt_tokens=stream.prompt_tokens, reuse=arrival,
                        compulsory_tokens=compulsory, accesses=stream.accesses)
    kinds, requests = schedule.events()
    events = event_distances(stream.keys, stream.starts, stream.prompt_pages,
                             stream.matchable, kinds, requests)
    scheduled = events.distances[cacheable]  # prefix maxima already
    anchor = events.peak_held_pages
    return HitCurve(page_size=page, prompt_tokens=stream.prompt_tokens,
                    reuse=np.sort(scheduled[scheduled != COLD]), compulsory_tokens=compulsory,
                    accesses=stream.accesses, below=arrival, anchor_pages=anchor,
                    assumption=scheduled_assumption(schedule.pool_tokens, anchor * page))


def _matchable_mask(stream: PageStream) -> np.ndarray:
    """True at each access a match may return: request r's first matchable[r] accesses."""
    mask = np.zeros(stream.accesses, dtype=bool)
    lengths = stream.matchable
    if lengths.sum() == 0:
        return mask
    firsts = np.repeat(stream.starts[:-1], lengths)
    within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    mask[firsts + within] = True
    return mask


def hit_rate_at(stream: PageStream, schedule: Schedule, pool_tokens: int) -> float:
    """H at `pool_tokens` in `schedule`'s event order, read at that pool only (a schedule
    synthesized for one pool, synth.py, holds there and nowhere else)."""
    kinds, requests = schedule.events()
    events = event_distances(stream.keys, stream.starts, stream.prompt_pages,
                             stream.matchable, kinds, requests)
    distances = events.distances[_matchable_mask(stream)]
    hits = int(np.count_nonzero(distances < pool_tokens // stream.page_size))
    return hits * stream.page_size / stream.prompt_tokens
