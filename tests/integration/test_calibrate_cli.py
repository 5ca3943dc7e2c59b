"""`kvctl calibrate`'s refusals before collecting, over real HTTP on loopback: a stdlib server
stands in for SGLang's /server_info (records_http.py; a real server's refusals and its fit
are in tests/e2e/test_e2e_calibrate.py). Each is one line and exit 2, no model written."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app
from records_http import RecordsEndpoint, sglang_info

pytestmark = pytest.mark.integration


def test_a_server_without_the_plugin_is_refused(tmp_path):
    """/server_info advertises no kvctl_plugin: the fix is named."""
    with RecordsEndpoint(None, info=sglang_info(None)) as server:
        result = CliRunner().invoke(app, ["calibrate", "--url", server.url,
                                          "--out", str(tmp_path / "m.json")])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        f"kvctl: error: {server.url} advertises no kvctl plugin in /server_info: start the "
        "server with KVCTL_SGLANG_PLUGIN=1, or pass --plugin-url")
    assert not (tmp_path / "m.json").exists()


def test_a_plugin_without_step_samples_is_refused(tmp_path):
    """A plugin endpoint that serves no /step_samples (an older kvctl on the server)."""
    with RecordsEndpoint(None) as plugin, \
            RecordsEndpoint(None, info=sglang_info(plugin.url)) as server:
        result = CliRunner().invoke(app, ["calibrate", "--url", server.url,
                                          "--out", str(tmp_path / "m.json")])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        f"kvctl: error: {plugin.url} serves no /step_samples: the kvctl plugin there predates "
        "step timing (install this kvctl on the server) or --plugin-url points elsewhere")
