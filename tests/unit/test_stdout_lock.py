"""kvctl's machine-read stdout is never captured by another thread's fd-1 redirect.

CI once saw `kvctl exporter --json` announce its address on stderr: the live run's worker was
inside an allocation (fd 1 pointed at stderr) when the main thread wrote the line. These
tests run a real child process so the real file descriptors 1 and 2 are observed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent("""
    import threading, time
    from engine_adapter.embedded.sglang_runtime import stdout_to_stderr
    from engine_adapter.instrument.tree_dump import capture_pretty_print
    from kvctl.cli.output import emit

    entered, release = threading.Event(), threading.Event()

    def hold():
        entered.set()
        release.wait(5)

    class Tree:  # stands in for a tree cache whose pretty_print takes a while
        def pretty_print(self):
            hold()

    def allocate():
        {body}

    worker = threading.Thread(target=allocate)
    worker.start()
    entered.wait(5)
    writer = threading.Thread(target=emit, args=('{{"announced": true}}',))
    writer.start()
    time.sleep(0.3)  # the writer is now waiting for the redirect to end
    release.set()
    worker.join(); writer.join()
""")


def _run(body: str) -> subprocess.CompletedProcess:
    code = _CHILD.format(body=body)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_an_announcement_written_during_an_allocation_reaches_stdout():
    done = _run("with stdout_to_stderr(): hold()")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"announced": True}
    assert "announced" not in done.stderr


def test_an_announcement_written_during_a_tree_dump_reaches_stdout():
    """The tree dump points fd 1 at a temporary file; the line must not end up there."""
    done = _run("capture_pretty_print(Tree())")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"announced": True}
