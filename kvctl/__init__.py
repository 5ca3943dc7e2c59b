"""kvctl: the operator's instrument panel for the KV cache of an LLM serving engine."""

from engine_adapter.base.version import __version__  # noqa: F401 (one place)
