"""Widgets, one per file, grouped by dashboard area (pool, reuse, integrity, tree, requests)."""
