"""Children a test interrupts with SIGINT start with SIGINT's default disposition.

A test run launched in the background by a non-interactive shell (`cmd &`, `nohup`)
inherits SIGINT ignored, and a Python child that starts with SIGINT ignored installs no
KeyboardInterrupt handler: the SIGINT a test sends would then do nothing and the test
would time out for a reason that has nothing to do with kvctl. `preexec_fn=sigint_default`
gives the child what an interactive user's Ctrl-C reaches.
"""

from __future__ import annotations

import signal


def sigint_default() -> None:
    """preexec_fn: SIGINT back to SIG_DFL in the child (Python then raises
    KeyboardInterrupt on it, as it does when started from a terminal)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
