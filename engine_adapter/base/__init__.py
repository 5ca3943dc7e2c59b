"""What every layer shares, below all of them: the error family and page arithmetic.

    errors.py   KvctlError, InputError (exit 2), RuntimeFailure (exit 1), IntegrityError
    pages.py    ceil_div, page_ceil, page_floor
    version.py  kvctl's version (the plugin reports it to clients)

Layering (DESIGN.md): cli -> tui / telemetry / replay -> engine_adapter / sizing -> this
base. It imports nothing (no kvctl, no engine_adapter module, no telemetry); engine_adapter
and telemetry import it, never kvctl (tests/unit/test_layering.py). kvctl.errors and
kvctl.util.pages re-export its names, so `kvctl.errors.InputError is
engine_adapter.base.errors.InputError` and the CLI edge catches what an engine raises. It
lives in engine_adapter's package so that existing installs (editable ones included) find it
without a reinstall; nothing in it depends on the rest of engine_adapter.
"""
