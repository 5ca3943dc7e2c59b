"""Workloads (Mooncake traces, agent scenarios) and replays through the embedded engine."""
