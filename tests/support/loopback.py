"""A real SGLang 0.5.23 KV cache on CPU, published on loopback the way a server publishes it.

What is SGLang's own code here: `UnifiedRadixCache` (Rust tree core) over a paged
allocator and `MHATokenToKVPool`; `ZmqEventPublisher` (PUB + ROUTER replay) fed by
`cache.take_events()`; `SchedulerMetricsCollector` fed by SGLang's
`SchedulerPoolStatsObserver`, `TokenizerMetricsCollector`, and the cache's own
`RadixCacheMetricsCollector`, rendered by prometheus_client; `/server_info` built by
`build_server_info` plus the fields `http_server.server_info` adds. What kvctl supplies:
the request bookkeeping a scheduler would do (match, allocate with eviction on failure,
insert, lock while running) and a stdlib HTTP server in place of FastAPI.

SGLang's collectors register in prometheus_client's global registry, so one process can
host one metrics-enabled LoopbackServer; build others with `metrics=False`.
TEST-ONLY (tests/support): `kvctl sandbox` is the real server for users; `python -m
support.loopback_demo` (PYTHONPATH=tests:.) runs this stand-in in a process of its own.
"""

from __future__ import annotations

import gc
import json
import shutil
import socket
import tempfile
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from support.loopback_http import LoopbackHttp
from kvctl.errors import RuntimeFailure
from kvctl.util.pages import ceil_div

TINY_LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 2, "head_dim": 16, "vocab_size": 1000,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "torch_dtype": "float32",
}  # fmt: skip
_METRICS_OWNER: list[object] = []  # the process's metrics-enabled server, if any
_COLLECTORS: list[Any] = []  # [scheduler collector, tokenizer collector], built once


@dataclass(frozen=True)
class Served:
    matched_tokens: int  # device prefix hit before this request was inserted
    inserted_tokens: int  # full pages now in the tree for this prompt


class LoopbackServer:
    """Owns the cache, publisher and HTTP server; `close()` releases all (idempotent)."""

    def __init__(
        self,
        *,
        page_size: int = 4,
        pool_tokens: int = 256,
        model_dir: str | Path | None = None,
        metrics: bool = True,
        eviction_policy: str = "lru",
        event_format: str = "default",
        buffer_steps: int = 10_000,
    ) -> None:
        import torch
        from sglang.srt import runtime_context as rtc
        from sglang.srt.disaggregation.kv_events import ZmqEventPublisher
        from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        from sglang.srt.server_args import ServerArgs

        if metrics and _METRICS_OWNER:
            raise RuntimeFailure("one metrics-enabled LoopbackServer per process (global registry)")
        self.page_size, self._buffer_steps = page_size, buffer_steps
        self._publisher = ZmqEventPublisher(
            attn_dp_rank=0, endpoint="tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*",
            buffer_steps=buffer_steps,
        )  # fmt: skip
        source = self._publisher.describe_local_source(page_size)
        self.kv_endpoint, self.replay_endpoint = source["endpoint"], source["replay_endpoint"]
        self._own_model_dir = model_dir is None  # a temp dir this server removes on close
        self._model_dir = Path(model_dir) if model_dir else _tiny_model_dir()
        self.server_args = ServerArgs(
            model_path=str(self._model_dir), device="cpu", skip_tokenizer_init=True,
            page_size=page_size, enable_metrics=metrics, radix_eviction_policy=eviction_policy,
            kv_events_config=json.dumps({
                "publisher": "zmq", "endpoint": self.kv_endpoint,
                "replay_endpoint": self.replay_endpoint, "format": event_format,
            }),
        )  # fmt: skip
        rtc.publish(self.server_args, role="scheduler", ranks=rtc.SpawnRanks(world_rank=0))
        self._req_pool = ReqToTokenPool(
            size=16, max_context_len=4096, device="cpu", enable_memory_saver=False
        )
        kv = MHATokenToKVPool(
            size=pool_tokens, page_size=page_size, dtype=torch.float32, head_num=2, head_dim=16,
            layer_num=2, device="cpu", enable_memory_saver=False,
        )  # fmt: skip
        self.allocator = PagedTokenToKVPoolAllocator(
            size=pool_tokens, page_size=page_size, dtype=torch.float32, device="cpu",
            kvcache=kv, need_sort=False,
        )  # fmt: skip
        self.cache = UnifiedRadixCache(
            params=CacheInitParams(
                disable=False, req_to_token_pool=self._req_pool,
                token_to_kv_pool_allocator=self.allocator, page_size=page_size,
                tree_components=(ComponentType.FULL,), eviction_policy=eviction_policy,
                enable_kv_cache_events=True, dynamo_kv_event_format=event_format == "dynamo",
                enable_metrics=metrics, tree_core_backend="rust",
            )
        )  # fmt: skip
        self._metrics = metrics
        if metrics:
            _METRICS_OWNER.append(self)
            self._emit_constants()
        self._held: list[Any] = []  # tree locks of "running" requests
        self._private: list[Any] = []  # slots held outside the tree
        self._served: dict[tuple, None] = {}  # (tokens, salt) of every inserted prompt
        self.batches_published = 0  # by the current publisher: the next seq it will use
        self.startup_time = time.time()
        self.http = LoopbackHttp(
            metrics=self._render_metrics if metrics else None, info=self._server_info
        )
        self.step()

    @property
    def url(self) -> str:
        return self.http.url

    # ---- what a scheduler does ------------------------------------------------------------

    def serve(
        self, tokens: Sequence[int], *, cache_salt: str | None = None, output_tokens: int = 0,
        hold: bool = False,
    ) -> Served:  # fmt: skip
        """Admit one prompt: match, allocate (evicting on failure), insert its full pages.

        `hold=True` keeps the request running (its path locked) until `release_all()`;
        otherwise it finishes at once and is counted by the tokenizer collector.
        """
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams, MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        aligned = len(tokens) // self.page_size * self.page_size
        key = RadixKey(array("q", tokens[:aligned]), cache_salt=cache_salt)
        matched = self.cache.match_prefix(MatchPrefixParams(key=key)).device_prefix_len
        if aligned:
            value = self._alloc(aligned)
            self.cache.insert(InsertParams(key=key, value=value))  # frees duplicate slots
            self._served[(tuple(tokens[:aligned]), cache_salt)] = None
        if hold and aligned:
            node = self.cache.match_prefix(MatchPrefixParams(key=key)).last_device_node
            self._held.append((self.cache.lock(node), len(tokens), matched, output_tokens))
        else:
            self._finished(len(tokens), matched, output_tokens)
        self.step()
        return Served(matched_tokens=matched, inserted_tokens=aligned)

    def hold_private(self, tokens: int) -> None:
        """Allocate slots outside the tree (a running request's uncached tail)."""
        pages = ceil_div(tokens, self.page_size)
        self._private.append(self._alloc(pages * self.page_size))
        self.step()

    def release_all(self) -> None:
        """Finish every held request and free private slots."""
        for lock, prompt, matched, output in self._held:
            self.cache.unlock(lock)
            self._finished(prompt, matched, output)
        for value in self._private:
            self.allocator.free(value)
        self._held, self._private = [], []
        self.step()

    def evict(self, tokens: int) -> int:
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        evicted = self.cache.evict(EvictParams(num_tokens=tokens)).num_tokens_evicted
        self.step()
        return evicted

    def flush(self) -> None:
        """SGLang's /flush_cache on an idle server: reset the tree and the allocator."""
        if self._held or self._private:
            raise RuntimeFailure("flush needs an idle server (release_all first)")
        self.cache.reset()
        self.allocator.clear()
        self.step()

    def step(self) -> None:
        """End of a scheduler step: publish queued KV events, refresh the pool gauges."""
        from sglang.srt.disaggregation.kv_events import KVEventBatch

        events = self.cache.take_events()
        if events:
            self._publisher.publish(KVEventBatch(ts=time.time(), events=events))
            self.batches_published += 1
        if self._metrics:
            self._log_stats()

    def wait_published(self, timeout_s: float = 10.0) -> bool:
        """Block until SGLang's publisher thread has sent and buffered every batch `step`
        queued (its queue drained); True if it did within `timeout_s`. `publish` only
        enqueues, so a subscriber attaching right after a step may otherwise find the replay
        buffer behind (seen under load: a buffer that had not rolled over yet)."""
        queue = self._publisher._event_queue  # SGLang 0.5.23's queue; task_done per batch
        deadline = time.monotonic() + timeout_s
        while queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    # ---- faults ---------------------------------------------------------------------------

    def restart_publisher(self) -> None:
        """A new ZmqEventPublisher on the same ports: sequence numbers start at 0 again."""
        import zmq
        from sglang.srt.disaggregation.kv_events import ZmqEventPublisher

        self._publisher.shutdown()
        deadline = time.monotonic() + 10.0
        # libzmq closes the old listeners asynchronously (its reaper thread): wait for both
        # ports, and retry if a bind still races it.
        while not all(_port_free(e) for e in (self.kv_endpoint, self.replay_endpoint)):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        while True:
            try:
                self._publisher = ZmqEventPublisher(
                    attn_dp_rank=0, endpoint=self.kv_endpoint,
                    replay_endpoint=self.replay_endpoint, buffer_steps=self._buffer_steps,
                    bind=True,
                )  # fmt: skip
                break
            except zmq.ZMQError as err:
                if err.errno != zmq.EADDRINUSE or time.monotonic() > deadline:
                    raise
            gc.collect()  # closes the half-built publisher's bound PUB socket
            time.sleep(0.05)
        self.batches_published = 0

    def restart(self) -> None:
        """The whole server restarts: empty cache, fresh publisher, new startup_time."""
        self.release_all()
        self.restart_publisher()
        self.cache.reset()
        self.allocator.clear()
        self.startup_time = time.time()
        self.step()

    # ---- oracle ---------------------------------------------------------------------------

    def resident_block_hashes(self) -> frozenset[int]:
        """Event hashes of every page the tree holds, from the tree's own matches and
        SGLang's own hash function (independent of the event stream)."""
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey
        from sglang.srt.mem_cache.utils import get_hash_str, hash_str_to_int64

        hashes: set[int] = set()
        for tokens, salt in self._served:
            key = RadixKey(array("q", tokens), cache_salt=salt)
            resident = self.cache.match_prefix(MatchPrefixParams(key=key)).device_prefix_len
            if not resident:
                continue
            prior = _salt_prior(salt)
            pages = get_hash_str(list(tokens[:resident]), prior, page_size=self.page_size)
            hashes.update(hash_str_to_int64(h) for h in pages)
        return frozenset(hashes)

    def close(self) -> None:
        self.http.close()
        if self._publisher is not None:
            self._publisher.shutdown()
            self._publisher = None
        if self._own_model_dir:
            shutil.rmtree(self._model_dir, ignore_errors=True)

    # ---- internals ------------------------------------------------------------------------

    def _alloc(self, tokens: int):
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        value = self.allocator.alloc(tokens)
        if value is None:  # the scheduler evicts on allocation failure, then retries
            self.cache.evict(EvictParams(num_tokens=tokens - self.allocator.available_size()))
            value = self.allocator.alloc(tokens)
        if value is None:
            raise RuntimeFailure(f"loopback pool cannot hold {tokens} more tokens")
        return value

    def _finished(self, prompt: int, matched: int, output: int) -> None:
        if self._metrics:
            tokenizer = _COLLECTORS[1]
            tokenizer.observe_one_finished_request(
                labels=tokenizer.labels, prompt_tokens=prompt, generation_tokens=output,
                cached_tokens=matched, e2e_latency=0.0, has_grammar=False,
            )  # fmt: skip

    def _log_stats(self) -> None:
        from sglang.srt.managers.scheduler_components.pool_stats_observer import (
            SchedulerPoolStatsObserver,
        )
        from sglang.srt.observability.metrics_collector import QueueCount, SchedulerStats

        observer = SchedulerPoolStatsObserver(
            tree_cache=self.cache, token_to_kv_pool_allocator=self.allocator,
            req_to_token_pool=self._req_pool, session_controller=None, hisparse_coordinator=None,
            is_hybrid_swa=False, is_hybrid_ssm=False, enable_hisparse=False,
            full_tokens_per_layer=None, swa_tokens_per_layer=None,
            max_total_num_tokens=self.allocator.size,
        )  # fmt: skip
        stats = SchedulerStats(num_running_reqs=QueueCount(total=len(self._held)))
        observer.get_pool_stats().update_scheduler_stats(stats)
        _COLLECTORS[0].log_stats(stats)

    def _emit_constants(self) -> None:
        from sglang.srt.observability.metrics_collector import (
            SchedulerMetricsCollector,
            TokenizerMetricsCollector,
            tokenizer_metric_labels,
        )

        if not _COLLECTORS:
            context = SchedulerMetricsCollector.init_new(
                server_args=self.server_args, enable_priority_scheduling=False,
                enable_lora=False, enable_hierarchical_cache=False,
            )  # fmt: skip
            labels = tokenizer_metric_labels()
            _COLLECTORS.extend(
                [context.collector, TokenizerMetricsCollector(self.server_args, labels=labels)]
            )
        _COLLECTORS[0].emit_constants(
            max_total_num_tokens=self.allocator.size, max_total_num_tokens_swa=None,
            weight_memory_usage_gb=0.0, kv_cache_memory_usage_gb=0.0, graph_memory_usage_gb={},
            max_running_requests_under_SLO=None, page_size=self.page_size,
            num_pages=self.allocator.size // self.page_size, context_len=4096,
            startup_available_gpu_memory_gb=0.0,
        )  # fmt: skip

    def _render_metrics(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

        return generate_latest(REGISTRY), CONTENT_TYPE_LATEST

    def _server_info(self) -> dict[str, Any]:
        import sglang
        from sglang.srt.utils.common import build_server_info
        from sglang.srt.utils.msgspec_utils import msgspec_to_builtins

        scheduler_info = {
            "status": "ready", "max_total_num_tokens": self.allocator.size,
            "max_req_input_len": 4096 - 1, "startup_time": self.startup_time,
        }  # fmt: skip
        info = build_server_info(self.server_args, scheduler_info)
        info.update(
            startup_time=self.startup_time, internal_states=[], version=sglang.__version__,
            frontend="python",
        )  # fmt: skip
        return msgspec_to_builtins(info)


def _port_free(endpoint: str) -> bool:
    """Whether a tcp://127.0.0.1:PORT endpoint can be bound right now."""
    port = int(endpoint.rsplit(":", 1)[1])
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _salt_prior(salt: str | None) -> str | None:
    import hashlib

    if salt is None:
        return None
    return hashlib.sha256(b"sglang-cache-salt-v1\0" + salt.encode("utf-8")).hexdigest()


def _tiny_model_dir() -> Path:
    directory = Path(tempfile.mkdtemp(prefix="kvctl-tiny-llama-"))
    (directory / "config.json").write_text(json.dumps(TINY_LLAMA_CONFIG))
    return directory
