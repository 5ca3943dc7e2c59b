"""The optional real forward pass: kvctl's tiny transformer on the step's allocated slots.

With `EngineConfig(tiny_model=<config.json>, kv_pool="mha")` every prefill chunk and decode
step runs `TinyTransformer.forward` over exactly the slots SGLang's allocator just handed
out, writing real K/V into SGLang's `MHATokenToKVPool` and attending through
`req_to_token`; the greedy token replaces the synthetic one. A prefix hit then really
skips computing the prefix, so exact reuse is observable: the logits equal those of a
full recompute (tests/integration/test_engine_exactness.py).

Workload token ids are synthetic and may exceed the tiny vocabulary; they are folded with
`id % vocab_size` before embedding (a fixed function of the id, so equal prefixes stay
equal and reuse stays exact).
"""

from __future__ import annotations

from typing import Any

import torch

from engine_adapter.embedded.requests import RequestState
from engine_adapter.embedded.state import EngineState
from engine_adapter.embedded.tiny_model import ForwardItem, TinyModelConfig, TinyTransformer
from engine_adapter.base.errors import InputError


class ModelRunner:
    def __init__(self, st: EngineState) -> None:
        if st.config.kv_pool != "mha":
            raise InputError("a tiny model needs real K/V bytes: use kv_pool='mha'")
        self.st = st
        self.config = TinyModelConfig.from_config_json(st.config.tiny_model)
        self.model = TinyTransformer(self.config, seed=st.config.seed, device=st.config.device)
        self.logits: dict[str, list[torch.Tensor]] = {}  # rid -> logits per produced token

    def _fold(self, tokens: Any) -> torch.Tensor:
        return torch.as_tensor(list(tokens), dtype=torch.int64) % self.config.vocab_size

    def prefill(self, batch: Any, members: list) -> dict[str, int]:
        """Compute every computed (non-reload) member's new tokens; greedy next token for
        members whose prompt is complete after this chunk."""
        items, owners, offset = [], [], 0
        for tr, extend in zip(members, batch.extend_lens):
            req = tr.req
            if tr.state != RequestState.RELOADING:
                fill = req.full_untruncated_fill_ids
                items.append(ForwardItem(
                    req_pool_idx=req.kv.req_pool_idx, start=req.prefix_len,
                    token_ids=self._fold(fill[req.prefix_len : req.extend_end]),
                    out_slots=batch.out_cache_loc[offset : offset + extend].to(torch.int64),
                ))
                owners.append(tr)
            offset += extend
        if not items:
            return {}
        logits = self.model.forward(self.st.sg.kv_pool, self.st.sg.req_to_token_pool.req_to_token, items)
        tokens = {}
        for tr, row in zip(owners, logits):
            if tr.req.extend_end >= len(tr.req.full_untruncated_fill_ids):
                self.logits.setdefault(tr.req.rid, []).append(row.clone())
                tokens[tr.req.rid] = int(row.argmax())
        return tokens

    def decode(self, batch: Any) -> list[int]:
        """One token per running request, at position seqlen - 1 (its last output token)."""
        items = []
        for index, req in enumerate(batch.reqs):
            position = len(req.origin_input_ids) + len(req.output_ids) - 1
            items.append(ForwardItem(
                req_pool_idx=req.kv.req_pool_idx, start=position,
                token_ids=self._fold([req.output_ids[-1]]),
                out_slots=batch.out_cache_loc[index : index + 1].to(torch.int64),
            ))
        logits = self.model.forward(self.st.sg.kv_pool, self.st.sg.req_to_token_pool.req_to_token, items)
        tokens = []
        for req, row in zip(batch.reqs, logits):
            self.logits.setdefault(req.rid, []).append(row.clone())
            tokens.append(int(row.argmax()))
        return tokens
