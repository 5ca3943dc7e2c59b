"""kvctl's version, in one place (pyproject.toml's `version` must match)."""

__version__ = "0.1.0"
