"""Exact prefix reuse through SGLang 0.5.23's own KV components, proven with the tiny model.

Each engine here is SGLang's real scheduler-side stack on CPU: `ReqToTokenPool`,
`MHATokenToKVPool`, the token allocator SGLang picks for the page size, and
`UnifiedRadixCache` (Rust core), driven through SGLang's request helpers (`Req`,
`ScheduleBatch.prepare_for_extend / prepare_for_decode`, `checkpoint_kv_cache`,
`release_kv_cache`). `TinyTransformer` writes real K/V into the pool and reads it back through
`req_to_token`, so a prefix hit attends over K/V an earlier request computed. The baseline is the
same request on an engine whose cache is disabled (`CacheInitParams(disable=True)`).
"""

from __future__ import annotations

import random
from array import array
from pathlib import Path
from typing import NamedTuple

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sglang")

from sglang.srt import runtime_context  # noqa: E402
from sglang.srt.configs.model_config import ModelConfig  # noqa: E402
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch  # noqa: E402
from sglang.srt.mem_cache.allocator import (  # noqa: E402
    PagedTokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
)
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache  # noqa: E402
from sglang.srt.mem_cache.memory_pool import (  # noqa: E402
    MHATokenToKVPool,
    NoOpMHATokenToKVPool,
    ReqToTokenPool,
)
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType  # noqa: E402
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

from engine_adapter.embedded.tiny_model import (  # noqa: E402
    ForwardItem,
    TinyModelConfig,
    TinyTransformer,
)
from kvctl.errors import InputError, IntegrityError  # noqa: E402

pytestmark = pytest.mark.integration

FIXTURE_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_llama"
POOL_TOKENS = 1024
EXACT = 1e-6  # fp32, max abs logit difference


class RunResult(NamedTuple):
    prefix_len: int  # tokens SGLang's match found in the tree at admission
    logits: torch.Tensor  # (1 prefill + decode steps, vocab): what each greedy token came from
    output_ids: list[int]


class Engine:
    """SGLang's real pools, allocator and radix cache on CPU, plus the tiny model on top."""

    def __init__(self, model: TinyTransformer, *, page_size: int, cache_disabled: bool = False):
        server_args = ServerArgs(
            model_path=str(FIXTURE_DIR), device="cpu", skip_tokenizer_init=True, page_size=page_size
        )
        runtime_context.publish(server_args, role="scheduler")
        self.model, self.model_config = model, ModelConfig.from_server_args(server_args)
        self.req_to_token_pool = ReqToTokenPool(
            size=16, max_context_len=512, device="cpu", enable_memory_saver=False
        )
        self.kv_pool = MHATokenToKVPool(
            size=POOL_TOKENS, page_size=page_size, dtype=torch.float32, head_num=2, head_dim=16,
            layer_num=2, device="cpu", enable_memory_saver=False,
        )
        # The allocator SGLang's kv_cache_configurator picks for this page size.
        if page_size == 1:
            self.allocator = TokenToKVPoolAllocator(
                POOL_TOKENS, dtype=torch.float32, device="cpu", kvcache=self.kv_pool,
                need_sort=False,
            )
        else:
            self.allocator = PagedTokenToKVPoolAllocator(
                size=POOL_TOKENS, page_size=page_size, dtype=torch.float32, device="cpu",
                kvcache=self.kv_pool, need_sort=False,
            )
        self.cache = UnifiedRadixCache(
            params=CacheInitParams(
                disable=cache_disabled, req_to_token_pool=self.req_to_token_pool,
                token_to_kv_pool_allocator=self.allocator, page_size=page_size,
                tree_components=(ComponentType.FULL,), eviction_policy="lru",
                tree_core_backend="rust",
            )
        )

    def run(
        self, rid: str, tokens: list[int], *, max_new_tokens: int = 4,
        first_chunk: int | None = None, tamper_prefix: bool = False,
    ) -> RunResult:
        """Prefill (in two chunks when `first_chunk` is set), then greedy-decode to the end.

        `tamper_prefix` adds 1.0 to layer 0's K of the matched prefix slots before prefill: a
        control that the model really attends over what the pool holds for the prefix.
        """
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0, ignore_eos=True)
        params.normalize(None)
        req = Req(rid, "", array("q", tokens), params, vocab_size=1000, eos_token_ids=set())
        req.init_next_round_input(self.cache)  # SGLang's own prefix match
        matched_prefix_len = req.prefix_len
        req.lock = self.cache.lock(req.last_node)
        if first_chunk is not None:
            # A chunked request, as SGLang's PrefillAdder.add_chunked_req leaves it.
            req.extend_end = req.prefix_len + first_chunk
            self._extend(req)
            checkpoint_kv_cache(req, self.cache)  # Scheduler.stash_chunked_request
            req.init_next_round_input()
        req.extend_end = len(req.full_untruncated_fill_ids)
        batch, step_logits = self._extend(req, tamper_prefix=tamper_prefix)
        all_logits = [step_logits]
        while True:
            token = int(step_logits.argmax())
            req.output_ids.append(token)
            req.update_finish_state()
            if req.finished():
                release_kv_cache(req, self.cache, checkpoint=True)
                break
            checkpoint_kv_cache(req, self.cache)
            # The token just sampled sits after the prompt and the earlier outputs.
            position = len(req.origin_input_ids) + len(req.output_ids) - 1
            batch.output_ids = torch.tensor([token])
            batch.prepare_for_decode()  # one decode slot in batch.out_cache_loc
            item = ForwardItem(
                req.kv.req_pool_idx, position, torch.tensor([token]), batch.out_cache_loc
            )
            step_logits = self.model.forward(
                self.kv_pool, self.req_to_token_pool.req_to_token, [item]
            )[0]
            all_logits.append(step_logits)
        self.check_integrity()
        return RunResult(matched_prefix_len, torch.stack(all_logits), list(req.output_ids))

    def _extend(
        self, req: Req, *, tamper_prefix: bool = False
    ) -> tuple[ScheduleBatch, torch.Tensor]:
        """Allocate slots for fill ids [prefix_len, extend_end) and run them through the model."""
        batch = ScheduleBatch.init_new(
            [req], self.req_to_token_pool, self.allocator, self.cache, self.model_config,
            False, SpeculativeAlgorithm.NONE,
        )
        batch.prepare_for_extend()  # also maps [0, prefix_len) to the cached slots
        if tamper_prefix:
            page_table = self.req_to_token_pool.req_to_token
            prefix_slots = page_table[req.kv.req_pool_idx, : req.prefix_len].long()
            self.kv_pool.get_key_buffer(0)[prefix_slots] += 1.0
        new_tokens = torch.tensor(
            req.full_untruncated_fill_ids[req.prefix_len : req.extend_end], dtype=torch.int64
        )
        item = ForwardItem(req.kv.req_pool_idx, req.prefix_len, new_tokens, batch.out_cache_loc)
        logits = self.model.forward(self.kv_pool, self.req_to_token_pool.req_to_token, [item])
        return batch, logits[0]

    def check_integrity(self) -> None:
        """With no request running, every slot is free or cached (evictable): nothing leaked."""
        self.cache.sanity_check()
        free, evictable = self.allocator.available_size(), self.cache.evictable_size()
        assert (free, self.cache.protected_size()) == (POOL_TOKENS - evictable, 0), (
            f"free {free} + evictable {evictable} + protected {self.cache.protected_size()} "
            f"!= {POOL_TOKENS}"
        )


def _random_tokens(seed: int, count: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1000) for _ in range(count)]


SHARED_PREFIX = _random_tokens(seed=0, count=40)  # 10 pages of 4, 40 pages of 1
FIRST_PROMPT = SHARED_PREFIX + [11, 12, 13, 14, 15, 16, 17]
SECOND_PROMPT = SHARED_PREFIX + [21, 22, 23, 24, 25, 26, 27, 28, 29]


def _max_abs_diff(left: torch.Tensor, right: torch.Tensor) -> float:
    assert left.shape == right.shape, f"{tuple(left.shape)} vs {tuple(right.shape)}"
    return float((left - right).abs().max())


@pytest.fixture(scope="module")
def model() -> TinyTransformer:
    return TinyTransformer(TinyModelConfig.from_config_json(FIXTURE_DIR), seed=0)


@pytest.mark.parametrize("page_size", [1, 4])
def test_prefix_hit_logits_equal_no_reuse_logits(model: TinyTransformer, page_size: int) -> None:
    """A request whose 40-token prefix SGLang matched in the tree computes the same prefill and
    greedy-decode logits as the same request on an engine with the cache disabled."""
    engine = Engine(model, page_size=page_size)
    engine.run("first", FIRST_PROMPT)
    with_reuse = engine.run("second", SECOND_PROMPT)
    no_reuse = Engine(model, page_size=page_size, cache_disabled=True).run("second", SECOND_PROMPT)

    assert (with_reuse.prefix_len, no_reuse.prefix_len) == (40, 0)
    assert with_reuse.logits.shape == (4, 1000)  # prefill + 3 decode steps, all compared
    diff = _max_abs_diff(with_reuse.logits, no_reuse.logits)
    assert diff <= EXACT, f"max abs logit diff with reuse vs without: {diff:.3e} > {EXACT:.0e}"


@pytest.mark.parametrize("page_size", [1, 4])
def test_chunked_prefill_logits_equal_single_extend_logits(
    model: TinyTransformer, page_size: int
) -> None:
    """A 49-token prompt prefilled as 20 + 29 tokens, checkpointed into the tree between the two
    extends as SGLang's scheduler does for a chunked request, gives the one-extend logits."""
    chunked = Engine(model, page_size=page_size).run("chunked", SECOND_PROMPT, first_chunk=20)
    whole = Engine(model, page_size=page_size).run("whole", SECOND_PROMPT)

    assert chunked.logits.shape == (4, 1000)
    diff = _max_abs_diff(chunked.logits, whole.logits)
    assert diff <= EXACT, f"max abs logit diff chunked vs one extend: {diff:.3e} > {EXACT:.0e}"


def test_prefix_hit_attends_over_the_pooled_prefix_kv(model: TinyTransformer) -> None:
    """Control: perturbing the cached prefix's K in the pool after the match changes the logits,
    so the equality above comes from K/V read through req_to_token, not from a recompute."""
    engine = Engine(model, page_size=4)
    engine.run("first", FIRST_PROMPT)
    tampered = engine.run("second", SECOND_PROMPT, tamper_prefix=True)
    no_reuse = Engine(model, page_size=4, cache_disabled=True).run("second", SECOND_PROMPT)

    assert tampered.prefix_len == 40
    diff = _max_abs_diff(tampered.logits[0], no_reuse.logits[0])
    assert diff > 1e-2, f"perturbed prefix K moved the prefill logits by only {diff:.3e}"


def test_refuses_a_noop_pool(model: TinyTransformer) -> None:
    """SGLang's NoOpMHATokenToKVPool keeps capacity but no K/V bytes: the model refuses it."""
    engine = Engine(model, page_size=4)
    noop_pool = NoOpMHATokenToKVPool(
        size=POOL_TOKENS, page_size=4, dtype=torch.float32, head_num=2, head_dim=16,
        layer_num=2, device="cpu", enable_memory_saver=False,
    )
    slots = torch.arange(4, 8)
    engine.req_to_token_pool.req_to_token[0, :4] = slots.to(torch.int32)
    item = ForwardItem(0, 0, torch.tensor([1, 2, 3, 4]), slots)

    with pytest.raises(InputError, match="NoOpMHATokenToKVPool holds 4 K rows for 1024 slots"):
        model.forward(noop_pool, engine.req_to_token_pool.req_to_token, [item])


def test_page_table_not_mapping_out_slots_is_an_integrity_error(model: TinyTransformer) -> None:
    """New tokens whose out_slots req_to_token does not map would attend over stale K/V: refused."""
    engine = Engine(model, page_size=4)
    engine.req_to_token_pool.req_to_token[0, :2] = torch.tensor([8, 9], dtype=torch.int32)
    item = ForwardItem(0, 0, torch.tensor([1, 2]), torch.tensor([4, 5]))

    with pytest.raises(IntegrityError, match=r"req_to_token\[0, 0:2\] = \[8, 9\]"):
        model.forward(engine.kv_pool, engine.req_to_token_pool.req_to_token, [item])


def test_page_table_mapping_the_padding_page_is_an_integrity_error(
    model: TinyTransformer,
) -> None:
    """A position mapped to slot 0 (SGLang's reserved padding page, never a request's K/V) is
    refused instead of attended over."""
    engine = Engine(model, page_size=4)
    engine.req_to_token_pool.req_to_token[0, :2] = torch.tensor([0, 5], dtype=torch.int32)
    item = ForwardItem(0, 1, torch.tensor([7]), torch.tensor([5]))

    with pytest.raises(IntegrityError, match=r"outside \[4, 1028\): min 0, max 5"):
        model.forward(engine.kv_pool, engine.req_to_token_pool.req_to_token, [item])


def test_config_reads_the_tiny_llama_fixture() -> None:
    """The HF config.json keys map onto TinyModelConfig (num_key_value_heads -> num_kv_heads)."""
    assert TinyModelConfig.from_config_json(FIXTURE_DIR / "config.json") == TinyModelConfig(
        hidden_size=64, intermediate_size=128, num_attention_heads=4, num_kv_heads=2,
        head_dim=16, num_layers=2, vocab_size=1000, rope_theta=10000.0, rms_norm_eps=1e-5,
    )


def test_config_rejects_a_broken_file(tmp_path: Path) -> None:
    """A config.json that is not JSON is bad input (InputError, exit 2), not a traceback."""
    broken = tmp_path / "config.json"
    broken.write_text("{not json", encoding="utf-8")

    with pytest.raises(InputError, match="cannot read model config"):
        TinyModelConfig.from_config_json(tmp_path)


def test_weights_are_a_function_of_the_seed() -> None:
    """Same seed, bit-identical weights; another seed, different weights."""
    config = TinyModelConfig.from_config_json(FIXTURE_DIR)
    first, again, other = (TinyTransformer(config, seed=s) for s in (0, 0, 1))

    assert torch.equal(first.lm_head, again.lm_head)
    assert torch.equal(first.layers[1].k_proj, again.layers[1].k_proj)
    assert not torch.equal(first.layers[1].k_proj, other.layers[1].k_proj)


def test_two_requests_in_one_forward_equal_each_alone(model: TinyTransformer) -> None:
    """One ScheduleBatch prefilling two requests: the model splits SGLang's out_cache_loc per
    request, and each request's logits equal those of its own single-request run."""
    engine = Engine(model, page_size=4)
    params = SamplingParams(max_new_tokens=1, temperature=0, ignore_eos=True)
    params.normalize(None)
    reqs = [
        Req(rid, "", array("q", prompt), params, vocab_size=1000, eos_token_ids=set())
        for rid, prompt in (("first", FIRST_PROMPT), ("second", SECOND_PROMPT))
    ]
    for req in reqs:
        req.init_next_round_input(engine.cache)
        req.extend_end = len(req.full_untruncated_fill_ids)
        req.lock = engine.cache.lock(req.last_node)
    batch = ScheduleBatch.init_new(
        reqs, engine.req_to_token_pool, engine.allocator, engine.cache, engine.model_config,
        False, SpeculativeAlgorithm.NONE,
    )
    batch.prepare_for_extend()
    # out_cache_loc holds the requests' new slots back to back, in batch order.
    slots_per_req = batch.out_cache_loc.split([req.extend_len for req in reqs])
    items = [
        ForwardItem(
            req.kv.req_pool_idx, req.prefix_len,
            torch.tensor(req.full_untruncated_fill_ids[req.prefix_len : req.extend_end]), slots,
        )
        for req, slots in zip(reqs, slots_per_req)
    ]
    batched = model.forward(engine.kv_pool, engine.req_to_token_pool.req_to_token, items)
    alone = torch.stack([
        Engine(model, page_size=4).run(rid, prompt, max_new_tokens=1).logits[0]
        for rid, prompt in (("first", FIRST_PROMPT), ("second", SECOND_PROMPT))
    ])

    diff = _max_abs_diff(batched, alone)
    assert diff <= EXACT, f"max abs logit diff batched vs alone: {diff:.3e} > {EXACT:.0e}"
