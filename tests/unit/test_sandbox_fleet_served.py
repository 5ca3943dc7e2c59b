"""Which worker served a request (kvctl/sandbox/served.py): rid -> worker from each worker's
plugin `/receipts`, read incrementally; gaps in the bounded log are counted, never guessed."""

from __future__ import annotations

import pytest

from kvctl.sandbox import served
from kvctl.sandbox.served import ServedBy, new_rid, plugin_endpoints

pytestmark = pytest.mark.unit


class FakePlugins:
    """Plugin URL -> its receipt log; answers GET /receipts?after=N like server.py."""

    def __init__(self) -> None:
        self.logs: dict[str, list[dict]] = {}
        self.first: dict[str, int] = {}
        self.calls: list[str] = []

    def add(self, plugin: str, rid: str, kind: str = "match") -> None:
        self.logs.setdefault(plugin, []).append({"kind": kind, "request": rid})

    def get(self, url: str, timeout_s: float) -> dict:
        self.calls.append(url)
        plugin, after = url.split("/receipts?after=")
        log, first = self.logs.get(plugin, []), self.first.get(plugin, 0)
        start = max(int(after), first)
        return {"first": first, "next": first + len(log), "receipts": log[start - first:]}


@pytest.fixture
def plugins(monkeypatch):
    fake = FakePlugins()
    monkeypatch.setattr(served, "_get_json", fake.get)
    return fake


def test_each_rid_maps_to_the_worker_whose_plugin_admitted_it(plugins):
    by = ServedBy({"http://w0": ["http://p0"], "http://w1": ["http://p1", "http://p1b"]})
    plugins.add("http://p0", "a")
    plugins.add("http://p1b", "b")  # worker 1's DP rank 1
    plugins.add("http://p0", None, kind="eviction")
    assert by.attribute(["a", "b", "c"]) == {"a": "http://w0", "b": "http://w1", "c": None}
    plugins.add("http://p1", "c")
    assert by.worker_of("c") == "http://w1"
    # each poll asks for receipts after the last one read
    assert plugins.calls[-3:] == ["http://p0/receipts?after=2", "http://p1/receipts?after=0",
                                  "http://p1b/receipts?after=1"]


def test_a_retried_rid_keeps_every_worker_and_answers_the_last(plugins):
    by = ServedBy({"http://w0": ["http://p0"], "http://w1": ["http://p1"]})
    plugins.add("http://p0", "r")
    plugins.add("http://p1", "r")
    assert by.worker_of("r") == "http://w1"
    assert by.all_workers["r"] == ["http://w0", "http://w1"]


def test_receipts_the_bounded_log_dropped_are_counted_as_lost(plugins):
    by = ServedBy({"http://w0": ["http://p0"]})
    plugins.logs["http://p0"] = [{"kind": "match", "request": "late"}]
    plugins.first["http://p0"] = 5000  # 5,000 receipts dropped before this reader's first poll
    assert by.attribute(["late"]) == {"late": "http://w0"}
    assert by.lost == 5000


def test_a_worker_without_the_plugin_is_refused():
    with pytest.raises(ValueError, match="no kvctl plugin endpoint for worker"):
        ServedBy({"http://w0": []})


def test_plugin_endpoints_from_server_info_one_per_dp_rank():
    assert plugin_endpoints({"kvctl_plugin": {"url": "http://127.0.0.1:2000", "port_base": 2000,
                                              "dp_size": 2}}) == [
        "http://127.0.0.1:2000", "http://127.0.0.1:2001"]
    assert plugin_endpoints({"kvctl_plugin": {"url": "http://127.0.0.1:2000", "dp_size": 1}}) == [
        "http://127.0.0.1:2000"]
    assert plugin_endpoints({}) == []


def test_from_ready_reads_the_fleet_ready_line():
    doc = {"workers": [{"url": "http://w0", "plugin_url": "http://p0",
                        "plugin_urls": ["http://p0"]},
                       {"url": "http://w1", "plugin_url": "http://p1", "plugin_urls": []}]}
    assert ServedBy.from_ready(doc).workers == {"http://w0": ["http://p0"],
                                                "http://w1": ["http://p1"]}


def test_new_rids_are_unique():
    assert len({new_rid() for _ in range(1000)}) == 1000
    assert new_rid("replay").startswith("replay-")
