"""The /metrics body is rendered once per snapshot and format, over real loopback HTTP."""

from __future__ import annotations

import gzip
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from telemetry.exporter import serve
from support.telemetry_fixtures import FixedSnapshotSource, seed_snapshot

pytestmark = pytest.mark.unit

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


class _Switchable:
    """A source whose current snapshot the test sets; reads return that object."""

    read_only = True

    def __init__(self, snapshot) -> None:
        self.current = snapshot
        self.fail = False

    def snapshot(self):
        if self.fail:
            raise ConnectionError("server went away")
        return self.current

    def take_receipts(self):
        return []

    def close(self) -> None:
        pass


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[bytes, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read(), dict(response.headers)


def _kvctl_lines(body: bytes) -> list[str]:
    return [line for line in body.decode().splitlines() if "kvctl_" in line]


def test_scrapes_of_one_snapshot_render_it_once():
    """Three scrapes of the same snapshot object render the kvctl families once and serve
    the same kvctl lines; process metrics are still present in every body."""
    source = _Switchable(seed_snapshot(seq=1))
    with serve(source, port=0) as server:
        bodies = [_get(server.url)[0] for _ in range(3)]
        assert server.renderer.renders == 1
    assert _kvctl_lines(bodies[0]) == _kvctl_lines(bodies[1]) == _kvctl_lines(bodies[2])
    assert all(b"process_cpu_seconds_total" in body for body in bodies)


def test_two_scrapes_of_one_snapshot_carry_byte_identical_kvctl_text_from_one_render():
    """Both bodies start with the same bytes: the one rendered kvctl text, which is exactly
    what the renderer holds for that snapshot; only the process families follow it."""
    source = _Switchable(seed_snapshot(seq=1))
    with serve(source, port=0) as server:
        first, second = _get(server.url)[0], _get(server.url)[0]
        part = server.renderer.snapshot_part()
        assert server.renderer.renders == 1
    assert part.startswith(b"# HELP kvctl_") and b"process_" not in part
    assert first[: len(part)] == second[: len(part)] == part
    assert first[len(part):].startswith(b"# HELP process_")


def test_a_late_scrape_of_the_previous_snapshot_does_not_evict_the_current_body():
    """Reads of S1, S2, S1 again (a scrape that read S1 just before S2 was published) and
    S2 again render twice: the previous snapshot's body is still held, and the current
    one is not pushed out by it."""
    one, two = seed_snapshot(seq=1), seed_snapshot(seq=2, virtual_time_s=99.5)
    source = _Switchable(one)
    with serve(source, port=0) as server:
        parts = []
        for current in (one, two, one, two):
            source.current = current
            parts.append(server.renderer.snapshot_part())
        assert server.renderer.renders == 2
    assert parts[0] == parts[2] and parts[1] == parts[3] and parts[0] != parts[1]
    assert b"kvctl_virtual_time_seconds 99.5" in parts[1]


def test_a_new_snapshot_is_rendered_again_with_its_values():
    """A new snapshot object invalidates the cached body: its values appear."""
    first = seed_snapshot(seq=1)
    source = _Switchable(first)
    with serve(source, port=0) as server:
        before = _get(server.url)[0].decode()
        source.current = seed_snapshot(seq=2, virtual_time_s=99.5)
        after = _get(server.url)[0].decode()
        assert server.renderer.renders == 2
    assert "kvctl_virtual_time_seconds 12.5" in before
    assert "kvctl_virtual_time_seconds 99.5" in after


def test_each_format_is_cached_separately_and_openmetrics_ends_once():
    """Text and OpenMetrics bodies are two cache entries; the OpenMetrics body carries
    exactly one `# EOF`, at the very end, after the process families."""
    source = _Switchable(seed_snapshot(seq=1))
    with serve(source, port=0) as server:
        text, text_headers = _get(server.url)
        om, om_headers = _get(server.url, {"Accept": OPENMETRICS})
        om_again, _ = _get(server.url, {"Accept": OPENMETRICS})
        assert server.renderer.renders == 2
    assert text_headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert om_headers["Content-Type"].startswith("application/openmetrics-text")
    assert om.count(b"# EOF") == 1 and om.endswith(b"# EOF\n")
    assert om.index(b"kvctl_up") < om.index(b"process_cpu_seconds") < om.index(b"# EOF")
    assert b"# EOF" not in text
    assert _kvctl_lines(om) == _kvctl_lines(om_again)


def test_gzip_is_honoured():
    """`Accept-Encoding: gzip` gets a gzip body that decodes to the same kvctl lines."""
    source = _Switchable(seed_snapshot(seq=1))
    with serve(source, port=0) as server:
        plain, _ = _get(server.url)
        packed, headers = _get(server.url, {"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip"
    assert _kvctl_lines(gzip.decompress(packed)) == _kvctl_lines(plain)


def test_a_failed_read_is_never_cached():
    """A source that fails serves `kvctl_up 0` with no value family, and the next good read
    serves the live values again (the down body was not kept)."""
    source = _Switchable(seed_snapshot(seq=1))
    with serve(source, port=0) as server:
        _get(server.url)
        source.fail = True
        down = _get(server.url)[0].decode()
        source.fail = False
        source.current = seed_snapshot(seq=3, virtual_time_s=7.0)
        back = _get(server.url)[0].decode()
    assert "kvctl_up 0.0" in down and "kvctl_pool_tokens" not in down
    assert "kvctl_up 1.0" in back and "kvctl_virtual_time_seconds 7.0" in back


def test_a_burst_of_concurrent_scrapes_renders_once():
    """16 scrapers of one snapshot, released together: one render serves them all."""
    source = FixedSnapshotSource([seed_snapshot(seq=1)])
    barrier = threading.Barrier(16)
    with serve(source, port=0) as server:

        def scrape(_):
            barrier.wait(timeout=10)
            return _get(server.url)[0]

        with ThreadPoolExecutor(16) as pool:
            bodies = list(pool.map(scrape, range(16)))
        assert server.renderer.renders == 1
    assert len({tuple(_kvctl_lines(body)) for body in bodies}) == 1


def test_name_filter_still_works():
    """`?name[]=kvctl_up` returns only that family (rendered uncached, as before)."""
    source = _Switchable(seed_snapshot(seq=1))
    with serve(source, port=0) as server:
        body = _get(server.url + "?name[]=kvctl_up")[0].decode()
    assert "kvctl_up 1.0" in body
    assert "kvctl_pool_tokens" not in body
