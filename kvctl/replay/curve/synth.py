"""The schedule a replay at a smaller pool would run, synthesized without replaying: for pools
below the recorded schedule's running peak, where that schedule's order no longer holds
(a memory-bound replay admits fewer requests, and they queue longer).

Why it is enough: on the shipped trace's first 500 requests the event pass (scheduled.py)
driven by a replay's own schedule at 2M / 2.63M / 3.3M tokens lands within 0.34 points of
that replay's hit rate, with or without its waiting-prefix refreshes (8.05% vs 8.03% at
2M): what differs below the peak is who runs together, not the refreshes (docs/curve.md).

The model, SGLang's scheduler as the embedded engine runs it (fcfs, no mixed chunk):

    each round, at time t (the previous step's end):
      arrivals with arrival <= t join the queue (trace order = fcfs order)
      prefill: the chunked request continues; then the queue head is admitted (MATCH at t)
               while  held + S + min(O, CLIP) <= pool   and running < max_running
               held = sum over running r of  S_r + g_r + min(O_r - g_r, CLIP)
               (PrefillAdder with ignore_eos: every remaining output token reserved,
                new_token_ratio 1, clipped at SGLang's CLIP_MAX_NEW_TOKENS), S tokens
               extended per request, at most chunk_tokens per step (chunked prefill);
               PROMPT at the step's end, where its last chunk ran; its first token then
      otherwise decode: every running request one token; FINISH at the step's end
               when it has O tokens
      the step lasts step_seconds(prefill tokens, decode requests, decode context tokens):
      the replay's own clock (roofline or a fitted model, engine_adapter/embedded)

Not modeled: prefix hits shortening a prefill (every prompt is extended whole), page
rounding, retractions (a full reservation leaves none), the waiting-prefix refresh (no
REFRESH events), requests SGLang's door refuses (a request the recorded schedule did not
run is not run here either). Pure apart from the clock callable.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from kvctl.replay.curve.schedule import Schedule, _peak
from kvctl.replay.curve.stream import PageStream


def synthesize(stream: PageStream, recorded: Schedule, *, pool_tokens: int,
               step_seconds: Callable[[int, int, int], float], chunk_tokens: int,
               max_running: int, clip_tokens: int) -> Schedule:
    """The schedule (admitted, prompt done, finished per request; no refreshes) of a replay
    at `pool_tokens`, for the requests `recorded` ran (module docstring)."""
    if stream.input_tokens is None or stream.output_tokens is None or stream.arrival_s is None:
        raise ValueError("synthesize needs a stream with input and output lengths and arrivals")
    size = stream.input_tokens.astype(np.int64)
    out = stream.output_tokens.astype(np.int64)
    arrival = np.asarray(stream.arrival_s, dtype=np.float64)
    n = len(size)
    admitted, prompt_done, finished = (np.full(n, np.nan) for _ in range(3))
    order = [r for r in np.argsort(arrival, kind="stable") if not np.isnan(recorded.admitted_s[r])]
    pending = deque(order)  # not yet arrived
    queue: deque[int] = deque()
    ids = np.empty(0, dtype=np.int64)  # running, decoding
    made = np.empty(0, dtype=np.int64)  # their output tokens so far
    chunked, chunk_left = -1, 0
    t = 0.0
    while pending or queue or len(ids) or chunked >= 0:
        while pending and arrival[pending[0]] <= t:
            queue.append(pending.popleft())
        held = int((size[ids] + made + np.minimum(out[ids] - made, clip_tokens)).sum())
        if chunked >= 0:
            held += int(size[chunked] + min(out[chunked], clip_tokens))
        budget, extended, done = chunk_tokens, 0, []
        if chunked >= 0:
            take = min(chunk_left, budget)
            budget, extended, chunk_left = budget - take, take, chunk_left - take
            if chunk_left == 0:
                done.append(chunked)
                chunked = -1
        while (queue and chunked < 0 and budget > 0
               and len(ids) + len(done) + 1 <= max_running):
            r = queue[0]
            need = int(size[r] + min(out[r], clip_tokens))
            if held + need > pool_tokens:
                if not len(ids) and not done and extended == 0:
                    queue.popleft()  # can never fit: no events, as a refused request
                    continue
                break
            queue.popleft()
            admitted[r] = t
            held += need
            take = min(int(size[r]), budget)
            budget, extended = budget - take, extended + take
            if take < size[r]:
                chunked, chunk_left = r, int(size[r]) - take
            else:
                done.append(r)
        if extended:
            t += step_seconds(extended, 0, 0)
            for r in done:
                prompt_done[r] = t
                if out[r] <= 1:
                    finished[r] = t
            fresh = np.array([r for r in done if out[r] > 1], dtype=np.int64)
            ids = np.concatenate([ids, fresh])
            made = np.concatenate([made, np.ones(len(fresh), dtype=np.int64)])
            continue
        if len(ids):
            t += step_seconds(0, len(ids), int((size[ids] + made).sum()))
            made += 1
            over = made >= out[ids]
            finished[ids[over]] = t
            ids, made = ids[~over], made[~over]
            continue
        if pending:
            t = max(t, float(arrival[pending[0]]))
    return Schedule(pool_tokens=pool_tokens, admitted_s=admitted, prompt_done_s=prompt_done,
                    finished_s=finished, hit_tokens=np.zeros(n, dtype=np.int64),
                    peak_running=_peak(admitted, finished))


def synthesized_hit_rate(stream: PageStream, recorded: Schedule, config, pool_tokens: int
                         ) -> float:
    """H at `pool_tokens` in the event order of the schedule synthesized there, with the
    replay's own settings (`config`: the embedded engine's EngineConfig, its clock, chunk
    size and running cap) and SGLang's CLIP_MAX_NEW_TOKENS."""
    from sglang.srt.managers.schedule_policy import CLIP_MAX_NEW_TOKENS

    from engine_adapter.embedded.step_cost import build_cost_model
    from kvctl.replay.curve.profile import hit_rate_at

    clock = build_cost_model(config)
    schedule = synthesize(stream, recorded, pool_tokens=pool_tokens,
                          step_seconds=clock.step_seconds,
                          chunk_tokens=min(config.token_budget, config.max_prefill_tokens),
                          max_running=config.max_running_requests,
                          clip_tokens=CLIP_MAX_NEW_TOKENS)
    return hit_rate_at(stream, schedule, pool_tokens)
