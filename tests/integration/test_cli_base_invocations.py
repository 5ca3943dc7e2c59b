"""Every command's base invocation in tests/cli_bases.py runs, so that a bad-value case of
tests/unit/test_cli_bad_input_property.py fails because of its bad value and not because
its base was already broken (a base that failed with one line would make every case of
its command pass).

The quick commands' bases are checked in the unit test; here the ones that cost seconds:
check, monitor, exporter and replay run their workload (SGLang's cache on this CPU);
record records one request from a real loopback endpoint serving the plugin's /records
route (records_http.py) in place of its dead URL; inspect, whose base points at a dead URL
on purpose, gets through every check of its options and fails only at the connection, with
the one line that names the address.
"""

from __future__ import annotations

import json

import pytest
from cli_bases import BASE, DEAD_URL, RECORD_OUT, RUNS_A_WORKLOAD
from record_support import finish, make_req
from records_http import RecordsEndpoint, sglang_info
from typer.testing import CliRunner

from engine_adapter.recording.tap import RecordingTap
from kvctl.cli.app import app

pytestmark = [pytest.mark.integration, pytest.mark.slow]
runner = CliRunner()


@pytest.mark.parametrize("path", sorted(RUNS_A_WORKLOAD))
def test_workload_bases_run(path, sglang_ready):
    """check, monitor, exporter and replay: the base exits 0 and prints what it ran."""
    result = runner.invoke(app, [*path.split(), *BASE[path]])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip()


def test_record_base_runs_against_a_live_endpoint(tmp_path, sglang_ready):
    """record's base with its dead URL replaced by a live endpoint and --out by a scratch
    file: it records the one request waiting there (its --max-requests 1) and exits 0."""
    tap = RecordingTap(block_tokens=512)
    req = make_req("base-0", list(range(1, 40)))
    tap.on_request_arrival(req)
    finish(req, 3)
    tap.on_request_finish(req)
    out = tmp_path / "base.jsonl"
    args = [str(out) if a == RECORD_OUT else a for a in BASE["record"]]
    with RecordsEndpoint(tap, info=lambda e: sglang_info(e.url)) as endpoint:
        args = [endpoint.url if a == DEAD_URL else a for a in args]
        result = runner.invoke(app, ["record", *args])
    assert result.exit_code == 0, result.stderr
    assert [json.loads(line)["input_length"] for line in out.read_text().splitlines()] == [39]


def test_inspect_base_fails_only_at_its_dead_url():
    """inspect's base passes every option check and fails at the connection: exit 1 and
    one line naming the dead address (a base rejected for its options would exit 2)."""
    result = runner.invoke(app, ["inspect", *BASE["inspect"]])
    assert result.exit_code == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvctl: error: "), result.stderr
    assert "127.0.0.1:9" in lines[0]


def test_calibrate_base_fails_only_at_its_dead_url(tmp_path):
    """calibrate's base passes every option check and fails at the connection, like
    record's (exit 2, the URL being the input at fault): one line naming the dead address
    and saying it cannot reach the server, and no model file written."""
    out = tmp_path / "cost.json"
    args = [str(out) if a.endswith("calibrate.json") else a for a in BASE["calibrate"]]
    result = runner.invoke(app, ["calibrate", *args])
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvctl: error: cannot reach"), result.stderr
    assert "127.0.0.1:9" in lines[0] and not out.exists()
