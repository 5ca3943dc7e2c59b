"""From CLI choices and a workload to a validated EngineConfig, before any engine exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvctl.errors import InputError
from kvctl.replay.engine_setup import Deployment
from kvctl.replay.runner import ReplaySettings, prepare
from kvctl.replay.workloads import open_workload

pytestmark = pytest.mark.unit

HEAD_500 = str(Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake" / "head_500.jsonl")


def settings(**changes) -> ReplaySettings:
    return ReplaySettings(workload=HEAD_500, limit=10, **changes)


def test_default_pool_is_what_kvctl_size_gives_the_default_deployment():
    """Llama-3-8B on one H100-SXM: (80 GiB - 8,030,261,248 x 2 B - 4.5 GB reserve) // 131,072 B
    = 498,480 tokens (page 16), the `kvctl size` pool_tokens_per_rank."""
    prepared = prepare(settings())
    assert prepared.config.pool_tokens == 498_480
    assert prepared.resolved["pool_source"] == "kvctl size: Llama-3-8B on H100-SXM x TP1"
    assert prepared.config.cost.model_name == "Llama-3-8B"


def test_unbounded_pool_is_the_workloads_page_rounded_demand():
    """The first 10 lines need 117,376 tokens; with up to 15 tail slots each, page 16: 117,520."""
    prepared = prepare(settings(pool_tokens=0))
    assert prepared.config.pool_tokens == 117_520
    assert prepared.resolved["pool_source"].startswith("unbounded")


def test_pool_gb_converts_with_the_models_bytes_per_token():
    """10 GB / 131,072 B per token = 76,293 tokens, rounded up to 4,769 pages of 16 = 76,304."""
    assert prepare(settings(pool_gb=10.0)).config.pool_tokens == 76_304


def test_pool_smaller_than_the_largest_request_is_noted_not_refused():
    """20,000 tokens cannot hold line 8's 27,346-token request: the replay is prepared
    anyway (SGLang refuses that request at its door, the others run), with a note."""
    prepared = prepare(settings(pool_tokens=20_000))
    assert prepared.config.pool_tokens == 20_000
    assert ("the pool (20,000 tokens) is smaller than the largest request (27,346 tokens): "
            "requests SGLang would refuse are refused and listed under `rejected`") in prepared.notes


def test_scheduler_flags_reach_the_engine_config():
    """--schedule-policy, --chunked-prefill-size and --max-prefill-tokens become the
    EngineConfig fields SGLang's classes read; defaults are SGLang's (fcfs, 16,384) and
    kvctl's mechanisms are off."""
    default = prepare(settings())
    assert (default.config.schedule_policy, default.config.max_prefill_tokens,
            default.config.tau_high) == ("fcfs", 16_384, None)
    assert default.resolved["kvctl_mechanisms"] == []
    given = prepare(settings(schedule_policy="lpm", token_budget=2_048, max_prefill_tokens=4_096,
                             tau_high=0.9))
    assert (given.config.schedule_policy, given.config.token_budget,
            given.config.max_prefill_tokens) == ("lpm", 2_048, 4_096)
    assert given.resolved["chunked_prefill_size"] == 2_048
    assert given.resolved["kvctl_mechanisms"] == ["tau_high admission ceiling 0.9"]


def test_unknown_schedule_policy_lists_sglangs_choices():
    """A policy SGLang's --schedule-policy does not list is refused before any engine."""
    with pytest.raises(InputError, match=r"unknown schedule policy 'sjf'; valid: lpm, random, "
                                         r"fcfs, dfs-weight, lof, priority, routing-key, hrrn, "
                                         r"shortest-prefill-first"):
        prepare(settings(schedule_policy="sjf"))


def test_schedule_policy_choices_are_sglangs():
    """The replay offers exactly the choices of SGLang's own --schedule-policy field."""
    import typing

    from sglang.srt.arg_groups.fields.schedule import Schedule

    from engine_adapter.embedded.config import SCHEDULE_POLICIES

    hint = typing.get_type_hints(Schedule, include_extras=True)["schedule_policy"]
    arg = next(m for m in hint.__metadata__ if hasattr(m, "choices"))
    assert tuple(arg.choices) == SCHEDULE_POLICIES


def test_pool_under_two_pages_names_the_pool_given():
    """--pool-tokens 5 at page 16: the message quotes 5 (not the 16 it rounds up to) and
    the two-page minimum, 32."""
    with pytest.raises(InputError, match=r"a pool of 5 tokens is smaller than two pages of 16 "
                                         r"\(32 tokens\); give a larger --pool-tokens"):
        prepare(settings(pool_tokens=5))


def test_decode_quantum_above_one_is_refused_as_retired():
    """--decode-quantum 16 (the retired third decode path) is refused in one line that says
    why; 1, the only decode left, is accepted."""
    with pytest.raises(InputError, match=r"^--decode-quantum was retired: decode jumps make "
                                         r"SGLang's per-token decode as fast \("):
        prepare(settings(decode_quantum=16))
    assert prepare(settings(decode_quantum=1)).config.decode_quantum == 1


def test_engine_context_grows_to_the_traces_longest_request():
    """The first 200 lines hold a 121,213-token request: max_context_len 121,216 (page 16)."""
    prepared = prepare(ReplaySettings(workload=HEAD_500, limit=200, pool_tokens=0))
    assert prepared.config.max_context_len == 121_216


def test_unknown_eviction_policy_lists_the_valid_ones():
    """SGLang's eight policies are named in the error."""
    with pytest.raises(InputError, match="unknown eviction policy 'lrux'; valid: lru, lfu, fifo, mru, "
                                         "filo, priority, slru, tlru"):
        prepare(settings(eviction_policy="lrux"))


def test_unknown_retention_lists_the_valid_ones():
    """retain, drop, offload, auto."""
    with pytest.raises(InputError, match="unknown retention 'keep'; valid: retain, drop, offload, auto"):
        prepare(settings(retention="keep"))


def test_retention_on_a_mooncake_trace_is_noted_as_without_effect():
    """A trace has no sessions, so --retention changes nothing; the report says so."""
    prepared = prepare(settings(retention="offload"))
    assert prepared.config.default_retention == "offload"
    assert any("no effect on a Mooncake trace" in note for note in prepared.notes)


def test_unknown_model_is_an_input_error():
    """The deployment is resolved before running."""
    with pytest.raises(InputError):
        prepare(settings(deployment=Deployment(model="No-Such-Model-9B")))


def test_unknown_workload_suffix_names_the_accepted_ones(tmp_path):
    """A .csv is neither a trace nor a scenario."""
    path = tmp_path / "w.csv"
    path.write_text("x")
    with pytest.raises(InputError, match=r"unknown workload type '\.csv'; expected a Mooncake trace "
                                         r"\(\.jsonl\) or a scenario \(\.yaml, \.yml\)"):
        open_workload(path)


def test_missing_workload_file_is_an_input_error(tmp_path):
    """No such file: exit-2 error naming the path."""
    with pytest.raises(InputError, match="no such file"):
        open_workload(tmp_path / "absent.jsonl")


class SuggestingWorkload:
    """A workload that suggests engine fields, as a scenario's `engine:` block does."""

    name = "suggesting"
    engine_defaults = {"pool_tokens": 131_072, "page_size": 32, "tau_high": 0.88,
                       "max_context_len": 65_536}

    def total_hint(self):
        return None


def test_scenario_engine_fields_apply_when_the_cli_is_silent():
    """pool 131,072, page 32, tau_high 0.88 and context 65,536 come from the workload."""
    from kvctl.replay.runner import resolve_config

    config, resolved, _ = resolve_config(ReplaySettings(workload="s.yaml"), SuggestingWorkload())
    assert (config.pool_tokens, config.page_size, config.tau_high, config.max_context_len) == (
        131_072, 32, 0.88, 65_536)
    assert resolved["pool_source"] == "scenario engine.pool_tokens"


def test_cli_options_override_the_scenarios_suggestions():
    """--page-size 16 --tau-high 0.9 --pool-tokens 65536 win over the workload's fields."""
    from kvctl.replay.runner import resolve_config

    config, resolved, _ = resolve_config(
        ReplaySettings(workload="s.yaml", page_size=16, tau_high=0.9, pool_tokens=65_536),
        SuggestingWorkload())
    assert (config.pool_tokens, config.page_size, config.tau_high) == (65_536, 16, 0.9)
    assert resolved["pool_source"] == "--pool-tokens"


def test_hicache_write_policies_and_default_are_sglangs():
    """--hicache-write-policy offers exactly SGLang's choices, with SGLang's default."""
    import typing

    from sglang.srt.arg_groups.fields.memory import Memory

    from engine_adapter.embedded.config import HICACHE_DEFAULT_WRITE_POLICY, HICACHE_WRITE_POLICIES

    hint = typing.get_type_hints(Memory, include_extras=True)["hicache_write_policy"]
    arg = next(m for m in hint.__metadata__ if hasattr(m, "choices"))
    assert tuple(arg.choices) == HICACHE_WRITE_POLICIES
    import msgspec

    default = next(f.default for f in msgspec.structs.fields(Memory)
                   if f.name == "hicache_write_policy")
    assert default == HICACHE_DEFAULT_WRITE_POLICY


def test_hicache_turns_on_the_mha_pool_and_off_decode_jumps():
    """--hicache-ratio 2: SGLang's host tier needs K/V bytes (mha pool) and an ack poll every
    step (no decode jumps); the header's hicache settings say it is SGLang's."""
    prepared = prepare(settings(hicache_ratio=2.0))
    config = prepared.config
    assert (config.hicache_ratio, config.kv_pool, config.decode_jumps) == (2.0, "mha", False)
    assert prepared.resolved["hicache"] == {
        "source": "sglang_hicache", "ratio": 2.0, "size_gb": None, "write_policy": "write_through",
        "io_backend": "direct", "mem_layout": "layer_first"}


def test_hicache_on_a_gpu_device_is_refused():
    """The embedded engine's HiCache uses the CPU stack strategy only: --device cuda is refused."""
    with pytest.raises(InputError, match=r"runs on the CPU device only \(got --device cuda\)"):
        prepare(settings(hicache_ratio=2.0, device="cuda"))
