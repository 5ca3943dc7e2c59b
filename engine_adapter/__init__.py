"""Engines behind one protocol, and the instrumentation of them.

Nothing here imports prometheus or opentelemetry; telemetry pulls snapshots and receipts.
SGLang and torch are imported lazily, only where an engine is built.
"""
