"""--plugin-url / --plugin-token at the CLI edge of inspect, monitor and exporter: bad use is
one line and exit 2, before any engine or server is contacted."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.unit

SCENARIO = "examples/scenarios/coding-agents.yaml"


@pytest.mark.parametrize(("args", "message"), [
    (["monitor", "--plugin-url", "http://127.0.0.1:1"], "--plugin-url only applies with --url"),
    (["exporter", "--scenario", SCENARIO, "--plugin-url", "http://127.0.0.1:1"],
     "--plugin-url only applies with --url"),
    (["inspect", "--url", "http://127.0.0.1:1", "--plugin-url", "ftp://h:1"],
     "--plugin-url 'ftp://h:1' is not an http(s)://HOST:PORT address"),
    (["monitor", "--url", "http://127.0.0.1:1", "--plugin-url", "ftp://h:1", "--json"],
     "--plugin-url 'ftp://h:1' is not an http(s)://HOST:PORT address"),
    (["inspect", "--url", "http://127.0.0.1:1", "--plugin-url", "http://a:1",
      "--plugin-url", "http://b:1"], "2 --plugin-url for 1 --url"),
    (["exporter", "--url", "http://127.0.0.1:1", "--plugin-url", "http://a:1",
      "--plugin-url", "http://b:1"], "2 --plugin-url for 1 --url"),
])  # fmt: skip
def test_bad_plugin_options_are_one_line_exit_2(args, message):
    """Each misuse names the option and exits 2."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"kvctl: error: {message}"
