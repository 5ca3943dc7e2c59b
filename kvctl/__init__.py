"""kvctl: the operator's instrument panel for the KV cache of an LLM serving engine."""

__version__ = "0.1.0"
