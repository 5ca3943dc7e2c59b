"""One exception family for everything kvctl reports to a user.

The CLI converts a `KvctlError` once, at its edge, into a one-line message and an exit code:
2 for bad usage or input (nothing ran), 1 for a runtime failure (something ran and failed).
Domain code raises these and never prints or exits.
"""

from __future__ import annotations


class KvctlError(Exception):
    """Base of every error kvctl shows to a user as one line."""

    exit_code: int = 1


class InputError(KvctlError):
    """Bad usage or input: an unknown preset, a malformed file, an impossible size. Exit 2."""

    exit_code = 2


class RuntimeFailure(KvctlError):
    """Something ran and failed: a dead server, an engine that could not be built. Exit 1."""

    exit_code = 1


class IntegrityError(RuntimeFailure):
    """A stateful component's invariant does not hold; the message carries the numbers."""
