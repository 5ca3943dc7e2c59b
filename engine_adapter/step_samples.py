"""What one scheduler step cost and what it was made of: the plugin measures these inside a
real SGLang server (plugin/step_timer.py), `kvctl calibrate` fits a step-cost model to them
(kvctl/calibrate/fit.py), `kvctl record` keeps them next to its trace.

A step's *shape* is what a transformer forward's cost is made of::

    extend_tokens            prompt tokens computed this step (the prefill part; a chunk
                             counts its own tokens only)               linear layers
    prefill_requests         requests in the prefill part               per-request work
    prefix_tokens            tokens of those requests already in KV (cache hits and earlier
                             chunks): read by attention, not computed
    prefill_attention_pairs  (query, key) pairs the prefill part's causal attention scores:
                             sum_i e_i * p_i + e_i * (e_i + 1) / 2 for extend e_i on prefix p_i
    decode_requests          requests decoding one token this step      linear layers
    decode_context_tokens    sum of their context lengths               attention reads

    request i:  |<---- p_i (in KV) ---->|<-- e_i (computed now) -->|
    its extend token j (0-based) attends to p_i + j + 1 keys: sum_j = e_i p_i + e_i (e_i+1)/2

Wire format (`/step_samples`, the record sidecar): columns, one row per sample, in the
order of `FIELDS`. Pure: no I/O, no SGLang.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from engine_adapter.base.errors import InputError

KINDS = ("prefill", "decode", "mixed")


class StepShape(NamedTuple):
    """The cost-relevant shape of one forward step (module docstring)."""

    extend_tokens: int = 0
    prefill_requests: int = 0
    prefill_attention_pairs: int = 0
    decode_requests: int = 0
    decode_context_tokens: int = 0


def attention_pairs(extend_lens: Iterable[int], prefix_lens: Iterable[int]) -> int:
    """Causal (query, key) pairs of extends `e_i` on prefixes `p_i` (module docstring)."""
    return sum(e * p + e * (e + 1) // 2 for e, p in zip(extend_lens, prefix_lens))


class StepSample(NamedTuple):
    """One measured step. `end_s`: seconds since the plugin attached when the step's results
    were processed; `wall_s`: the step's duration (plugin/step_timer.py defines it);
    `run_s`: from SGLang's `run_batch` start to processed (the forward and its results).
    A NamedTuple: built on every scheduler step, it must be cheap (about 0.5 us)."""

    seq: int
    end_s: float
    wall_s: float
    run_s: float
    kind: str
    extend_tokens: int
    prefill_requests: int
    prefix_tokens: int
    prefill_attention_pairs: int
    decode_requests: int
    decode_context_tokens: int

    @property
    def shape(self) -> StepShape:
        return StepShape(self.extend_tokens, self.prefill_requests, self.prefill_attention_pairs,
                         self.decode_requests, self.decode_context_tokens)


FIELDS = StepSample._fields
_INT_FIELDS = frozenset(FIELDS) - {"end_s", "wall_s", "run_s", "kind"}


def encode_samples(samples: Sequence[StepSample]) -> dict[str, Any]:
    """`{"fields": [...], "rows": [[...], ...]}`: compact, self-describing."""
    return {"fields": list(FIELDS), "rows": [list(s) for s in samples]}


def decode_samples(doc: Any, *, where: str) -> tuple[StepSample, ...]:
    """The inverse of `encode_samples`; InputError naming `where` and the first bad row."""
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise InputError(f"{where}: no step samples (expected an object with fields and rows)")
    fields = doc.get("fields")
    if fields != list(FIELDS):
        raise InputError(f"{where}: step-sample fields {fields!r} are not this kvctl's "
                         f"{list(FIELDS)!r} (another kvctl version?)")
    samples = []
    for index, row in enumerate(doc["rows"]):
        try:
            if not isinstance(row, list) or len(row) != len(FIELDS):
                raise ValueError(f"a row of {len(FIELDS)} values expected")
            sample = StepSample(*row)
            _check(sample)
        except (TypeError, ValueError) as err:
            raise InputError(f"{where}: step sample {index} is malformed ({err})") from None
        samples.append(sample)
    return tuple(samples)


def _check(sample: StepSample) -> None:
    if sample.kind not in KINDS:
        raise ValueError(f"kind {sample.kind!r} not one of {', '.join(KINDS)}")
    for name in _INT_FIELDS:
        value = getattr(sample, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name}={value!r} is not a count")
    for name in ("end_s", "wall_s", "run_s"):
        value = getattr(sample, name)
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name}={value!r} is not a finite duration")
