"""What a sandbox server is started with (pure: no I/O).

Each field maps onto one `sglang.launch_server` argument or one KVCTL_PLUGIN_* variable;
`check()` refuses what SGLang would refuse only after a minute of start-up, naming the option.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvctl.errors import InputError

# sglang/srt/arg_groups/choices.py RADIX_EVICTION_POLICY_CHOICES (0.5.23): the server's own
# list (kvctl replay knows more policies: the server refuses fifo, mru and filo).
SERVER_EVICTION_POLICIES = ("lru", "lfu", "slru", "priority", "tlru")
# sglang/srt/arg_groups/fields/schedule.py `schedule_policy` choices (0.5.23).
SCHEDULE_POLICIES = ("fcfs", "lpm", "random", "dfs-weight", "lof", "priority", "routing-key",
                     "hrrn", "shortest-prefill-first")
MAX_DP = 16  # one CPU core per rank (SGLANG_CPU_OMP_THREADS_BIND)
# sglang/srt/arg_groups/fields/memory.py `hicache_write_policy` choices (0.5.23).
HICACHE_WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
# The only I/O backend and layout the sandbox's CPU strategy implements (hicache_cpu.py).
HICACHE_CPU_FLAGS = ("--hicache-io-backend", "direct", "--hicache-mem-layout", "layer_first")


@dataclass(frozen=True, kw_only=True)
class SandboxConfig:
    """port 0: pick free ports. plugin_port 0: a free block of dp_size ports (else that base)."""

    page_size: int = 4
    pool_tokens: int = 4096
    context_length: int = 1024
    max_running: int | None = 8  # None: no flag, SGLang resolves its own (resolve_max_num_reqs)
    dp_size: int = 1
    eviction: str = "lru"
    schedule_policy: str = "fcfs"
    plugin: bool = True
    record: bool = False
    # the model dir's one-character-per-id tokenizer (tokenizer.py): requests may carry text;
    # False keeps `--skip-tokenizer-init` (input_ids only, output_ids in replies)
    tokenizer: bool = False
    host: str = "127.0.0.1"
    port: int = 30000
    plugin_port: int = 30100
    plugin_ledger_s: float = 0.5
    hicache_ratio: float | None = None  # SGLang's HiCache host pool = ratio x the device pool
    hicache_write_policy: str = "write_through"
    extra_args: tuple[str, ...] = ()
    extra_env: dict[str, str] = field(default_factory=dict)

    def check(self) -> None:
        """InputError naming the option, before anything starts."""
        if self.page_size < 1:
            raise InputError(f"--page-size must be at least 1, got {self.page_size}")
        if self.pool_tokens < 2 * self.page_size:
            raise InputError(f"--pool-tokens {self.pool_tokens} holds fewer than two pages of "
                             f"{self.page_size}; give at least {2 * self.page_size}")
        if self.context_length < 2 * self.page_size:
            raise InputError(f"--context-length {self.context_length} holds fewer than two "
                             f"pages of {self.page_size}")
        if not 1 <= self.dp_size <= MAX_DP:
            raise InputError(f"--dp-size must be between 1 and {MAX_DP}, got {self.dp_size}")
        if self.eviction not in SERVER_EVICTION_POLICIES:
            raise InputError(f"--eviction {self.eviction!r} is not one SGLang's server takes; "
                             f"valid: {', '.join(SERVER_EVICTION_POLICIES)}")
        if self.hicache_ratio is not None and not (self.hicache_ratio > 1.0
                                                   and self.hicache_ratio < float("inf")):
            # pool_host/base.py: a host pool no larger than the device pool is useless (SGLang
            # warns and runs); kvctl refuses it up front, before a minute of start-up
            raise InputError(f"--hicache-ratio must be a finite number above 1 (host pool = "
                             f"ratio x device pool), got {self.hicache_ratio}")
        if self.hicache_write_policy not in HICACHE_WRITE_POLICIES:
            raise InputError(f"--hicache-write-policy {self.hicache_write_policy!r} is unknown; "
                             f"valid: {', '.join(HICACHE_WRITE_POLICIES)}")
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise InputError(f"--schedule-policy {self.schedule_policy!r} is unknown; "
                             f"valid: {', '.join(SCHEDULE_POLICIES)}")

    def server_args(self, *, port: int, events: dict) -> list[str]:
        """The `sglang.launch_server` arguments after `--model-path DIR`."""
        import json

        return [
            "--load-format", "dummy", *self._tokenizer_args(), "--device", "cpu",
            "--attention-backend", "torch_native", "--disable-cuda-graph",
            "--host", self.host, "--port", str(port),
            "--page-size", str(self.page_size), "--max-total-tokens", str(self.pool_tokens),
            # --max-total-tokens sizes the pool; the fraction is only SGLang's check that
            # memory did not shrink while it loaded (other processes, other DP ranks)
            "--context-length", str(self.context_length), "--mem-fraction-static", "0.3",
            *self._max_running_args(), "--enable-metrics",
            "--radix-eviction-policy", self.eviction, "--schedule-policy", self.schedule_policy,
            "--dp-size", str(self.dp_size),
            # SGLang's warm-up races a readiness flush; SandboxServer.start sends its own
            "--skip-server-warmup",
            # an idle scheduler otherwise spins its loop at full speed: half a core per idle
            # server on a 2-core machine, taken from the servers that do work (a fleet, the
            # e2e tests' shared servers). SGLang's IdleSleeper polls the request sockets
            # (wakes at once on a request) and runs on_idle once a second while idle.
            "--sleep-on-idle",
            "--kv-events-config", json.dumps(events), *self._hicache_args(), *self.extra_args,
        ]  # fmt: skip

    def _tokenizer_args(self) -> tuple[str, ...]:
        """Nothing: SGLang loads the model dir's tokenizer (kvctl/sandbox/tokenizer.py);
        else --skip-tokenizer-init."""
        return () if self.tokenizer else ("--skip-tokenizer-init",)

    def _max_running_args(self) -> tuple[str, ...]:
        """--max-running-requests, or nothing: a stock server's own resolution
        (`engine_adapter.embedded.config.sglang_default_max_running` states it)."""
        if self.max_running is None:
            return ()
        return ("--max-running-requests", str(self.max_running))

    def _hicache_args(self) -> list[str]:
        """SGLang's HiCache flags (docs/hicache.md), with the only I/O backend and memory layout
        the sandbox's CPU strategy implements; none without --hicache-ratio."""
        if self.hicache_ratio is None:
            return []
        return ["--enable-hierarchical-cache", "--hicache-ratio", f"{self.hicache_ratio:g}",
                "--hicache-write-policy", self.hicache_write_policy, *HICACHE_CPU_FLAGS]
