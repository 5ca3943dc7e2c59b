"""A small SGLang /metrics exposition for unit tests that build a remote snapshot: a
1,024-token pool (600 free, 300 evictable, 124 in use), 10 requests, 2,000 prompt tokens of
which 1,500 were served from the device cache."""

SMALL_SERVER_METRICS = """
sglang:max_total_num_tokens{tp_rank="0"} 1024.0
sglang:kv_available_tokens{tp_rank="0"} 600.0
sglang:kv_evictable_tokens{tp_rank="0"} 300.0
sglang:kv_used_tokens{tp_rank="0"} 124.0
sglang:num_requests_total{is_streaming="false"} 10.0
sglang:prompt_tokens_total{is_streaming="false"} 2000.0
sglang:cached_tokens_total{cache_source="device"} 1500.0
"""
