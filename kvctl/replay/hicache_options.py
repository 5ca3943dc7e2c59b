"""`kvctl replay --hicache-ratio R | --hicache-size GB [--hicache-write-policy P]`.

Turns SGLang's HiCache flags into the engine's `hicache_ratio` (engine_adapter/embedded/
hicache.py builds SGLang's host pool and cache controller from it) and reads the replay's
host-tier figures back for the report.

--hicache-size: SGLang sizes the host pool as `host_size * 1e9 // size_per_token` tokens
(mem_cache/pool_host/base.py), size_per_token being one rank's K/V bytes per token. The
replay's pool holds the modeled deployment's tokens but the tiny geometry's bytes, so the
size is converted here with the modeled model's bytes per token per rank (kv_bytes_per_token
/ TP) and handed to SGLang as the equivalent ratio; like SGLang's, it overrides the ratio.
"""

from __future__ import annotations

import dataclasses

from engine_adapter.embedded.config import HICACHE_DEFAULT_WRITE_POLICY, EngineConfig
from kvctl.errors import InputError

HICACHE_SOURCE = "sglang_hicache"  # the report's host tier is SGLang's, not kvctl's model


def offloads_tool_waits(scenario) -> bool:
    """Whether a scenario's tools offload their waits to kvctl's modeled host tier."""
    return any(t.retention == "offload" for agent in getattr(scenario, "agents", ())
               for t in agent.tools)


def host_tokens_for_size(size_gb: int, config: EngineConfig, tp: int) -> int:
    """SGLang's `int(host_size * 1e9 // size_per_token)` with the modeled bytes per rank."""
    per_rank = config.cost.kv_bytes_per_token / max(tp, 1)
    return int(size_gb * 1e9 // per_rank)


def apply_hicache(config: EngineConfig, *, ratio: float | None, size_gb: int | None,
                  write_policy: str | None, tp: int, scenario=None
                  ) -> tuple[EngineConfig, dict | None, list[str]]:
    """`config` with SGLang's HiCache on (or unchanged when no --hicache-* is given), the
    report header's `hicache` settings (None when off) and notes. InputError on bad flags."""
    if ratio is None and size_gb is None:
        if write_policy is not None:
            raise InputError("--hicache-write-policy needs --hicache-ratio or --hicache-size")
        return config, None, []
    if size_gb is not None and size_gb <= 0:
        raise InputError(f"--hicache-size must be a positive number of GB, got {size_gb}")
    policy = write_policy or HICACHE_DEFAULT_WRITE_POLICY  # validated by EngineConfig
    if offloads_tool_waits(scenario):
        raise InputError("--hicache-* (SGLang's HiCache) and kvctl's modeled host tier (the "
                         "scenario's offload tools) cannot be combined: pick one host tier")
    notes = []
    if size_gb is not None:
        host = host_tokens_for_size(size_gb, config, tp)
        if host <= 0:
            raise InputError(f"--hicache-size {size_gb} GB holds no token of the modeled KV")
        if ratio is not None:
            notes.append(f"--hicache-size {size_gb} overrides --hicache-ratio {ratio:g}, "
                         "as in SGLang")
        ratio = (host + 0.5) / config.pool_tokens  # SGLang floors pool x ratio: `host` tokens
    if ratio is not None and 0 < ratio <= 1.0:
        notes.append(f"HiCache host pool ratio {ratio:.3g} <= 1: SGLang warns that a host pool "
                     "no larger than the device pool reduces L2 effectiveness")
    hicache = dataclasses.replace(config, hicache_ratio=ratio, hicache_write_policy=policy,
                                  kv_pool="mha", decode_jumps=False)
    hicache.validate()
    settings = {"source": HICACHE_SOURCE, "ratio": round(ratio, 6), "size_gb": size_gb,
                "write_policy": policy, "io_backend": "direct", "mem_layout": "layer_first"}
    notes.append("host tier: SGLang's HiCache (UnifiedRadixCache.init_hicache, its host pool "
                 "and cache controller; CPU copies complete synchronously)")
    return hicache, settings, notes


def hicache_block(snap) -> dict | None:
    """The report's per-tier figures from the final snapshot; None without HiCache (the
    report then has no `hicache` key at all, not zeros)."""
    io, host = snap.hicache, snap.ledger.host
    if io is None or host is None:
        return None
    return {
        "source": HICACHE_SOURCE,
        "write_policy": host.write_policy,
        "device_hit_tokens": io.hit_tokens_device,
        "host_hit_tokens": io.hit_tokens_host,
        "load_back_tokens": io.loaded_tokens,
        "load_back_bytes": io.loaded_bytes,
        "written_to_host_tokens": io.written_tokens,
        "written_to_host_bytes": io.written_bytes,
        "pending_writes": io.pending_writes,
        "pending_loads": io.pending_loads,
        "host_capacity_tokens": host.capacity_tokens,
        "host_used_tokens": host.used_tokens,
        "host_free_tokens": host.free_tokens,
        "host_tree_tokens": host.tree_tokens,
        "host_residual_tokens": host.residual_tokens,
    }
