"""Instrumentation of an embedded engine: the normative measurements of DESIGN.md.

Each module reads SGLang's objects and kvctl's request table and produces the frozen
pieces of a `Snapshot`; none of them mutates the engine.
"""
