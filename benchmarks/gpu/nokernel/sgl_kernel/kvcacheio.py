"""CHECK-ONLY sentinels: SGLang's HiCache host-transfer imports (mem_cache/memory_pool_host.py)."""

from sgl_kernel._sentinel import install

install(__name__, (
    "transfer_kv_all_layer", "transfer_kv_all_layer_direct_lf_pf", "transfer_kv_all_layer_lf_pf",
    "transfer_kv_all_layer_lf_ph", "transfer_kv_all_layer_mla", "transfer_kv_all_layer_mla_lf_pf",
    "transfer_kv_direct", "transfer_kv_per_layer", "transfer_kv_per_layer_direct_pf_lf",
    "transfer_kv_per_layer_mla", "transfer_kv_per_layer_mla_pf_lf", "transfer_kv_per_layer_pf_lf",
    "transfer_kv_per_layer_ph_lf",
))
