"""Configuration of the embedded engine: plain numbers only, no SGLang objects.

The CLI resolves model and GPU presets (kvctl.sizing) into `CostParams` and passes them in,
so this package never depends on kvctl's calculators.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine_adapter.embedded.device import DEVICES
from engine_adapter.base.errors import InputError

EVICTION_POLICIES: tuple[str, ...] = ("lru", "lfu", "fifo", "mru", "filo", "priority", "slru", "tlru")
TREE_CORES: tuple[str, ...] = ("rust", "python")
KV_POOLS: tuple[str, ...] = ("noop", "mha")
RETENTION_POLICIES: tuple[str, ...] = ("retain", "drop", "offload")
# SGLang 0.5.23's --schedule-policy choices (srt/arg_groups/fields/schedule.py; a unit test
# keeps them equal). "priority" is accepted by its argument parser but refused by
# SchedulePolicy at start-up, and the replay refuses it the same way (sched_round.py).
# SGLang 0.5.23's --hicache-write-policy choices and default (srt/arg_groups/fields/memory.py;
# a unit test keeps them equal).
HICACHE_WRITE_POLICIES: tuple[str, ...] = ("write_back", "write_through", "write_through_selective")
HICACHE_DEFAULT_WRITE_POLICY = "write_through"
SCHEDULE_POLICIES: tuple[str, ...] = ("lpm", "random", "fcfs", "dfs-weight", "lof", "priority",
                                      "routing-key", "hrrn", "shortest-prefill-first")
# Decoding Q > 1 tokens per request per step (a third decode path, through SGLang's extend
# allocation) was retired: decode jumps (jumps.py) made the per-token path as fast. Measured
# 2026-12-05, shared 2-core machine, whole process, alternating: 1,000 requests of the
# shipped trace took 40.1 s and 28.0 s per token (13,438 steps) against 45.9 s and 49.1 s
# at Q=16 (2,515 steps).
QUANTUM_RETIRED = ("--decode-quantum was retired: decode jumps make SGLang's per-token decode "
                   "as fast (docs/replay.md); drop the option")


@dataclass(frozen=True, kw_only=True)
class CostParams:
    """Roofline inputs for the virtual clock (seed 003 "Chunked Prefill Scheduling").

    Defaults describe Llama-3-8B (8.03e9 parameters, bf16, 128 KiB KV per token) on one
    H100-SXM (989 TFLOPS dense bf16, 3.35 TB/s HBM, PCIe Gen5 x16 ~64 GB/s to host).
    """

    model_name: str = "Llama-3-8B"
    num_params: float = 8.03e9
    weight_bytes_per_param: float = 2.0
    kv_bytes_per_token: int = 131_072
    num_gpus: int = 1
    peak_flops_per_gpu: float = 989e12
    hbm_bandwidth_per_gpu: float = 3.35e12
    host_link_bandwidth: float = 64e9
    prefill_mfu: float = 0.45  # seed 003 napkin math 0.4 uses 45% MFU for TP prefill
    decode_bandwidth_efficiency: float = 0.80
    step_overhead_s: float = 0.0005


def sglang_default_max_running(pool_tokens: int, context_len: int) -> int:
    """The max running requests a stock SGLang 0.5.23 server resolves when
    --max-running-requests is not given (mem_cache/kv_cache_configurator.py,
    resolve_max_num_reqs): pool / context * 512, clamped to [2048, 4096], and at most half
    the pool. kvctl's replay defaults to 256 instead (`EngineConfig.max_running_requests`):
    SGLang's req_to_token table has a row of `context_len` int32 slots per request, 256 MiB
    at 2,048 rows x 32,768 tokens, allocated by every replay and sweep point."""
    estimated = max(min(int(pool_tokens / context_len * 512), 4096), 2048)
    return min(estimated, pool_tokens // 2)


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """Everything needed to build the embedded engine.

    pool_tokens: KV pool token slots (0 = unbounded: sized by the caller from the workload).
    token_budget: SGLang's --chunked-prefill-size (prefill tokens per step, PrefillAdder's
      rem_chunk_tokens); decode steps are separate steps, as in SGLang's scheduler.
    max_prefill_tokens: SGLang's --max-prefill-tokens (PrefillAdder's rem_input_tokens).
    schedule_policy: SGLang's --schedule-policy (SchedulePolicy orders the waiting queue).
    tau_high: kvctl's admission ceiling on U_KV (seed 003: 0.85-0.90), which SGLang lacks; a
      new prefill that would push U_KV above it is deferred while other requests run.
      None (the default, as a stock SGLang server) disables it.
    authorized: tenant -> namespaces it may read; a tenant may always read its own namespace.
    """

    pool_tokens: int = 65_536
    page_size: int = 16
    eviction_policy: str = "lru"
    # Keyword arguments of SGLang's eviction strategy (evict_policy.py). T-LRU refuses to
    # start without threshold > next_prompt_estimate; kvctl's default for it is below.
    eviction_policy_config: dict | None = None
    tree_core: str = "rust"
    kv_pool: str = "noop"
    max_running_requests: int = 256
    max_context_len: int = 32_768
    token_budget: int = 8_192
    max_prefill_tokens: int = 16_384
    schedule_policy: str = "fcfs"
    tau_high: float | None = None
    default_retention: str = "drop"
    host_capacity_tokens: int | None = None
    authorized: dict[str, tuple[str, ...]] = field(default_factory=dict)
    cost: CostParams = field(default_factory=CostParams)
    # A step-cost model fitted to a server (step_cost.StepCostModel, `kvctl calibrate`):
    # the virtual clock then prices steps with it; None: the roofline over `cost`.
    step_cost: object | None = None
    seed: int = 0
    enable_kv_events: bool = False
    # SGLang's staged-free allocator mode (its PD-disaggregation setting): frees are staged
    # and merged when an allocation runs short instead of re-concatenating the whole free
    # list on every free. Only page ids' order differs. None: on for pools over 1M tokens.
    allocator_need_sort: bool | None = None
    decode_quantum: int = 1  # tokens per request per decode step: 1 only (QUANTUM_RETIRED)
    instrument: bool = True  # content oracle + counterfactual funnel; off only to measure its cost
    # Distinct pages the content oracle expects to remember (a workload's estimate, e.g.
    # TraceSummary.oracle_pages): its first key's set is sized for them once instead of
    # growing by rehashes. 0: grow from empty. Changes speed and memory, never a result.
    oracle_pages_hint: int = 0
    # Salt of the namespace labels (and SGLang cache_salt); None: random per engine, so
    # labels cannot be reversed to tenant names. Fix it to compare labels across runs.
    namespace_salt: str | None = None
    receipts: bool = False  # collect Receipt records (OpenTelemetry spans); off for big replays
    tiny_model: str | None = None  # path of a tiny config.json: run a real transformer
    # Torch device of SGLang's pools and the tiny model: "cpu" or "cuda" (embedded/device.py
    # resolves the CLI's --device auto|cpu|cuda before the config is built).
    device: str = "cpu"
    # Allocate through SGLang's ScheduleBatch (prepare_for_extend / prepare_for_decode)
    # instead of the direct cache path (embedded/cache_ops.py): the same tree and allocator
    # calls, slower; the fidelity tests' oracle. Always on when the tiny model runs.
    exact_batches: bool = False
    # Event-driven decode on the direct path: several decode steps in one allocation when
    # nothing can change in between (embedded/jumps.py). Off: one call per step.
    # Only for drivers that pass their next event to step(horizon_s=...) (workload.drive).
    decode_jumps: bool = False
    # The live what-if curve (engine_adapter/instrument/whatif.py): rate of its spatially
    # sampled shadow past the fully shadowed first pages; 0 turns it off (replays, whose
    # --curve computes the exact curve instead).
    whatif_rate: float = 0.01
    # SGLang's HiCache (--enable-hierarchical-cache) behind the tree: its host pool holds
    # hicache_ratio x pool_tokens token slots (SGLang's --hicache-ratio; kvctl converts
    # --hicache-size to it). None: no host tier. Needs kv_pool "mha" (real bytes to copy);
    # engine_adapter/embedded/hicache.py builds it with SGLang's own classes.
    hicache_ratio: float | None = None
    hicache_write_policy: str = HICACHE_DEFAULT_WRITE_POLICY

    @property
    def uses_batches(self) -> bool:
        """Whether the engine allocates through ScheduleBatch (see exact_batches). Off the
        CPU too: the direct path (cache_ops.py) builds its index tensors on the CPU."""
        return self.exact_batches or self.tiny_model is not None or self.device != "cpu"

    def policy_config(self) -> dict | None:
        """The strategy kwargs SGLang gets: explicit ones, else T-LRU's default
        (a 2,048-token TTFT budget and a 512-token next-prompt estimate)."""
        if self.eviction_policy_config is not None:
            return dict(self.eviction_policy_config)
        if self.eviction_policy == "tlru":
            return {"threshold": 2048, "next_prompt_estimate": 512}
        return None

    def need_sort(self) -> bool:
        if self.allocator_need_sort is not None:
            return self.allocator_need_sort
        return self.pool_tokens > 1_000_000

    def validate(self) -> None:
        """Raise InputError naming the first impossible setting."""
        if self.eviction_policy not in EVICTION_POLICIES:
            raise InputError(
                f"unknown eviction policy {self.eviction_policy!r}; valid: {', '.join(EVICTION_POLICIES)}"
            )
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise InputError(f"--schedule-policy: unknown schedule policy {self.schedule_policy!r}; "
                             f"valid: {', '.join(SCHEDULE_POLICIES)}")
        if self.device not in DEVICES:
            raise InputError(f"unknown device {self.device!r}; valid: {', '.join(DEVICES)}")
        if self.tree_core not in TREE_CORES:
            raise InputError(f"unknown tree core {self.tree_core!r}; valid: {', '.join(TREE_CORES)}")
        if self.kv_pool not in KV_POOLS:
            raise InputError(f"unknown KV pool {self.kv_pool!r}; valid: {', '.join(KV_POOLS)}")
        if self.default_retention not in RETENTION_POLICIES:
            raise InputError(
                f"unknown retention {self.default_retention!r}; valid: {', '.join(RETENTION_POLICIES)}"
            )
        if self.page_size <= 0 or self.page_size & (self.page_size - 1):
            raise InputError(f"page size must be a positive power of two, got {self.page_size}")
        if self.pool_tokens < 2 * self.page_size:
            raise InputError(
                f"pool of {self.pool_tokens} tokens is smaller than two pages of {self.page_size}"
            )
        if self.token_budget < self.page_size:
            raise InputError(f"--chunked-prefill-size {self.token_budget} is smaller than one page "
                             f"({self.page_size} tokens)")
        if self.max_prefill_tokens < self.page_size:
            raise InputError(f"--max-prefill-tokens {self.max_prefill_tokens} is smaller than one page "
                             f"({self.page_size} tokens)")
        if self.max_running_requests <= 0 or self.max_context_len <= 0:
            raise InputError("max running requests and max context length must be positive")
        if self.decode_quantum != 1:
            raise InputError(QUANTUM_RETIRED)
        if self.hicache_ratio is not None:
            self._validate_hicache()
        if self.tau_high is not None and not 0.0 < self.tau_high <= 1.0:
            raise InputError(f"tau_high must be in (0, 1], got {self.tau_high}")

    def _validate_hicache(self) -> None:
        import math

        if not math.isfinite(self.hicache_ratio) or self.hicache_ratio <= 0:
            raise InputError(f"--hicache-ratio must be a positive number, got {self.hicache_ratio}")
        if self.hicache_write_policy not in HICACHE_WRITE_POLICIES:
            raise InputError(f"--hicache-write-policy: unknown policy {self.hicache_write_policy!r}; "
                             f"valid: {', '.join(HICACHE_WRITE_POLICIES)}")
        if self.kv_pool != "mha":
            raise InputError("SGLang's HiCache copies K/V bytes: it needs the mha KV pool")
        if self.device != "cpu":  # the CPU stack strategy (hicache_cpu.py); not tried on a GPU
            raise InputError("SGLang's HiCache in the embedded engine runs on the CPU device only "
                             f"(got --device {self.device})")
        if self.default_retention == "offload" or self.host_capacity_tokens:
            raise InputError("--hicache-* (SGLang's HiCache) and kvctl's modeled host tier "
                             "(--retention offload, host_capacity_tokens) cannot be combined: "
                             "pick one host tier")
