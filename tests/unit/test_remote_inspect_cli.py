"""`kvctl inspect` edges that need no server: imports, bad input, a dead server.

The runs against a live (loopback) SGLang are in tests/integration/test_remote_engine.py
and tests/integration/test_remote_fleet.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def imported(*args: str, exit_code: int, says: str) -> set[str]:
    """Top-level packages `python -m kvctl ARGS` imported. The run must end with `exit_code`
    and print `says` (proof the inspect command ran), so a process that died early (an
    import error, a crash before the command ran) fails the test instead of passing for
    having imported "nothing heavy"."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kvctl", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == exit_code, proc.stderr[-2000:]
    assert says in proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in lines}


def test_help_imports_neither_torch_nor_sglang():
    """`kvctl inspect --help` stays light (and really printed the help: exit 0)."""
    assert not {"torch", "sglang"} & imported("inspect", "--help", exit_code=0,
                                             says="kvctl inspect [OPTIONS]")


def test_attach_attempt_imports_neither_torch_nor_sglang():
    """Even attaching (to a dead port: exit 1, after trying) never imports torch or sglang."""
    modules = imported("inspect", "--url", f"http://127.0.0.1:{closed_port()}", "--wait", "0",
                       exit_code=1, says="kvctl: error: no server answered")
    assert "engine_adapter" in modules and not {"torch", "sglang"} & modules


def test_dead_server_is_runtime_failure():
    """Nothing listening: one line naming the URL, exit 1."""
    url = f"http://127.0.0.1:{closed_port()}"
    result = runner.invoke(app, ["inspect", "--url", url, "--wait", "0"])
    assert result.exit_code == 1
    assert result.output.startswith("kvctl: error: no server answered") and url in result.output
    assert result.output.count("\n") == 1


def test_bad_url_is_input_error():
    """A non-HTTP URL is bad input: exit 2."""
    result = runner.invoke(app, ["inspect", "--url", "ftp://host:1"])
    assert result.exit_code == 2 and "kvctl: error: --url" in result.output


@pytest.mark.parametrize(("option", "value"), [("--mu", "1.5"), ("--gamma", "0")])
def test_bad_objective_parameters_are_input_errors(option, value):
    """mu outside [0, 1] or gamma <= 0: exit 2 before any network."""
    result = runner.invoke(app, ["inspect", "--url", "http://h:1", option, value])
    assert result.exit_code == 2 and option in result.output


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("hello world", "holds text"),
        ("[1.5, 2]", "non-negative integers"),
        ("[]", "non-empty"),
        ("[-3]", "non-negative integers"),
        ('{"token_ids": [1], "cache_salt": 5}', "cache_salt"),
    ],
)
def test_bad_prompt_file_is_input_error(tmp_path, content, message):
    """Text, floats, empty lists, negative ids and non-string salts are rejected (exit 2)."""
    prompt = tmp_path / "prompt.json"
    prompt.write_text(content)
    result = runner.invoke(app, ["inspect", "--url", "http://h:1", "--prompt-file", str(prompt)])
    assert result.exit_code == 2 and message in result.output


def test_missing_prompt_file_is_input_error(tmp_path):
    """A prompt file that does not exist: exit 2."""
    result = runner.invoke(
        app, ["inspect", "--url", "http://h:1", "--prompt-file", str(tmp_path / "nope.json")]
    )
    assert result.exit_code == 2 and "nope.json" in result.output


def test_prompt_file_formats(tmp_path):
    """A JSON list, a token_ids object and whitespace-separated ids all load."""
    from kvctl.cli.inspect import load_prompt

    forms = {
        "a.json": "[1, 2, 3]",
        "b.json": json.dumps({"token_ids": [1, 2, 3], "cache_salt": "s"}),
        "c.txt": "1 2\n3",
    }
    loaded = []
    for name, text in forms.items():
        (tmp_path / name).write_text(text)
        loaded.append(load_prompt(tmp_path / name))
    assert [p["token_ids"] for p in loaded] == [[1, 2, 3]] * 3
    assert loaded[1]["cache_salt"] == "s"
