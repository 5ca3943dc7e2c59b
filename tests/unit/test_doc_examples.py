"""Every kvctl command shown in README.md and docs/*.md still runs as written.

The examples are read from the files themselves (inside ``` blocks: lines starting with
`$ kvctl ` or `kvctl `, `\\` continuations joined, a trailing `# comment` dropped), so a
new example is covered the day it is written, and one that names a removed command or
option, or a value the option no longer takes, fails here:

    every example            its command exists and every --option it gives is one of that
                             command's options
    no placeholder           (HOST, MODEL, PORT, `...`, `[--seed N]`) Click parses it against the real
                             command tree: values convert, nothing is missing or extra
    no placeholder, no       (size, plan, addr, explain) it runs: exit 0, or, where the page
    engine                   shows `kvctl: error: ...` under it, exit 2 with exactly that line

Examples that run an engine or need a live server (replay, check, monitor, exporter,
inspect, record) are parsed, not run here: their runs are the integration and e2e tests.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer._click import core as click_core  # Typer 0.29 vendors Click
from typer.core import TyperGroup
from typer.main import get_command
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CLI = get_command(app)
PURE = {"size", "plan", "addr", "explain"}
PLACEHOLDER = re.compile(r"\b(HOST|PORT|MODEL|FILE|URL|[MGCONXT])\b|\.\.\.|\[|<")  # M, G: --model M


def _blocks(lines: list[str]) -> list[list[tuple[int, str]]]:
    """The ``` blocks of a page, as (line number, text) lists."""
    blocks, current = [], None
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            if current is not None:
                blocks.append(current)
            current = None if current is not None else []
        elif current is not None:
            current.append((number, line))
    return blocks


def _examples() -> list[tuple[str, int, str, str | None]]:
    """(page, line, command text without `kvctl`, the line shown after it) per example. In a
    block that shows a session (`$ ` prompts) only the prompted lines are commands; the
    rest is output."""
    found = []
    for page in PAGES:
        for block in _blocks(page.read_text().splitlines()):
            prompt = "$ kvctl " if any(t.startswith("$ ") for _, t in block) else "kvctl "
            index = 0
            while index < len(block):
                number, text = block[index]
                if text.startswith(prompt):
                    while text.endswith("\\") and index + 1 < len(block):
                        index += 1
                        text = text[:-1] + " " + block[index][1].strip()
                    text = re.sub(r"\s+#\s.*$", "", text.removeprefix("$ ").removeprefix("kvctl "))
                    text = re.sub(r"\s+&$", "", text)  # a shell's background job: same command
                    after = block[index + 1][1] if index + 1 < len(block) else None
                    found.append((page.relative_to(REPO).as_posix(), number, text.strip(), after))
                index += 1
    return found


EXAMPLES = _examples()


def _leaf(words: list[str]):
    """(command path, the leaf Click command, the remaining arguments)."""
    command, path = CLI, []
    ctx = click_core.Context(CLI)
    while isinstance(command, TyperGroup) and words and not words[0].startswith("-"):
        sub = command.get_command(ctx, words[0])
        assert sub is not None, f"no command {' '.join([*path, words[0]])!r}"
        command, path, words = sub, [*path, words[0]], words[1:]
    return path, command, words


def test_the_pages_have_examples():
    """The collector finds the examples (the README's demo, the docs pages' commands)."""
    pages = {page for page, *_ in EXAMPLES}
    assert "README.md" in pages and len(EXAMPLES) >= 30, EXAMPLES


@pytest.mark.parametrize(("page", "line", "text", "after"), EXAMPLES,
                         ids=[f"{p}:{n}" for p, n, *_ in EXAMPLES])
def test_example_still_runs(page, line, text, after):
    """The example's command and options exist; without placeholders it parses; a pure one
    runs with the exit code and error line the page shows."""
    path, command, args = _leaf(shlex.split(text))
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    for word in args:
        if word.startswith("--"):
            assert word.split("=")[0] in known, f"{page}:{line}: {word} is no option of {path}"
    if PLACEHOLDER.search(text):
        return
    ctx = click_core.Context(CLI, info_name="kvctl")
    command.make_context(" ".join(path), list(args), parent=ctx)  # raises on a bad value
    if path[0] not in PURE:
        return
    result = CliRunner().invoke(app, [*path, *args])
    if after is not None and after.startswith("kvctl: error: "):
        assert (result.exit_code, result.stderr.strip()) == (2, after), result.stdout
    else:
        assert result.exit_code == 0, result.stderr
