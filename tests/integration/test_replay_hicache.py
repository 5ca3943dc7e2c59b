"""`kvctl replay --hicache-ratio/--hicache-size/--hicache-write-policy` through Typer's CliRunner.

The trace (written per test): eight distinct 2,048-token prompts (four Mooncake blocks each),
then the same eight again, 2 s apart, on a 4,096-token pool. The device holds two prompts, so
the second round finds nothing on device; a host pool of ratio 4 (16,400 slots) holds all
eight (16,384 tokens), and each second-round prompt loads 2,032 tokens back (2,047 matchable
tokens floored to pages of 16).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.integration

PROMPTS, LOADED = 8, 2_032


def twice_trace(tmp_path: Path) -> str:
    rows, at = [], 0
    for _ in range(2):
        for i in range(PROMPTS):
            rows.append({"timestamp": at, "input_length": 2048, "output_length": 4,
                         "hash_ids": [100 * i + k for k in range(4)]})
            at += 2000
    path = tmp_path / "twice.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def replay(tmp_path: Path, *args: str):
    return CliRunner().invoke(app, ["replay", twice_trace(tmp_path), "--pool-tokens", "4096",
                                    *args])


def test_hicache_report_gives_sglang_per_tier_figures(tmp_path):
    """--hicache-ratio 4 --json: 8 x 2,032 host hits, all loaded back (SGLang's acks), every
    prompt written to host, the host pool's capacity and use; kvctl's hit count agrees."""
    result = replay(tmp_path, "--hicache-ratio", "4", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    h = doc["hicache"]
    assert (h["device_hit_tokens"], h["host_hit_tokens"], h["load_back_tokens"]) == (
        0, PROMPTS * LOADED, PROMPTS * LOADED)
    assert (h["written_to_host_tokens"], h["host_capacity_tokens"], h["host_used_tokens"]) == (
        16_384, 16_400, 16_384)
    assert (h["host_residual_tokens"], h["pending_loads"], h["pending_writes"]) == (0, 0, 0)
    assert doc["hit_tokens"] == PROMPTS * LOADED and doc["integrity_ok"] is True
    assert doc["settings"]["hicache"]["write_policy"] == "write_through"
    assert doc["settings"]["kv_pool"] == "mha"


def test_without_hicache_no_host_block_and_fewer_hits(tmp_path):
    """No --hicache-*: no `hicache` key anywhere (not zeros), and the second round misses."""
    result = replay(tmp_path, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert "hicache" not in doc and "hicache" not in doc["settings"]
    assert doc["hit_tokens"] == 0


def test_write_back_policy_is_sglangs(tmp_path):
    """--hicache-write-policy write_back: backups happen at device eviction; same load-backs."""
    result = replay(tmp_path, "--hicache-ratio", "4", "--hicache-write-policy", "write_back",
                    "--json")
    assert result.exit_code == 0, result.output
    h = json.loads(result.stdout)["hicache"]
    assert (h["write_policy"], h["host_hit_tokens"], h["load_back_tokens"]) == (
        "write_back", PROMPTS * LOADED, PROMPTS * LOADED)


def test_hicache_size_is_converted_with_the_modeled_bytes_per_token(tmp_path):
    """--hicache-size 2 (GB) for Llama-3-8B (131,072 B/token): 2e9 // 131,072 = 15,258
    tokens; SGLang's host pool keeps 15,258 // 16 + 1 = 954 pages of 16: 15,264 slots."""
    result = replay(tmp_path, "--hicache-size", "2", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["hicache"]["host_capacity_tokens"] == 15_264
    assert doc["settings"]["hicache"]["size_gb"] == 2


def test_text_report_names_the_host_tier(tmp_path):
    """The human report has SGLang's host-tier rows, and labels the offload row kvctl's model."""
    result = replay(tmp_path, "--hicache-ratio", "4")
    assert result.exit_code == 0, result.output
    assert "HiCache host pool (SGLang)" in result.stdout
    assert "16,256 / 16,384 tokens" in result.stdout  # loaded back / written to host
    assert "0 / 16,256" in result.stdout  # device / host hit tokens
    assert "kvctl's host-tier model" in result.stdout


@pytest.mark.parametrize(("args", "message"), [
    (("--hicache-ratio", "0"), "--hicache-ratio must be a positive number, got 0.0"),
    (("--hicache-size", "100000000"), "SGLang refuses a HiCache host pool of 762,939,453,125 tokens"),
    (("--hicache-write-policy", "write_back"), "--hicache-write-policy needs --hicache-ratio"),
    (("--hicache-ratio", "2", "--hicache-write-policy", "lazy"), "unknown policy 'lazy'"),
    (("--hicache-ratio", "2", "--retention", "offload"), "cannot be combined: pick one host tier"),
    (("--hicache-ratio", "2", "--against", "http://127.0.0.1:9"), "--against does not take them"),
])
def test_bad_hicache_flags_are_one_line_input_errors(tmp_path, args, message):
    """Each bad flag: exit 2, one line on stderr naming it, nothing on stdout."""
    result = replay(tmp_path, *args, "--json")
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr


def test_sweep_asks_what_hicache_buys(tmp_path):
    """--sweep hicache-ratio=off,4: the run without a host tier hits nothing, the ratio-4 run
    loads the second round back (16,256 of 32,768 prompt tokens); only it has a hicache block."""
    result = replay(tmp_path, "--sweep", "hicache-ratio=off,4", "--json")
    assert result.exit_code == 0, result.output
    runs = {run["settings"]["label"]: run for run in json.loads(result.stdout)["runs"]}
    assert runs["hicache-ratio=off"]["hit_tokens"] == 0 and "hicache" not in runs["hicache-ratio=off"]
    assert runs["hicache-ratio=4"]["hicache"]["load_back_tokens"] == PROMPTS * LOADED
    assert runs["hicache-ratio=4"]["hit_tokens"] == PROMPTS * LOADED
