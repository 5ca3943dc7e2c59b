"""kvctl's error family, re-exported from engine_adapter/base/errors.py (the base below
kvctl's layers and engine_adapter's): the same classes, so the CLI edge catches what
engine_adapter raises."""

from engine_adapter.base.errors import InputError, IntegrityError, KvctlError, RuntimeFailure

__all__ = ["InputError", "IntegrityError", "KvctlError", "RuntimeFailure"]
