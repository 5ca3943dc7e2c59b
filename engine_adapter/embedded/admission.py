"""Prefill admission: which requests get prefill work this step, and how much ("what fits").

Per step, under a token budget (chunked prefill, seed 003):

1. continue partially prefilled requests (they hold their rows; no new match);
2. admit waiting requests in arrival order: authorize the namespace before the tree is
   consulted, match with SGLang's `Req.init_next_round_input(tree_cache)` (S_cap = S-1,
   page aligned), lock the matched node, check capacity (free + evictable - decode reserve)
   and the admission ceiling, and size the chunk.

Nothing here allocates K/V (allocation.py does, and rolls an admission back when SGLang's
allocator is short). Page ranges, page size P (the chunk end and the pages a request needs):

    chunk: a prompt longer than the budget is cut back to a page boundary

        prefix_len                 prefix_len + budget
        |<---------- budget ---------->|
        |<------ take ------>|           end = floor((prefix_len + budget) / P) * P
                             ^ end

    need: the tokens (whole pages) an extend of [prefix_len, prefix_len + take) allocates

        0        P        2P       3P       4P
        |--------|--------|--------|--------|
        [ prefix  )[ take                )
                  ^ prefix_len = P (held)   ^ prefix_len + take = 3.5P
        need = page_ceil(prefix_len + take) - floor(prefix_len / P) * P = 4P - P = 3P

    (prefix_len is page aligned for a match, a chunk end and a reload end; were it not,
    the page it ends in would be counted again: an over-estimate, never an under-one.)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import NamedTuple

from engine_adapter.embedded.requests import RequestState, Tracked
from engine_adapter.embedded.state import EngineState
from engine_adapter.instrument.funnel_recorder import AdmissionFacts
from engine_adapter.base.pages import page_ceil, page_floor


def namespace_label(namespace: str, salt: str) -> str:
    """Low-cardinality label for a namespace: never the raw tenant string, and salted so
    a guessable tenant name cannot be recovered from it (seed 000 0x0CE). The label is
    also the SGLang `cache_salt`, so it partitions the radix tree."""
    return "ns-" + hashlib.sha256(f"{salt}\0{namespace}".encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Blocked:
    """The waiting head was refused with nothing admitted this step (see still_blocked)."""

    rid: str
    marks: tuple
    need: int | None  # tokens its admission needed (None: refused before _fits, no deferral)
    evictable: int  # the tree's evictable tokens it was checked with (its own path locked)
    reserve: int  # the decode reserve it was checked with


class Selection(NamedTuple):
    """This step's prefill work, in batch order. `origins[i]`: "partial" (a continuation,
    which keeps its row) or "waiting" (newly admitted: matched, locked, sized)."""

    chosen: list[Tracked]
    origins: list[str]
    computed_tokens: int  # tokens the modeled forward computes (a reload span computes none)


class Admission:
    """Picks prefill work under the token budget and the running-request limit.

    `select` mutates the queues (pops what it picks from `partial` and `waiting`), each
    picked request's `Req` (fill ids, prefix_len, extend_end, cache salt, its tree lock) and
    `Tracked` (state, key, admission facts), and counts ceiling deferrals. A refused
    waiting request is left as it was found (its match unlocked) at the head of the queue.
    It allocates nothing and raises nothing of its own."""

    def __init__(self, st: EngineState, retention) -> None:
        self.st = st
        self.retention = retention
        self.blocked: Blocked | None = None
        self._last_fit: tuple | None = None  # (rid, need, evictable) of the head's last _fits

    def select(self, budget: int, decode_reserve: int) -> Selection:
        """Continuations first, then waiting requests in order, until the budget, the
        running limit or a refusal stops it (arrival order: no request overtakes the head)."""
        st = self.st
        page = st.config.page_size
        chosen: list[Tracked] = []
        origins: list[str] = []
        computed = 0
        # Partially prefilled requests (chunk continuations, completed reloads) first.
        while st.partial and budget >= page:
            tr = st.partial[0]
            req = tr.req
            remaining = len(req.full_untruncated_fill_ids) - req.prefix_len
            take = self._chunk(req.prefix_len, remaining, budget)
            if take <= 0 or not self._fits(take, req.prefix_len, decode_reserve, chosen, new=False):
                break
            st.partial.popleft()
            req.init_next_round_input()  # refresh fill ids only: the row is already held
            req.extend_end = req.prefix_len + take
            budget -= take
            computed += take
            chosen.append(tr)
            origins.append("partial")
        self.blocked = None
        self._last_fit = None
        while st.waiting and budget >= page and len(st.live_tracked()) + len(chosen) < st.config.max_running_requests:
            tr = st.waiting[0]
            outcome = self._admit(tr, budget, decode_reserve, chosen)
            if outcome is None:
                break
            st.waiting.popleft()
            budget -= outcome
            computed += outcome
            chosen.append(tr)
            origins.append("waiting")
        if st.waiting and not chosen:
            attempted = self._last_fit is not None and self._last_fit[0] == st.waiting[0].spec.rid
            self.blocked = Blocked(rid=st.waiting[0].spec.rid, marks=self._marks(),
                                   need=self._last_fit[1] if attempted else None,
                                   evictable=self._last_fit[2] if attempted else 0,
                                   reserve=decode_reserve)
        self._last_fit = None
        return Selection(chosen, origins, computed)

    def _marks(self) -> tuple:
        """What can change a refused head's next attempt: a finish or abort, a retraction,
        a revoked lease (all free memory or change the tree), a generation bump (changes
        its key), an eviction (may shorten its match: it would need more, but by how much
        only a new match says)."""
        c = self.st.counters
        return (c.requests_finished, c.retractions, len(self.st.leases), self.st.generation,
                c.evictions)

    def still_blocked(self) -> Blocked | None:
        """The last step's refusal of the waiting head, if it must stand this step too.

        Admission of the head was refused (capacity, the ceiling, max running or the
        token budget) with nothing else admitted; with only decoding since (no eviction),
        the tree and the running set are unchanged and free memory only shrank, so the
        same match and a refusal follow (`deferred_at` says which kind).
        None when anything in `_marks` moved or the head changed."""
        st, blocked = self.st, self.blocked
        if blocked is None or not st.waiting or st.waiting[0].spec.rid != blocked.rid:
            return None
        return blocked if blocked.marks == self._marks() else None

    def deferred_at(self, available: int) -> bool:
        """Whether the blocked head's refusal, repeated with `available` free tokens and
        nothing else changed, is the admission ceiling's (counted as a deferral) rather
        than capacity's: `_fits` for a new request with nothing else chosen."""
        st, blocked = self.st, self.blocked
        if blocked is None or blocked.need is None or st.config.tau_high is None:
            return False
        evictable = blocked.evictable
        if blocked.need + blocked.reserve > available + evictable:
            return False
        pool = st.sg.allocator.size
        return (pool - available - evictable + blocked.need) / pool > st.config.tau_high

    def _chunk(self, prefix_len: int, remaining: int, budget: int) -> int:
        """Tokens to compute now: all if they fit, else a page-aligned chunk end (diagram)."""
        if remaining <= budget:
            return remaining
        page = self.st.config.page_size
        return page_floor(prefix_len + budget, page) - prefix_len

    def _fits(self, tokens: int, prefix_len: int, decode_reserve: int, chosen: list[Tracked],
              *, new: bool = True) -> bool:
        """Capacity (free + evictable) for `tokens` new slots, and for a new admission the
        ceiling. A continuing request is never held back by the ceiling: it already holds
        memory, and stalling it could only deadlock."""
        st = self.st
        page = st.config.page_size
        need = page_ceil(prefix_len + tokens, page) - page_floor(prefix_len, page)
        if new and not chosen and st.waiting:  # the head's own path is locked now
            self._last_fit = (st.waiting[0].spec.rid, need, st.sg.tree_cache.evictable_size())
        pending = sum(page_ceil(t.req.extend_end, page) - page_floor(t.req.prefix_len, page) for t in chosen)
        free = st.sg.allocator.available_size() + st.sg.tree_cache.evictable_size()
        if need + pending + decode_reserve > free:
            return False
        tau = st.config.tau_high
        if new and tau is not None and (st.live_tracked() or chosen):
            pool = st.sg.allocator.size
            locked = pool - st.sg.allocator.available_size() - st.sg.tree_cache.evictable_size()
            # Ceiling on non-reclaimable use (SGLang's token_usage): evictable cache is
            # reclaimable on demand, counting it would make a warm cache look full forever.
            if (locked + pending + need) / pool > tau:
                st.counters.admission_deferrals += 1
                return False
        return True

    def _admit(self, tr: Tracked, budget: int, decode_reserve: int, chosen: list[Tracked]) -> int | None:
        """Match, lock and size one waiting request; None leaves it waiting (rolled back)."""
        st = self.st
        spec, req = tr.spec, tr.req
        authorized = self._authorized(spec)
        own = spec.read_namespace if authorized else spec.tenant
        tr.namespace_label = namespace_label(own, st.namespace_salt)
        tr.generation = st.generation
        tr.key = (tr.namespace_label, st.generation)
        req.cache_salt = tr.namespace_label
        req.extra_key = f"gen{st.generation}"
        tree = st.sg.tree_cache
        if authorized:
            req.init_next_round_input(tree)
        else:  # refused before the tree is consulted: no lookup at all
            req.init_next_round_input(None)
            req.prefix_len = 0
            req.last_node = tree.root_node_handle(req.extra_key)
            req.kv.cache_protected_len = 0
        fill = req.full_untruncated_fill_ids
        s_cap = max(len(fill) - 1, 0)
        req.lock = tree.lock(req.last_node)
        host = self.retention.host_plan(tr, s_cap) if authorized else None
        reload = host is not None and host.reload
        if reload:
            take = host.end - req.prefix_len  # allocate the reload span; no compute now
        else:
            take = self._chunk(req.prefix_len, len(fill) - req.prefix_len, budget)
        chunking = not reload and req.prefix_len + take < len(fill)
        if chunking and (st.partial or any(_is_chunking(t) for t in chosen)):
            take = 0  # one chunked prefill at a time, as SGLang's scheduler does
        if take <= 0 or not self._fits(take, req.prefix_len, decode_reserve, chosen):
            tree.unlock(req.lock)
            req.lock = None
            return None
        req.extend_end = req.prefix_len + take
        tr.admitted_s = st.clock_s if tr.admitted_s is None else tr.admitted_s
        if not tr.funnel_done:
            s_any, s_ns, s_sem = (st.oracle.lengths(tr.key, fill, s_cap, chain=tr.chain)
                                  if authorized else (0, 0, 0))
            tr.facts = AdmissionFacts(
                s_prompt=len(spec.tokens), s_cap=s_cap, authorized=authorized,
                s_any=s_any, s_ns=s_ns, s_sem=s_sem,
                s_indexed=req.prefix_len + (host.end - req.prefix_len if host else 0),
                leased=True, mapped=host is None or host.reload, snapshot_current=True,
                s_runtime=req.prefix_len,
            )
        if reload:
            tr.state = RequestState.RELOADING
            tr.reload_required_end = host.end
            tr.reload_tokens = host.end - req.prefix_len
            return 0
        tr.state = RequestState.PREFILL
        return take

    def _authorized(self, spec) -> bool:
        """Whether `spec`'s tenant may read the namespace it asks for (its own, or one the
        config's `authorized` map grants it)."""
        namespace = spec.read_namespace
        return namespace == spec.tenant or namespace in self.st.config.authorized.get(spec.tenant, ())


def _is_chunking(tr: Tracked) -> bool:
    return tr.state == RequestState.PREFILL and tr.req.extend_end < len(tr.req.full_untruncated_fill_ids)
