"""Recording core: chained salted block hashes, the bounded recorder, the Mooncake writer."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from engine_adapter.recording.block_hasher import BlockHasher
from engine_adapter.recording.recorder import TrafficRecorder
from kvctl.errors import InputError, RuntimeFailure
from kvctl.record.writer import check_destination, meta_path, mooncake_rows, write_recording
from kvctl.replay.mooncake import iter_records


def test_blocks_chain_so_equal_ids_mean_equal_prefixes():
    hasher = BlockHasher(block_tokens=4, salt=b"k")
    a = hasher.hash_prompt([1, 2, 3, 4, 5, 6, 7, 8, 9])
    b = hasher.hash_prompt([1, 2, 3, 4, 5, 6, 7, 8, 10])  # differs in the partial last block
    c = hasher.hash_prompt([0, 2, 3, 4, 5, 6, 7, 8])  # differs in the first block only
    assert len(a) == 3 == hasher.blocks(9)  # ceil(9 / 4): the last block partial
    assert a[:2] == b[:2] and a[2] != b[2]
    assert c[1] != a[1]  # block 1's tokens are equal, but its prefix is not


def test_salt_makes_ids_incomparable_across_recordings():
    tokens = list(range(1, 1025))
    assert BlockHasher(salt=b"one").hash_prompt(tokens) != BlockHasher(salt=b"two").hash_prompt(tokens)
    assert BlockHasher().hash_prompt(tokens) != BlockHasher().hash_prompt(tokens)  # random salt


def test_hashes_accept_numpy_and_lists_alike():
    hasher = BlockHasher(block_tokens=512, salt=b"s")
    tokens = np.arange(1, 1300, dtype=np.int32)
    assert hasher.hash_prompt(tokens) == hasher.hash_prompt(tokens.tolist())


@pytest.mark.parametrize("bad", [0, -512, 1.5, True])
def test_block_size_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError):
        BlockHasher(block_tokens=bad)


def test_recorder_completes_on_finish_and_drops_nothing_it_has_room_for():
    recorder = TrafficRecorder(BlockHasher(block_tokens=4, salt=b"k"))
    recorder.on_arrival("a", [1, 2, 3, 4, 5], arrival_s=10.0)
    recorder.on_arrival("b", [1, 2, 3, 4, 6], arrival_s=10.5)
    assert recorder.read().records == ()  # nothing finished yet
    recorder.on_finish("b", 7)
    recorder.on_finish("a", 3)
    recorder.on_finish("never-arrived", 9)
    batch = recorder.read()
    assert [(r.seq, r.input_length, r.output_length) for r in batch.records] == [(1, 5, 7), (2, 5, 3)]
    assert batch.dropped == 0 and batch.in_flight == 0 and batch.block_tokens == 4
    assert recorder.read(ack=1).records[0].seq == 2  # acked records are released
    assert recorder.read(ack=2).records == ()


def test_a_slow_reader_loses_records_counted_never_waited_on():
    """Bounds: 3 in flight (the oldest forgotten first), 2 unread records; every loss counted."""
    recorder = TrafficRecorder(BlockHasher(block_tokens=4, salt=b"k"), capacity=2, max_pending=3)
    for i in range(5):
        recorder.on_arrival(f"r{i}", [i + 1] * 6, arrival_s=float(i))
    assert recorder.read().in_flight == 3 and recorder.dropped == 2  # r0, r1: oldest forgotten
    for i in range(5):
        recorder.on_finish(f"r{i}", 1)
    batch = recorder.read()
    assert [r.input_length for r in batch.records] == [6, 6] and batch.dropped == 3  # r4: queue full
    assert [r.arrival_s for r in batch.records] == [2.0, 3.0]


def test_a_requeued_request_keeps_its_first_arrival():
    """A retracted Req queued again is not a second arrival: one record, the first time."""
    recorder = TrafficRecorder(BlockHasher(block_tokens=4, salt=b"k"))
    recorder.on_arrival("a", [1, 2, 3], arrival_s=1.0)
    recorder.on_arrival("a", [1, 2, 3], arrival_s=9.0)
    recorder.on_finish("a", 2)
    assert [(r.arrival_s, r.arrival_seq) for r in recorder.read().records] == [(1.0, 1)]


def test_rows_are_dense_first_seen_and_relative_milliseconds():
    recorder = TrafficRecorder(BlockHasher(block_tokens=2, salt=b"k"))
    recorder.on_arrival("late", [5, 6, 7], arrival_s=101.25)
    recorder.on_arrival("early", [5, 6, 9, 9], arrival_s=100.0)
    recorder.on_arrival("empty", [1, 2], arrival_s=102.0)
    recorder.on_finish("late", 4)
    recorder.on_finish("early", 2)
    recorder.on_finish("empty", 0)
    rows, skipped = mooncake_rows(recorder.read().records)
    assert rows == [
        {"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": [0, 1]},
        {"timestamp": 1250, "input_length": 3, "output_length": 4, "hash_ids": [0, 2]},
    ]
    assert skipped == 1


def test_written_trace_parses_as_mooncake_and_states_its_assumptions(tmp_path):
    recorder = TrafficRecorder(BlockHasher(salt=b"k"))
    recorder.on_arrival("a", list(range(1, 1001)), arrival_s=3.0)
    recorder.on_arrival("b", list(range(1, 600)), arrival_s=3.5)
    recorder.on_finish("a", 20)
    recorder.on_finish("b", 30)
    out = tmp_path / "mine.jsonl"
    meta = write_recording(out, recorder.read().records,
                           {"block_tokens": 512, "dropped": 0, "model": "tiny", "page_size": 16})
    records = list(iter_records(out))
    assert [r.hash_ids for r in records] == [(0, 1), (0, 2)]
    assert [r.input_length for r in records] == [1000, 599]
    sidecar = json.loads(meta_path(out).read_text())
    assert sidecar == meta and sidecar["token_ids_stored"] is False
    assert sidecar["requests"] == 2 and sidecar["distinct_blocks"] == 3
    assert sorted(os.listdir(tmp_path)) == ["mine.jsonl", "mine.meta.json"]


def test_a_failed_write_leaves_the_old_trace_and_no_temporaries(tmp_path, monkeypatch):
    out = tmp_path / "mine.jsonl"
    out.write_text("old\n")
    recorder = TrafficRecorder(BlockHasher(salt=b"k"))
    recorder.on_arrival("a", [1, 2, 3], arrival_s=0.0)
    recorder.on_finish("a", 1)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(RuntimeFailure, match="No space left"):
        write_recording(out, recorder.read().records, {"block_tokens": 512})
    assert out.read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["mine.jsonl"]


def test_destination_is_checked_before_recording(tmp_path):
    with pytest.raises(InputError, match="is a folder"):
        check_destination(tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        check_destination(tmp_path / "missing" / "t.jsonl")
    assert check_destination(tmp_path / "t.jsonl") == tmp_path / "t.jsonl"
