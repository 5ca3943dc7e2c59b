"""The prefix-hit funnel contract (seed 000 0x0CF) and the four lengths (seed 000 0x07A)."""

from __future__ import annotations

import pytest

from engine_adapter.funnel import (
    REJECTION_REASONS,
    STAGES,
    Funnel,
    FunnelStage,
    PrefixLengths,
    Rejection,
    empty_funnel,
)

pytestmark = pytest.mark.unit


def _funnel(requests, tokens, buckets=None, buckets_tokens=None, lengths=None) -> Funnel:
    """A funnel from per-stage counts; buckets default to the consistent differences."""
    stages = tuple(FunnelStage(name=n, requests=r, tokens=t) for n, r, t in zip(STAGES, requests, tokens))
    if buckets is None:
        buckets = [None if a is None or b is None else a - b for a, b in zip(requests, requests[1:])]
    if buckets_tokens is None:
        buckets_tokens = [None if a is None or b is None else a - b for a, b in zip(tokens, tokens[1:])]
    rejections = tuple(Rejection(reason=r, requests=q, tokens=t)
                       for r, q, t in zip(REJECTION_REASONS, buckets, buckets_tokens))
    return Funnel(stages=stages, rejections=rejections, lengths=lengths or PrefixLengths())


SEED_REQUESTS = [12, 11, 9, 7, 6, 6, 5, 4, 4]  # seed 000 0x0CF checked synthetic counts


def test_stage_and_bucket_names_line_up():
    """Nine stages, eight buckets, each bucket named after the stage it guards."""
    assert len(STAGES) == 9 and len(REJECTION_REASONS) == 8
    assert STAGES[0] == "requests" and STAGES[-1] == "executed_hits"
    assert REJECTION_REASONS[0] == "unauthorized_namespace" and REJECTION_REASONS[-1] == "not_executed"


def test_seed_funnel_is_monotone():
    """seed 000 0x0CF: 12 >= 11 >= 9 >= 7 >= 6 >= 6 >= 5 >= 4 >= 4 with one bucket per drop."""
    funnel = _funnel(SEED_REQUESTS, SEED_REQUESTS)
    assert funnel.is_monotone()
    assert [b.requests for b in funnel.rejections] == [1, 2, 2, 1, 0, 1, 1, 0]


def test_growing_stage_is_not_monotone():
    """A later stage larger than an earlier one breaks monotonicity."""
    requests = [12, 11, 9, 10, 6, 6, 5, 4, 4]
    assert not _funnel(requests, requests).is_monotone()


def test_bucket_that_does_not_match_the_drop_is_not_monotone():
    """A drop of 2 requests counted as 1 in its bucket is caught."""
    buckets = [1, 1, 2, 1, 0, 1, 1, 0]
    assert not _funnel(SEED_REQUESTS, SEED_REQUESTS, buckets=buckets).is_monotone()


def test_token_drop_must_match_its_bucket_too():
    """Requests consistent but tokens off by one in a bucket: not monotone."""
    tokens = [100, 90, 80, 70, 60, 60, 50, 40, 40]
    buckets_tokens = [10, 10, 10, 10, 0, 10, 10, 1]
    assert not _funnel(SEED_REQUESTS, tokens, buckets_tokens=buckets_tokens).is_monotone()


def test_unobservable_stages_are_skipped_not_assumed():
    """A stage an engine cannot observe (None) is skipped: the rest must still be monotone."""
    requests = [12, 11, None, None, None, None, None, None, 4]
    tokens = [100, 90, None, None, None, None, None, None, 40]
    funnel = _funnel(requests, tokens)
    assert funnel.is_monotone()
    assert funnel.stage("candidates").requests is None
    requests[-1] = 20
    assert not _funnel(requests, tokens).is_monotone()


def test_hit_rate_is_runtime_over_prompt():
    """seed 003 eq. (2): H_prefix = sum S_runtime / sum S_prompt; None before any request."""
    assert empty_funnel().hit_rate is None
    funnel = _funnel(SEED_REQUESTS, SEED_REQUESTS, lengths=PrefixLengths(prompt=1_000, runtime=250))
    assert funnel.hit_rate == 0.25
    assert (funnel.prompt_tokens, funnel.hit_tokens, funnel.recomputed_tokens) == (1_000, 250, 750)


def test_recompute_is_prompt_minus_runtime():
    """seed 000 0x07E: S_prompt 48, S_runtime 32 -> S_recompute 16."""
    assert PrefixLengths(prompt=48, semantic=48, indexed=48, cap=47, runtime=32).recompute == 16


def test_empty_funnel_is_observable_zero_and_monotone():
    """Every stage observable and 0, every bucket 0."""
    funnel = empty_funnel()
    assert all(s.requests == 0 and s.tokens == 0 for s in funnel.stages)
    assert all(b.requests == 0 and b.tokens == 0 for b in funnel.rejections)
    assert funnel.is_monotone()


def test_stage_lookup_by_name():
    """stage(name) returns that stage; an unknown name is an error."""
    funnel = _funnel(SEED_REQUESTS, SEED_REQUESTS)
    assert funnel.stage("mapped").requests == 5
    with pytest.raises(ValueError):
        funnel.stage("nonsense")
