"""SGLang's door: the checks a server runs on a request before it may wait for admission.

In the order a request meets them in SGLang 0.5.23:

    tokenizer_manager.py  _validate_one_request     input >= context length: refused;
                                                    input + max_new_tokens > context: refused
    scheduler.py          init_req_max_new_tokens   max_new_tokens clipped to
                                                    max_req_len - input - 1 and to what an
                                                    empty pool holds (the allocator's
                                                    max_new_tokens_for_memory)
    managers/utils.py     validate_input_length     input >= max_req_input_len: aborted

with max_req_len = min(context length - 1, pool - 1) and max_req_input_len =
max_req_len - 5 (tp_worker.py get_worker_info). The two SGLang functions that take plain
numbers or a request's length are called; the tokenizer manager's messages are its own
f-strings, copied. A refused request holds nothing and outputs nothing; the replay goes on.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np

from engine_adapter.embedded.config import EngineConfig
from engine_adapter.embedded.prefill import build_req, namespace_label
from engine_adapter.embedded.requests import FinishedRecord, RequestSpec, Tracked


def door(spec: RequestSpec, config: EngineConfig, allocator) -> tuple[str | None, int]:
    """(why SGLang refuses `spec`, or None; the max_new_tokens it would run with)."""
    from sglang.srt.managers.utils import validate_input_length

    context = config.max_context_len
    prompt = len(spec.tokens)
    max_new = spec.max_new_tokens
    if prompt >= context:
        return (f"The input ({prompt} tokens) is longer than the model's context length "
                f"({context} tokens)."), 0
    if prompt + max_new > context:
        return (f"Requested token count exceeds the model's maximum context length of "
                f"{context} tokens. You requested a total of {prompt + max_new} tokens: "
                f"{prompt} tokens from the input messages and {max_new} tokens for the "
                "completion. Please reduce the number of tokens in the input messages or "
                "the completion to fit within the limit."), 0
    max_req_len = min(context - 1, config.pool_tokens - 1)
    max_new = max(0, min(max_new, max_req_len - prompt - 1))
    max_new = allocator.max_new_tokens_for_memory(
        prompt, max_new, token_capacity=config.pool_tokens, sliding_window_size=None,
        chunk_size=config.token_budget)
    # validate_input_length reads only the prompt's length (no truncation asked)
    error = validate_input_length(SimpleNamespace(origin_input_ids=range(prompt)),
                                  max_req_len - 5, False)
    if error or max_new is None:
        return error or f"Request prompt exceeds the KV memory budget: input_len={prompt}.", 0
    return None, max_new


def rejected_record(spec: RequestSpec, clock_s: float, reason: str) -> FinishedRecord:
    """The record of a refused request: no outputs, no hit, no latency of its own."""
    return FinishedRecord(rid=spec.rid, session=spec.session, finish_s=clock_s,
                          output_ids=np.empty(0, dtype=np.int64), prompt_tokens=len(spec.tokens),
                          hit_tokens=0, ttft_s=0.0, itl_s=np.empty(0, dtype=np.float64),
                          queue_s=0.0, rejected=reason)


def admit_arrivals(st, config: EngineConfig, rejected: list[FinishedRecord]) -> None:
    """Requests due by `st.clock_s` pass the door and join the waiting queue (scheduler.py
    _add_request_to_queue appends), or are refused: their records go to `rejected` and
    `st.finished`. Mutates `st` (future, waiting, by_rid, finished) and `rejected`."""
    for spec in st.pop_due():
        reason, max_new = door(spec, config, st.sg.allocator)
        if reason is not None:
            record = rejected_record(spec, st.clock_s, reason)
            rejected.append(record)
            st.finished.append(record)
            continue
        if max_new != spec.max_new_tokens:
            spec = dataclasses.replace(spec, max_new_tokens=max_new)
        label = namespace_label(spec.read_namespace, st.namespace_salt)
        tracked = Tracked(spec=spec, make_req=build_req, namespace_label=label,
                          key=(label, st.generation))
        st.by_rid[spec.rid] = tracked
        st.waiting.append(tracked)
