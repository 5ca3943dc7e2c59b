"""`kvctl replay --against` refuses a server it cannot drive with one line and exit 2,
before any request is sent.

The server is a stdlib HTTP server on loopback answering SGLang's /server_info and
/model_info shapes and counting every POST (a real SGLang server cannot be made to be
dead, non-SGLang or an embedding server on demand; tests/e2e/test_e2e_twin.py drives the
real one).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.integration

HEAD = str(Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake"
           / "head_500.jsonl")


class FakeServer:
    """Answers GET paths from `documents` (404 otherwise) and counts POSTs."""

    def __init__(self, documents: dict[str, dict]) -> None:
        self.posts = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                document = documents.get(self.path)
                body = json.dumps(document).encode() if document is not None else b"{}"
                self.send_response(200 if document is not None else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):  # noqa: N802
                outer.posts += 1
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def against(url: str, *extra: str):
    return CliRunner().invoke(app, ["replay", HEAD, "--limit", "2", "--against", url, *extra])


def info(tmp_path: Path, **fields) -> dict:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"vocab_size": 512}))
    return {"page_size": 16, "max_total_num_tokens": 4096, "model_path": str(model), **fields}


@pytest.mark.parametrize("case, expected", [
    ("embedding", "serves an embedding model: it does not generate from input_ids"),
    ("not-generation", "serves an embedding model: it does not generate from input_ids"),
    ("no-vocabulary", "is not readable here): pass --vocab-size N"),
    ("not-sglang", "does not look like an SGLang server"),
])
def test_a_server_that_cannot_be_driven_gets_one_line_and_no_request(tmp_path, case, expected):
    """Each case: exit 2, one line naming the problem, and the server saw no POST (neither
    a request nor the cache flush)."""
    documents = {
        "embedding": {"/server_info": info(tmp_path, is_embedding=True)},
        "not-generation": {"/server_info": info(tmp_path),
                           "/model_info": {"is_generation": False}},
        "no-vocabulary": {"/server_info": info(tmp_path, model_path="/nonexistent/model")},
        "not-sglang": {},
    }[case]
    server = FakeServer(documents)
    try:
        result = against(server.url)
    finally:
        server.close()
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0]
    assert server.posts == 0


def test_a_dead_server_gets_one_line(tmp_path):
    """Nothing listening: exit 2, one line saying the server cannot be reached."""
    server = FakeServer({})
    url = server.url
    server.close()
    result = against(url)
    assert result.exit_code == 2
    assert result.stderr.strip().startswith(
        f"kvctl: error: cannot reach the SGLang server at {url}")
    assert len(result.stderr.strip().splitlines()) == 1


def test_replay_settings_contradicting_the_server_are_refused():
    """--against takes the server's settings: --page-size with it is exit 2, one line."""
    result = against("http://127.0.0.1:9", "--page-size", "4")
    assert result.exit_code == 2
    assert result.stderr.strip() == ("kvctl: error: --against replays with the server's own "
                                     "settings: drop --page-size")


def test_speedup_without_against_is_refused():
    """--speedup alone means nothing to a plain replay: exit 2, one line."""
    result = CliRunner().invoke(app, ["replay", HEAD, "--limit", "2", "--speedup", "5"])
    assert result.exit_code == 2
    assert result.stderr.strip() == ("kvctl: error: --speedup, --vocab-size, --plugin-url and "
                                     "--fit-share go with --against URL")


@pytest.mark.parametrize("extra, expected", [
    (["--fit-share", "1.5"], "--fit-share must be between 0 and 1 (exclusive)"),
    (["--fit-share", "0"], "--fit-share must be between 0 and 1 (exclusive)"),
    (["--fit-share", "nan"], "--fit-share must be a finite number"),  # the CLI's guard
    (["--fit-share", "0.5", "--cost-model", "clock.json"],
     "with --cost-model nothing is fitted: drop --fit-share"),
])
def test_a_bad_fit_share_is_one_line_and_no_request(tmp_path, extra, expected):
    """--fit-share outside (0, 1), or with --cost-model (nothing is fitted then): exit 2,
    one line naming it, and the server saw no POST."""
    server = FakeServer({"/server_info": info(tmp_path)})
    try:
        result = against(server.url, *extra)
    finally:
        server.close()
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], lines
    assert server.posts == 0
