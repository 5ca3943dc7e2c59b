"""Tracked.chain and to_token_array over a real SGLang `Req` built by `prefill.build_req`:
a live request's prompt exists once (the Req's `array('q')`), the chain views it."""

from __future__ import annotations

from array import array

import numpy as np
import pytest

from engine_adapter.embedded.prefill import build_req
from engine_adapter.embedded.page_hashes import BlockPrompt
from engine_adapter.embedded.prefill import to_token_array
from engine_adapter.embedded.requests import RequestSpec, Tracked

pytestmark = pytest.mark.unit


def test_to_token_array_expands_a_block_prompt_exactly():
    """Blocks (3, 0) cut at 515 tokens: 1537..2048 (block 3), then 1, 2, 3 (block 0)."""
    out = to_token_array(BlockPrompt((3, 0), 515))
    assert isinstance(out, array) and out.typecode == "q"
    assert list(out) == list(range(1537, 2049)) + [1, 2, 3]
    assert list(to_token_array(np.empty(0, dtype=np.int64))) == []


def test_chain_views_the_reqs_prompt_and_builds_it_on_first_read():
    from engine_adapter.embedded import sglang_imports

    sglang_imports.load()
    spec = RequestSpec(rid="r0", tokens=BlockPrompt((3, 0), 515), max_new_tokens=4,
                       block_ids=(3, 0))
    tr = Tracked(spec=spec, make_req=build_req, namespace_label="ns", key=("ns", 0))
    assert not tr.built
    chain = tr.chain
    assert tr.built  # the chain reads the Req's prompt: reading it builds the Req
    req_tokens = np.frombuffer(tr.req.origin_input_ids, dtype=np.int64)
    assert np.shares_memory(chain.prompt, req_tokens)  # one copy of the prompt, not two
    assert chain.prompt.tolist() == list(range(1537, 2049)) + [1, 2, 3]
