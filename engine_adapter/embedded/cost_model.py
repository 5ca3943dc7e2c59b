"""Roofline cost model for the virtual clock. Every time it produces is *modeled*.

seed 003 "Chunked Prefill Scheduling": prefill is compute-bound (~2 P FLOPs per token),
decode is memory-bound (the weights, 2 P bytes at 16 bit, stream once per step, plus the
K/V rows each decoding request reads). A co-scheduled step (a prefill chunk riding along
with the decode batch) takes the slower of the two:

    t_step = max( 2 P (n_prefill + n_decode) / (F_peak * MFU * G),
                  (W_bytes + sum_r S_r * m_token) / (B_hbm * eff * G) ) + overhead

with G GPUs in tensor parallel. A host-tier reload of n tokens takes n * m_token / B_link
(seed 003 napkin math 0.6: reload = S * m_token / B).

A prefill step whose batch SGLang's HiCache loaded n_load tokens back from host for
(`ready_to_load_host_cache`, engine_adapter/embedded/hicache.py) takes the slowest of three:

    t_step = max( compute, memory, n_load * m_token / B_link ) + overhead

The load overlaps the forward: SGLang copies it layer by layer on its own host-to-device
stream (mem_cache/l2_transfer.py `L2TransferEngine.submit_host_to_device`: per layer, then
`on_layer_done(layer_id)`), and the forward waits for a layer's K/V only when its attention
reads that layer (mem_cache/memory_pool.py `MHATokenToKVPool.get_key_buffer` ->
`layer_transfer_counter.wait_until(layer_id)`, the consumer the scheduler sets from the
batch's `hicache_consumer_index`). The host link is a third resource beside the FLOPs and
HBM; the one-layer pipeline fill this leaves out is below the model's resolution.

Its sibling, a step-cost model fitted to a real server, is step_cost.py (`kvctl calibrate`,
`kvctl replay --cost-model`); `build_cost_model` there picks one of the two.
"""

from __future__ import annotations

from engine_adapter.embedded.config import CostParams


class RooflineCostModel:
    """Pure arithmetic over `CostParams`; no state."""

    def __init__(self, params: CostParams) -> None:
        self.params = params
        p = params
        self._flops_per_s = p.peak_flops_per_gpu * p.prefill_mfu * p.num_gpus
        self._bytes_per_s = p.hbm_bandwidth_per_gpu * p.decode_bandwidth_efficiency * p.num_gpus
        self._weight_bytes = p.num_params * p.weight_bytes_per_param

    label = "modeled"

    def step_seconds(self, prefill_tokens: int, decode_requests: int, decode_context_tokens: int,
                     prefill_members=None, *, loaded_tokens: int = 0) -> float:
        """Modeled duration of one forward step. `prefill_members` (the step's scheduled
        prefill requests) is the clock interface's; the roofline prices tokens only.
        `loaded_tokens`: K/V tokens HiCache loaded host -> device for this step's batch,
        overlapped with the forward (module docstring)."""
        if prefill_tokens == 0 and decode_requests == 0:
            return 0.0
        compute = 2.0 * self.params.num_params * (prefill_tokens + decode_requests) / self._flops_per_s
        memory = (
            self._weight_bytes + decode_context_tokens * self.params.kv_bytes_per_token
        ) / self._bytes_per_s
        load = self.transfer_seconds(loaded_tokens) if loaded_tokens else 0.0
        return max(compute, memory, load) + self.params.step_overhead_s

    def prefill_seconds(self, tokens: int) -> float:
        """Recompute time for `tokens` prompt tokens alone (seed 003: 2 P S / R)."""
        return 2.0 * self.params.num_params * tokens / self._flops_per_s

    def transfer_seconds(self, tokens: int) -> float:
        """Host <-> device time for `tokens` rows of K/V over the host link."""
        return tokens * self.params.kv_bytes_per_token / self.params.host_link_bandwidth

    def kv_bytes(self, tokens: int) -> int:
        return tokens * self.params.kv_bytes_per_token
