"""The glossary: every term kvctl's tables print, with its formula and the seed section.

`kvctl explain TERM` prints one entry; docs/glossary.md is `kvctl explain --markdown`
(tests/unit/test_explain.py keeps the two equal). Seed references: "seed 000 0x07A" is
section 0x07A of ../shared/seeds/000_425ba78b93b8668f.txt (KV layout, exact reuse, funnel);
"seed 003 eq. (8)" and "napkin math 0.7" are in 003_f72facbfe172683e.txt (agent workloads,
sizing, telemetry).
"""

from __future__ import annotations

from dataclasses import dataclass

FOOTER = "Terms: kvctl explain TERM, or docs/glossary.md"


@dataclass(frozen=True)
class Term:
    """One glossary entry: its name, other spellings, meaning, formula and source."""

    name: str
    group: str
    meaning: str
    formula: str = ""
    seed: str = ""
    aliases: tuple[str, ...] = ()


_STAGE = "prefix-hit funnel stage"
_BUCKET = "funnel rejection bucket"
_LEDGER = "pool ledger"
_SIZING = "sizing and planning"
_REUSE = "prefix reuse"
_SEEDS = "seed references"

TERMS: tuple[Term, ...] = (
    # ----- utilization and hits ---------------------------------------------------------
    Term("U_KV", _LEDGER, "KV cache utilization: the share of the pool's blocks allocated, "
         "evictable cached blocks included. The admission ceiling tau_high is set on it.",
         "U_KV = N_allocated_blocks / N_total_blocks = (N_pool - N_free) / N_pool",
         "seed 003 eq. (8)", ("ukv", "kv utilization", "utilization")),
    Term("token_usage", _LEDGER, "SGLang's own utilization gauge. It counts evictable tokens "
         "as free, so it reads low while U_KV is near 1; the gap is the evictable share.",
         "token_usage = (N_pool - N_free - N_evictable) / N_pool", "SGLang scheduler metrics",
         ("token usage",)),
    Term("H_prefix", _REUSE, "Token prefix-hit rate: prompt tokens served from the cache over "
         "all prompt tokens admitted.", "H_prefix = sum S_match / sum S_prompt",
         "seed 003 eq. (2)", ("hit rate", "token hit rate", "hprefix")),
    Term("tau_high", _SIZING, "Admission ceiling: new turns are admitted only while U_KV <= "
         "tau_high (default 0.88); above it they wait in a queue.",
         "admit while U_KV <= tau_high", "seed 003 Figure 12", ("tau", "admission ceiling")),
    # ----- the four prefix lengths ------------------------------------------------------
    Term("S_prompt", _REUSE, "Length of the request's prompt in tokens.", "",
         "seed 000 0x07A"),
    Term("S_sem", _REUSE, "Longest semantically exact token prefix: the longest prefix whose "
         "K/V any earlier request of a compatible namespace and model generation computed.",
         "0 <= S_runtime <= min(S_sem, S_indexed, S_cap) <= S_prompt", "seed 000 0x07A",
         ("semantic prefix",)),
    Term("S_indexed", _REUSE, "Longest contiguous compatible prefix present in the index "
         "(SGLang's radix tree on device, plus what the host tier can supply).", "",
         "seed 000 0x07A"),
    Term("S_cap", _REUSE, "Largest prefix the execution path may reuse: one token short of "
         "the prompt, since the last prompt row must run to produce logits.",
         "S_cap = S_prompt - 1", "seed 000 0x07A"),
    Term("S_runtime", _REUSE, "Prefix rows the runtime actually reused (block aligned).",
         "S_runtime = P * floor(min(S_sem, S_indexed, S_prompt - 1) / P)", "seed 000 0x07A"),
    Term("S_recompute", _REUSE, "Prompt tokens prefilled again.", "S_recompute = S_prompt - S_runtime",
         "seed 000 0x07A"),
    # ----- funnel stages ----------------------------------------------------------------
    Term("funnel", _STAGE, "The prefix-hit funnel: requests >= authorized >= candidates >= "
         "compatible >= current_generation >= leased >= mapped >= snapshot_current >= "
         "executed_hits. Each request that drops out between two stages is counted in exactly "
         "one rejection bucket, in requests and in tokens. A stage the engine cannot observe "
         "reads 'not observable', never 100%.", "", "seed 000 0x0CF", ("prefix-hit funnel",)),
    Term("requests", _STAGE, "Every request admitted.", "", "seed 000 0x0CF"),
    Term("authorized", _STAGE, "Requests whose lookup is authorized for their namespace before "
         "the tree is consulted.", "", "seed 000 0x0CE, 0x0CF"),
    Term("candidates", _STAGE, "Requests for which some namespace or generation ever computed "
         "a prefix.", "", "seed 000 0x0CF"),
    Term("compatible", _STAGE, "Candidates whose prefix exists in their own namespace "
         "(tenant, adapter, extra_key, cache_salt).", "", "seed 000 0x0CF"),
    Term("current_generation", _STAGE, "Compatible prefixes computed by the current model "
         "generation.", "", "seed 000 0x0CF"),
    Term("leased", _STAGE, "Prefixes still resident and locked for the request (lock_ref taken).",
         "", "seed 000 0x0CF, 0x08D"),
    Term("mapped", _STAGE, "Leased prefixes whose K/V is resident on device when the forward "
         "pass needs it (host-tier reloads complete).", "", "seed 000 0x06, 0x0CF"),
    Term("snapshot_current", _STAGE, "Mapped hits still valid at execution (no generation bump "
         "while a reload was in flight).", "", "seed 000 0x0CD, 0x0CF"),
    Term("executed_hits", _STAGE, "Hits the forward pass actually used (S_runtime > 0).", "",
         "seed 000 0x0CF"),
    # ----- rejection buckets -------------------------------------------------------------
    Term("unauthorized_namespace", _BUCKET, "Refused before the tree is consulted: the "
         "request may not look in that namespace (requests -> authorized).", "", "seed 000 0x0CE"),
    Term("index_miss", _BUCKET, "No namespace or generation ever computed this prefix "
         "(authorized -> candidates).", "", "seed 000 0x0CF"),
    Term("incompatible_namespace", _BUCKET, "Only another tenant or adapter holds the prefix "
         "(candidates -> compatible).", "", "seed 000 0x0CE, 0x0CF"),
    Term("stale_generation", _BUCKET, "Only an older model generation holds it "
         "(compatible -> current_generation).", "", "seed 000 0x0CF"),
    Term("evicted", _BUCKET, "Computed here before, no longer resident, nothing to lock "
         "(current_generation -> leased).", "", "seed 000 0x08E, 0x0CF"),
    Term("mapping_lag", _BUCKET, "Resident only in the host tier and the reload was not "
         "complete (leased -> mapped). See L_map.", "", "seed 000 0x06, 0x0CF"),
    Term("stale_snapshot", _BUCKET, "Invalidated between admission and execution "
         "(mapped -> snapshot_current).", "", "seed 000 0x0CD"),
    Term("not_executed", _BUCKET, "Admitted with a hit the forward pass did not use "
         "(snapshot_current -> executed_hits).", "", "seed 000 0x0CF"),
    # ----- the pool ledger and reconciliation ----------------------------------------------
    Term("N_pool", _LEDGER, "The pool partition every snapshot reconciles; any residual is a "
         "leak (> 0) or a double count (< 0), reported with the numbers.",
         "N_pool = N_free + N_evictable + N_protected + N_private (+ residual)",
         "seed 000 0x0CF", ("pool ledger", "ledger", "residual")),
    Term("N_free", _LEDGER, "Slots the allocator can hand out now (its available size).", "",
         "seed 000 0x0CF", ("free",)),
    Term("N_evictable", _LEDGER, "Slots held by cached tree nodes with lock_ref 0: reusable by "
         "a prefix hit, reclaimable by eviction.", "", "seed 000 0x0CF, 0x08E", ("evictable",)),
    Term("N_protected", _LEDGER, "Slots held by tree nodes some live request has locked.", "",
         "seed 000 0x08D, 0x0CF", ("protected",)),
    Term("N_private", _LEDGER, "Slots live requests hold outside the tree (their unshared "
         "tails).", "", "seed 000 0x0CF", ("private",)),
    Term("delta_ref", _LEDGER, "Per tree node, recorded lock_ref minus the count derived from "
         "live leases (requests whose locked path includes the node). Non-zero after a step is "
         "an ownership-integrity alert naming the node and the request.",
         "delta_ref = recorded - derived", "seed 000 0x04B, 0x08D", ("lock_ref", "refcount")),
    Term("L_map", _LEDGER, "Mapping lag: K/V that must be resident before a forward pass can "
         "run but is not yet (a host-tier reload after a tool wait).",
         "L_map = max(0, f_required - f_ready)", "seed 000 0x06, 0x0CF", ("mapping lag",)),
    # ----- sizing and planning -----------------------------------------------------------
    Term("m_token", _SIZING, "KV bytes per token: whole model, or per device of a TP x PP "
         "replica (SGLang's cell_size).", "m_token = 2 * L * H_kv * d_head * b",
         "seed 003 eq. (1)", ("bytes per token", "cell_size")),
    Term("reserve", _SIZING, "Memory per device kept for activations, CUDA context, NCCL "
         "buffers and graphs (--reserve-gb, default 4.5 GB).",
         "M_KV = C_HBM - (M_weights + M_activations + M_runtime)", "seed 003 eq. (3)-(5), "
         "napkin math 0.7", ("runtime reserve", "runtime-gb", "reserve-gb")),
    Term("headroom", _SIZING, "Share of the pool's tokens the allocator keeps free when "
         "counting trajectories (--headroom, default 0.10).",
         "usable = floor(capacity * (1 - headroom))", "seed 003 eq. (7), napkin math 0.7"),
    Term("sigma", _SIZING, "Sharing factor: the share of a trajectory's context held once as "
         "a shared prefix.", "B = floor((usable - S_shared) / ((1 - sigma) M + K))",
         "seed 003 eq. (7)", ("sharing factor",)),
    Term("tool wait", _SIZING, "Time a trajectory is paused while a tool runs. By Little's law "
         "it sets how many trajectories sit parked at once, which sizes a host tier (HiCache).",
         "parked = running * T_tool_wait / T_generation", "seed 003 napkin math 0.6",
         ("tool-wait-seconds", "little's law")),
    Term("T*", _SIZING, "Offload break-even wait: offloading pays off for waits longer than the "
         "round trip (offload + reload) over the link.", "T* = 2 * S * m_token / B_link",
         "seed 003 section 6, Figure 10", ("break-even",)),
    # ----- how seeds are cited -------------------------------------------------------------
    Term("seed 000", _SEEDS, "../shared/seeds/000_425ba78b93b8668f.txt, cited by hexadecimal "
         "section: 0x02G tail waste, 0x03F a checked address, 0x04B refcounts from "
         "reachability, 0x05A copy-on-write cost, 0x06 vAttention and mapping, 0x07A the four "
         "prefix lengths, 0x08D lock references, 0x09 block size as a cost vector, 0x0BI shared "
         "prefix execution, 0x0CE isolation, 0x0CF observability and the funnel, 0x0D the worked "
         "ledger.", "", "seed 000", ("000", "0x0cf", "0x07a")),
    Term("seed 003", _SEEDS, "../shared/seeds/003_f72facbfe172683e.txt, cited by equation "
         "and napkin math: eq. (1) m_token, (2) H_prefix, (3)-(5) the HBM split, (6)-(7) "
         "concurrency unshared and shared, (8) U_KV; napkin math 0.1 trajectories per node, "
         "0.2 static reservation, 0.3 blocks at TP=8, 0.4 prefix-reuse TTFT, 0.5 chunked "
         "prefill, 0.6 a 45 s tool wait, 0.7 an 8-GPU agent swarm; Table 7, Figures 10 and 12.",
         "", "seed 003", ("003", "napkin math", "napkin")),
)
