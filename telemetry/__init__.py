"""Telemetry over engine snapshots: the Prometheus collector and exporter, OpenTelemetry spans
for receipts, and metric hygiene.

Imports point one way (DESIGN.md): telemetry reads `engine_adapter` snapshots and receipts;
nothing in `engine_adapter` imports this package. Every metric family is defined once, in
`telemetry.metrics_table.METRICS`.
"""
