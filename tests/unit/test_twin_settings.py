"""The twin's pure parts: the server's settings as replay options, its rejection rule, and
trace block ids as prompts in the server's vocabulary."""

from __future__ import annotations

import numpy as np
import pytest

from kvctl.twin import settings_map
from kvctl.twin.prompts import BlockVocabulary
from kvctl.twin.server_probe import ServerProfile

pytestmark = pytest.mark.unit

INFO = {"page_size": 16, "max_total_num_tokens": 65_536, "radix_eviction_policy": "lru",
        "max_running_requests": 8, "chunked_prefill_size": 2048, "max_prefill_tokens": 16_384,
        "schedule_policy": "fcfs", "context_length": 8192, "max_req_input_len": 8186}
TODAY = frozenset({"page_size", "pool_tokens", "eviction_policy", "max_running_requests",
                   "token_budget", "tau_high"})
WITH_SGLANG_SCHEDULING = TODAY | {"chunked_prefill_size", "max_prefill_tokens",
                                  "schedule_policy"}


def test_settings_map_to_todays_replay_options(monkeypatch):
    """Without SGLang's scheduling options the chunk becomes kvctl's token budget, tau_high
    is not passed (SGLang has no such ceiling; the replay's is off unless asked for), and the prefill cap and schedule policy are reported as unmapped."""
    monkeypatch.setattr(settings_map, "_FIELDS", TODAY)
    assert settings_map.server_settings_to_replay_options(INFO) == {
        "page_size": 16, "pool_tokens": 65_536, "eviction_policy": "lru",
        "max_running_requests": 8, "token_budget": 2048}
    assert settings_map.unmapped_settings(INFO) == {"max_prefill_tokens": 16_384,
                                                    "schedule_policy": "fcfs"}


def test_settings_pass_through_by_name_once_the_replay_has_them(monkeypatch):
    """With fields named like the server's flags, they are passed as they are and nothing
    is unmapped."""
    monkeypatch.setattr(settings_map, "_FIELDS", WITH_SGLANG_SCHEDULING)
    assert settings_map.server_settings_to_replay_options(INFO) == {
        "page_size": 16, "pool_tokens": 65_536, "eviction_policy": "lru",
        "max_running_requests": 8, "chunked_prefill_size": 2048, "max_prefill_tokens": 16_384,
        "schedule_policy": "fcfs"}
    assert settings_map.unmapped_settings(INFO) == {}


def test_unset_server_settings_are_not_passed(monkeypatch):
    """None, and -1 (chunked prefill off), leave the replay's own default in place."""
    monkeypatch.setattr(settings_map, "_FIELDS", TODAY)
    info = {"page_size": 4, "max_running_requests": None, "chunked_prefill_size": -1}
    assert settings_map.server_settings_to_replay_options(info) == {"page_size": 4}


def test_the_server_settings_carry_no_cost_model(monkeypatch):
    """The clock is chosen apart (kvctl/twin/clock.py) and passed to `predict`: the options
    taken from /server_info never name one, even though the replay has the field."""
    monkeypatch.setattr(settings_map, "_FIELDS", TODAY | {"cost_model"})
    options = settings_map.server_settings_to_replay_options({"page_size": 16})
    assert options == {"page_size": 16}


@pytest.mark.parametrize("input_length, output_length, expected", [
    (8000, 192, None),
    (8000, 193, "input + output 8193 > context length 8192"),
    (8192, 1, "input 8192 >= context length 8192"),
    (8186, 1, "input 8186 >= max_req_input_len 8186"),
])
def test_the_server_rejection_rule(input_length, output_length, expected):
    """SGLang's tokenizer-manager and scheduler limits, from the server's own numbers."""
    profile = ServerProfile(url="http://h:1", info=INFO, vocab_size=512, vocab_source="test")
    assert profile.rejects(input_length, output_length) == expected


def test_equal_block_ids_give_equal_prompt_blocks_inside_the_vocabulary():
    """Blocks of 4 over a 9-token vocabulary: ids 7 and 7 give the same 4 tokens, the prompt
    is cut at its length, every id is in [1, 9), and the mapping is the same every time."""
    vocabulary = BlockVocabulary(9, 4, seed=3)
    first = vocabulary.prompt([7, 2, 7], 10)
    assert len(first) == 10
    assert first[:4] == vocabulary.prompt([7], 4) and first[8:] == vocabulary.prompt([7], 2)
    assert all(1 <= token < 9 for token in first)
    assert BlockVocabulary(9, 4, seed=3).prompt([7, 2, 7], 10) == first


def test_different_blocks_and_seeds_give_different_tokens():
    """Two ids (or two seeds) over a 512-token vocabulary give different 64-token blocks."""
    vocabulary = BlockVocabulary(512, 64)
    assert not np.array_equal(vocabulary.block(0), vocabulary.block(1))
    assert not np.array_equal(vocabulary.block(0), BlockVocabulary(512, 64, seed=1).block(0))


def test_a_server_without_the_flag_gives_its_schedulers_resolved_max_running(monkeypatch):
    """A stock server (no --max-running-requests) reports None at the top level and its
    scheduler's resolution in internal_states (/server_info of the real CPU server, pool
    20,000, context 4,096: effective_max_running_requests_per_dp 2,500): the replay takes
    the resolution, not kvctl's own default."""
    monkeypatch.setattr(settings_map, "_FIELDS", TODAY)
    info = {"page_size": 4, "max_running_requests": None,
            "internal_states": [{"max_running_requests": None,
                                 "effective_max_running_requests_per_dp": 2500}]}
    assert settings_map.server_settings_to_replay_options(info) == {
        "page_size": 4, "max_running_requests": 2500}
    flagged = {**info, "max_running_requests": 8}  # the flag, when given, is what runs
    assert settings_map.server_settings_to_replay_options(flagged)["max_running_requests"] == 8
