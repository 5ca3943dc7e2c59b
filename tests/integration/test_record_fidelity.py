"""Round trip: record traffic the embedded engine serves from the shipped Mooncake trace,
replay the recording, and get the source's hit rate back.

How the traffic is recorded: the first LIMIT requests of examples/traces/mooncake/head_500.jsonl
run through `kvctl replay`'s own runner (prepare/run, --pool-tokens 0) on the embedded engine,
and this test wraps the engine's arrival point (`EmbeddedEngine._arrivals`, where each real
SGLang `Req` is built and queued) and its finish point (`Retention.finish`, where a finished
`Req` releases its K/V) to call `RecordingTap.on_request_arrival(req)` and
`on_request_finish(req)`, the way the kvctl plugin's hooks call them inside a real
scheduler. Arrival times come from the engine's virtual clock. The tap is then served over
real HTTP (records_http.py stands in for the plugin's endpoint) and read by `kvctl record`.

What must hold: the recording replayed unbounded (`kvctl replay rec.jsonl --pool-tokens 0`)
gives the source replay's hit rate to within page alignment (each request within one
16-token page), the same per-request input and output lengths in the same order, and
`kvctl plan recommend --validate-with-replay rec.jsonl` accepts it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from records_http import RecordsEndpoint, sglang_info
from typer.testing import CliRunner

from engine_adapter.recording.tap import RecordingTap
from kvctl.cli.app import app
from kvctl.replay.mooncake import iter_records

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "traces"
TRACE = EXAMPLES / "mooncake" / "head_500.jsonl"
SHIPPED = EXAMPLES / "recorded" / "head_500.recorded.jsonl"  # docs/record.md's example
LIMIT = 500
PAGE = 16
runner = CliRunner()


class EngineClock:
    """The tap's clock: the virtual clock of whichever engine the wrapper last saw."""

    engine = None

    def __call__(self) -> float:
        return self.engine.clock_s


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory, sglang_ready):
    """(source replay report, recording path, the recording's replay report, the hit tokens
    of each request in both replays: {rid: (source, recording)})."""
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.embedded.retention import Retention
    from kvctl.replay.runner import ReplaySettings, prepare, run

    clock = EngineClock()
    tap = RecordingTap(block_tokens=512, clock=clock)
    arrivals, finish = EmbeddedEngine._arrivals, Retention.finish
    hits: dict[str, list[int]] = {}  # rid ("mc-<line>", the same in both traces) -> hits

    def counted_finish(retention, tracked, *, released=False):
        finish(retention, tracked, released=released)
        hits.setdefault(tracked.spec.rid, []).append(tracked.hit_tokens)

    def tapped_arrivals(engine):
        clock.engine = engine
        known = len(engine.internal_state().by_rid)
        arrivals(engine)
        for tracked in list(engine.internal_state().by_rid.values())[known:]:  # the Reqs just built
            tap.on_request_arrival(tracked.req)

    def tapped_finish(retention, tracked, *, released=False):
        counted_finish(retention, tracked, released=released)
        tap.on_request_finish(tracked.req)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(EmbeddedEngine, "_arrivals", tapped_arrivals)
        patch.setattr(Retention, "finish", tapped_finish)
        source = run(prepare(ReplaySettings(workload=str(TRACE), pool_tokens=0, limit=LIMIT)))
    out = tmp_path_factory.mktemp("rec") / "rec.jsonl"
    with RecordsEndpoint(tap, info=lambda e: sglang_info(e.url, page_size=PAGE)) as endpoint:
        recorded = runner.invoke(app, ["record", "--url", endpoint.url, "--out", str(out),
                                       "--max-requests", str(LIMIT), "--json"])
    assert recorded.exit_code == 0, recorded.output
    with pytest.MonkeyPatch.context() as patch:  # the recording's replay runs in-process
        patch.setattr(Retention, "finish", counted_finish)
        replayed = runner.invoke(app, ["replay", str(out), "--pool-tokens", "0", "--json"])
    assert replayed.exit_code == 0, replayed.output
    per_request = {rid: tuple(pair) for rid, pair in hits.items()}
    return source.report.to_dict(), out, json.loads(replayed.stdout), per_request


def test_recording_replays_to_the_source_hit_rate(round_trip):
    """Every request's hit tokens in the recording's replay are its hit tokens in the source
    replay to within one 16-token page, and the prompt tokens are identical."""
    source, _out, replay, per_request = round_trip
    assert replay["requests"] == source["requests"] == LIMIT
    assert replay["prompt_tokens"] == source["prompt_tokens"]
    assert len(per_request) == LIMIT and all(len(p) == 2 for p in per_request.values())
    off = {rid: pair for rid, pair in per_request.items() if abs(pair[0] - pair[1]) > PAGE}
    assert off == {}
    assert sum(p[0] for p in per_request.values()) == source["hit_tokens"]
    assert sum(p[1] for p in per_request.values()) == replay["hit_tokens"]
    moved = sum(1 for a, b in per_request.values() if a != b)
    print(f"\nround trip over {LIMIT} requests: source hit rate {source['hit_rate']:.4%} "
          f"({source['hit_tokens']:,} tokens), recording {replay['hit_rate']:.4%} "
          f"({replay['hit_tokens']:,}); {moved} requests differ, by at most "
          f"{max((abs(a - b) for a, b in per_request.values()), default=0)} tokens")


def test_per_request_lengths_survive_in_order(round_trip):
    """Line i of the recording has line i's input and output lengths of the source trace."""
    _source, out, _replay, _hits = round_trip
    source = [(r.input_length, r.output_length) for r in iter_records(TRACE, limit=LIMIT)]
    recorded = [(r.input_length, r.output_length) for r in iter_records(out)]
    assert recorded == source


def test_recording_shares_blocks_exactly_where_the_source_does(round_trip):
    """Dense ids remapped first-seen: two lines share a hash id in the recording exactly
    where they share one in the source (the same equality of blocks, renamed)."""
    _source, out, _replay, _hits = round_trip
    source = [r.hash_ids for r in iter_records(TRACE, limit=LIMIT)]
    recorded = [r.hash_ids for r in iter_records(out)]
    rename: dict[int, int] = {}
    for src, rec in zip(source, recorded, strict=True):
        assert len(src) == len(rec)
        for a, b in zip(src, rec):
            assert rename.setdefault(a, b) == b
    assert len(set(rename.values())) == len(rename)  # one-to-one


def test_plan_recommend_validates_with_the_recording(round_trip):
    """`kvctl plan recommend --validate-with-replay rec.jsonl` replays it beside the plan."""
    _source, out, _replay, _hits = round_trip
    result = runner.invoke(app, ["plan", "recommend", "--model", "Llama-3-8B", "--gpu", "H100-SXM",
                                 "--context", "7000", "--output", "300",
                                 "--validate-with-replay", str(out), "--limit", "40", "--json"])
    assert result.exit_code == 0, result.output
    validation = json.loads(result.stdout)["validation"]
    assert validation["report"]["requests"] == 40
    assert validation["report"]["workload"]["kind"] == "mooncake"


def test_the_shipped_example_recording_is_this_recording(round_trip):
    """examples/traces/recorded/head_500.recorded.jsonl, used in docs/record.md, is exactly
    what this path records (salted digests differ per run; the dense ids and the virtual
    clock's timestamps do not)."""
    _source, out, _replay, _hits = round_trip
    assert out.read_text() == SHIPPED.read_text()
