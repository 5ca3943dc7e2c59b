"""One process-wide lock over file descriptor 1.

Two things in kvctl point fd 1 somewhere else for a moment: allocation calls (SGLang's Rust
core prints its whole tree there when an allocation fails) and the tree dump (which captures
`pretty_print`). A redirect of a file descriptor is process-wide, so a `--json` document or an
address announcement written by another thread meanwhile would land in the wrong place (seen
in CI: the exporter's announcement went to stderr while the live run's worker allocated).
Both redirects and every writer of kvctl's machine-read stdout hold this lock.
"""

from __future__ import annotations

import threading

STDOUT_LOCK = threading.RLock()
