"""The assembled `kvctl size` result (kvctl.sizing.size_report)."""

from __future__ import annotations

import pytest

from kvctl.errors import InputError
from kvctl.sizing.hardware import resolve_gpu
from kvctl.sizing.models import PRESETS
from kvctl.sizing.size_report import SizeRequest, build_size_report, default_contexts
from kvctl.util.units import GB, GIB

pytestmark = pytest.mark.unit

H100 = resolve_gpu("H100-SXM")


def request(**overrides) -> SizeRequest:
    """Seed 003 napkin math 0.1 as a request: 8 x H100, TP=8, 141.2 GB weights, 2.5 GB reserve,
    no headroom (0.1 divides the whole pool)."""
    fields = dict(model=PRESETS["Llama-3.1-70B"], gpu=H100, contexts=(8192, 32768, 131072),
                  gpus=8, tp=8, weights_bytes=141_200_000_000, reserve_bytes=2_500_000_000,
                  headroom=0.0)
    fields.update(overrides)
    return SizeRequest(**fields)


def test_napkin_0_1_end_to_end():
    """Seed 003 0.1 through the report: 327,680 B/token, 526.0 GB pool, 195/48/12."""
    report = build_size_report(request())
    assert (report.bytes_per_token_model, report.bytes_per_token_per_rank) == (327_680, 40_960)
    assert round(report.pool_bytes_node / GB, 1) == 526.0
    assert [row.max_trajectories for row in report.contexts] == [195, 48, 12]
    assert [row.trajectory_bytes_model for row in report.contexts] == [
        2_684_354_560, 10_737_418_240, 42_949_672_960]


def test_pool_pages_and_page_footprint():
    """Per GPU: 65,749,345,920 B pool // 40,960 B = 1,605,208 tokens = 100,325 pages of 640 KiB."""
    report = build_size_report(request())
    assert report.budget.pool_bytes == 65_749_345_920
    assert report.pool_tokens_per_rank == 1_605_200
    assert report.pool_pages_per_rank == 100_325
    assert report.page_bytes_per_rank == 655_360


def test_data_parallel_replicas_multiply_concurrency():
    """16 GPUs at TP=8 hold two replicas: twice the trajectories."""
    report = build_size_report(request(gpus=16))
    assert report.replicas == 2
    assert [row.max_trajectories for row in report.contexts] == [390, 96, 24]


def test_gpus_must_be_a_multiple_of_tp_times_pp():
    """12 GPUs cannot hold TP=8 replicas."""
    with pytest.raises(InputError, match="not a multiple of TP\\*PP = 8"):
        build_size_report(request(gpus=12))


def test_batch_tail_share():
    """--batch 256 at page 16: 256 x 7.5 x 40 KiB = 75 MiB over the 61.23 GiB pool."""
    report = build_size_report(request(batch=256))
    assert report.batch_tail.total_bytes == 75 * 2**20
    assert report.batch_tail.share_of_pool == 75 * 2**20 / 65_749_345_920


def test_static_vs_paged_rows_for_contexts_above_the_mean():
    """--mean-length 2,048: each context is a worst-case reservation; paging fits
    floor(65,749,345,920 / (2,055.5 x 40,960)) = 780 sequences of mean length."""
    report = build_size_report(request(mean_length=2048))
    rows = [row.static_vs_paged for row in report.contexts]
    assert [r.static_trajectories for r in rows] == [195, 48, 12]
    assert [r.static_efficiency for r in rows] == [0.25, 0.0625, 0.015625]
    assert {r.paged_trajectories for r in rows} == {780}


def test_counted_weights_when_not_given():
    """Without --weights-gb the weights are params x bf16 / TP: 70,553,706,496 x 2 / 8."""
    report = build_size_report(request(weights_bytes=None))
    assert report.budget.weights_bytes == 17_638_426_624


def test_mem_fraction_switches_to_sglang_rule():
    """--mem-fraction uses SGLang's rule: rest = (HBM - weights) - HBM x (1 - f)."""
    report = build_size_report(request(mem_fraction_static=0.9))
    assert report.budget.rule == "mem_fraction_static"
    expected = (80 * GIB - 17_650_000_000) / (1 << 30) - 80 * (1 - 0.9)
    assert report.budget.pool_bytes == int(expected * (1 << 30))


def test_sliding_window_model_reports_capped_and_uncapped():
    """Mistral-7B at 32,768 tokens: window-capped 4,096 rows per layer vs all 32,768."""
    report = build_size_report(request(model=PRESETS["Mistral-7B"], contexts=(32768,), gpus=1, tp=1,
                                       weights_bytes=None))
    row = report.contexts[0]
    assert row.trajectory_bytes_per_rank == 4_096 * 131_072
    assert row.trajectory_bytes_uncapped_per_rank == 32_768 * 131_072
    assert report.budget.pool_bytes == 68_915_881_728
    assert (row.max_trajectories, row.max_trajectories_uncapped) == (128, 16)
    assert any("slide over a 4,096-token window" in note for note in report.notes)


def test_mla_note_and_replicated_row():
    """DeepSeek-V3 at TP=8: the 70,272 B latent row is stored whole on every rank."""
    report = build_size_report(request(model=PRESETS["DeepSeek-V3"], gpu=resolve_gpu("H200"),
                                       weights_bytes=None, contexts=(32768,)))
    assert report.bytes_per_token_per_rank == report.bytes_per_token_model == 70_272
    assert report.weight_dtype == "fp8"
    assert any(note.startswith("MLA caches one latent row") for note in report.notes)


def test_context_beyond_window_is_an_input_error():
    """Llama-3-70B's window is 8,192 tokens."""
    with pytest.raises(InputError, match="exceeds Llama-3-70B's window"):
        build_size_report(request(model=PRESETS["Llama-3-70B"]))


def test_default_contexts_fit_the_window():
    """Defaults 8K/32K/128K are trimmed to the window; a short window defaults to itself."""
    assert default_contexts(PRESETS["Qwen3-8B"]) == (8192, 32768)
    assert default_contexts(PRESETS["Llama-2-7B"]) == (4096,)


def test_weights_that_do_not_fit_are_a_verdict_with_the_smallest_split():
    """Llama-3.1-405B in bf16 (811,706,777,600 B) on one 80 GiB H100 leaves no pool; the
    report still carries the 516,096 B row and names the smallest split: TP 16 alone
    (50.73 GB weights + 2.5 GB per GPU) or TP 1 x PP 11 (11 GPUs: 73.79 GB of weights leave
    9.6 GB, one 131,072-token trajectory of 12 layers x 4,096 B = 6.44 GB; at PP 10 the
    2.2 GB left cannot hold 13 layers' 6.98 GB)."""
    report = build_size_report(
        request(model=PRESETS["Llama-3.1-405B"], gpus=1, tp=1, weights_bytes=None)
    )
    assert not report.fits and report.budget is None
    assert "leave no KV pool" in report.verdict
    assert report.bytes_per_token_per_rank == 516_096
    assert (report.smallest_fit.tp, report.smallest_fit.pp, report.smallest_fit.gpus) == (1, 11, 11)
    assert (report.smallest_fit_tp_only.tp, report.smallest_fit_tp_only.pp) == (16, 1)
    assert [row.max_trajectories for row in report.contexts] == [0, 0, 0]
