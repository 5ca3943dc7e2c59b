"""Pure pieces of `kvctl record`: the plugin address a client can reach, --duration parsing."""

from __future__ import annotations

import pytest

from kvctl.cli.record import parse_duration
from kvctl.errors import InputError
from kvctl.record.client import _reachable

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("advertised, server, expected", [
    ("http://127.0.0.1:30100", "http://10.0.0.5:30000", "http://10.0.0.5:30100"),
    ("http://0.0.0.0:30101", "http://gpu-7:30000", "http://gpu-7:30101"),
    ("http://127.0.0.1:30100", "http://[fd00::2]:30000", "http://[fd00::2]:30100"),
    ("http://127.0.0.1:30100", "http://127.0.0.1:30000", "http://127.0.0.1:30100"),
    ("http://10.1.1.1:30100", "http://10.0.0.5:30000", "http://10.1.1.1:30100"),
])
def test_a_loopback_announcement_takes_the_host_the_server_was_reached_at(
        advertised, server, expected):
    """Loopback or wildcard announced, server reached elsewhere: that host, same port; a
    routable announcement, or a local client, is kept as announced."""
    assert _reachable(advertised, server) == expected


@pytest.mark.parametrize("text, seconds", [("90", 90.0), ("90s", 90.0), ("10m", 600.0),
                                           ("1.5h", 5400.0), ("500ms", 0.5)])
def test_durations_in_the_units_people_type(text, seconds):
    """Seconds by default; ms, s, m, h suffixes."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0", "10 minutes", "-1m", ""])
def test_a_duration_that_is_not_one_is_an_input_error(text):
    """Zero, words, negatives and empty: InputError naming the value."""
    with pytest.raises(InputError, match="is not a positive duration"):
        parse_duration(text)
