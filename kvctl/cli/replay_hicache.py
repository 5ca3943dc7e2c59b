"""The replay report's host-tier rows when the replay ran SGLang's HiCache
(`kvctl replay --hicache-ratio/--hicache-size`; the figures: kvctl/replay/hicache_options.py)."""

from __future__ import annotations


def hicache_rows(doc: dict) -> list[tuple[str, str, str]]:
    """(name, value, note) rows for the figures table, from `doc["hicache"]`."""
    h, s = doc["hicache"], doc["settings"].get("hicache") or {}
    ratio = f"ratio {s['ratio']:g}" if s.get("ratio") is not None else ""
    return [
        ("HiCache host pool (SGLang)", f"{h['host_capacity_tokens']:,} tokens",
         f"{ratio}, {h['write_policy']}".strip(", ")),
        ("hit tokens device / host", f"{h['device_hit_tokens']:,} / {h['host_hit_tokens']:,}",
         "host hits were loaded back"),
        ("load-back / written to host",
         f"{h['load_back_tokens']:,} / {h['written_to_host_tokens']:,} tokens",
         "SGLang's transfer acks"),
        ("host used / free at end", f"{h['host_used_tokens']:,} / {h['host_free_tokens']:,}",
         f"residual {h['host_residual_tokens']}"),
    ]
