"""Everything `kvctl size` reports, computed from one SizeRequest. Pure: no I/O, no printing.

Conventions: "per rank" numbers are for one GPU of one model replica (the busiest rank
under PP); "node" numbers multiply by the GPUs (`gpus`) or by the replicas
(gpus / (TP*PP)) for trajectory counts. Trajectory footprints cap sliding-window layers at
their window; the `uncapped` twins are what a pool that stores every token in every layer
(SGLang's default pool) needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvctl.errors import InputError
from kvctl.sizing import paging, pool
from kvctl.sizing.dtypes import canonical_dtype
from kvctl.sizing.geometry import ModelGeometry
from kvctl.sizing.hardware import GpuSpec

# Seed 003 napkin math 0.1 (20 GB for an 8-GPU node) and 0.3 (2.5 GB per GPU).
DEFAULT_RESERVE_BYTES = 2_500_000_000
DEFAULT_CONTEXTS = (8192, 32768, 131072)


@dataclass(frozen=True, kw_only=True)
class SizeRequest:
    """Inputs of one sizing. `weights_bytes` is the whole model (split over TP*PP);
    `reserve_bytes` is per GPU; `mem_fraction_static` switches to SGLang's budget rule."""

    model: ModelGeometry
    gpu: GpuSpec
    contexts: tuple[int, ...]
    gpus: int | None = None
    tp: int = 1
    pp: int = 1
    kv_dtype: str | None = None
    weight_dtype: str | None = None
    weights_bytes: int | None = None
    reserve_bytes: int = DEFAULT_RESERVE_BYTES
    mem_fraction_static: float | None = None
    page_size: int = 16
    batch: int | None = None
    mean_length: int | None = None


@dataclass(frozen=True, kw_only=True)
class ModelSummary:
    """The geometry facts the report shows (ModelGeometry minus the per-layer list)."""

    name: str
    source: str
    architecture: str | None
    attention: str
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    kv_lora_rank: int | None
    qk_rope_head_dim: int | None
    sliding_window: int | None
    sliding_layers: int
    num_params: int | None
    max_context: int


@dataclass(frozen=True, kw_only=True)
class ContextRow:
    """One --context value: footprints, concurrency, tail share, static vs paged."""

    context: int
    trajectory_bytes_model: int
    trajectory_bytes_per_rank: int
    trajectory_bytes_uncapped_per_rank: int
    pages_per_trajectory: int
    max_trajectories: int
    max_trajectories_uncapped: int
    tail_share_at_max: float
    static_vs_paged: paging.StaticVsPaged | None


@dataclass(frozen=True, kw_only=True)
class SizeReport:
    """The `kvctl size` result; `to_jsonable` of it is the --json document."""

    model: ModelSummary
    gpu: GpuSpec
    gpus: int
    tp: int
    pp: int
    replicas: int
    kv_dtype: str
    weight_dtype: str
    weights_source: str
    kv_heads_per_rank: int
    bytes_per_token_model: int
    bytes_per_token_per_rank: int
    budget: pool.PoolBudget
    pool_bytes_node: int
    page_size: int
    page_bytes_per_rank: int
    pool_tokens_per_rank: int
    pool_pages_per_rank: int
    tail_slots_per_sequence: float
    tail_bytes_per_sequence_per_rank: float
    batch_tail: paging.TailWaste | None
    contexts: tuple[ContextRow, ...]
    notes: tuple[str, ...]


def default_contexts(model: ModelGeometry) -> tuple[int, ...]:
    """8K/32K/128K where the model's window allows, else its window alone."""
    fitting = tuple(c for c in DEFAULT_CONTEXTS if c <= model.max_context)
    return fitting or (model.max_context,)


def build_size_report(request: SizeRequest) -> SizeReport:
    """Compute the whole report. Raises InputError for any impossible input."""
    model, tp, pp = request.model, request.tp, request.pp
    kv_heads = model.kv_heads_per_rank(tp)
    stages = model.pipeline_stages(pp)
    gpus = request.gpus if request.gpus is not None else tp * pp
    if gpus < 1:
        raise InputError(f"--gpus must be positive, got {gpus}")
    if gpus % (tp * pp):
        raise InputError(f"--gpus {gpus} is not a multiple of TP*PP = {tp * pp}")
    if not request.contexts:
        raise InputError("give at least one --context")
    if request.page_size < 1:
        raise InputError(f"--page-size must be positive, got {request.page_size}")
    if request.mean_length is not None and request.mean_length > max(request.contexts):
        raise InputError(f"--mean-length {request.mean_length:,} exceeds every --context "
                         f"(the static reservation must hold the mean)")
    kv_dtype = canonical_dtype(request.kv_dtype or model.dtype)
    weight_dtype = canonical_dtype(request.weight_dtype or model.weight_dtype)

    budget, weights_source = _budget(request, weight_dtype)
    row_model = model.model_bytes_per_token(kv_dtype)
    row_rank = model.bytes_per_token(kv_dtype, tp, pp)
    page = request.page_size
    replicas = gpus // (tp * pp)

    rows = tuple(_context_row(request, context, kv_dtype, budget.pool_bytes, replicas)
                 for context in request.contexts)
    batch_tail = None
    if request.batch is not None:
        if request.batch < 1:
            raise InputError(f"--batch must be positive, got {request.batch}")
        batch_tail = paging.tail_waste(request.batch, page, row_rank, budget.pool_bytes)
    return SizeReport(
        model=_summary(model),
        gpu=request.gpu,
        gpus=gpus,
        tp=tp,
        pp=pp,
        replicas=replicas,
        kv_dtype=kv_dtype,
        weight_dtype=weight_dtype,
        weights_source=weights_source,
        kv_heads_per_rank=kv_heads,
        bytes_per_token_model=row_model,
        bytes_per_token_per_rank=row_rank,
        budget=budget,
        pool_bytes_node=budget.pool_bytes * gpus,
        page_size=page,
        page_bytes_per_rank=paging.page_bytes(row_rank, page),
        pool_tokens_per_rank=pool.pool_tokens(budget.pool_bytes, row_rank, page),
        pool_pages_per_rank=pool.pool_pages(budget.pool_bytes, row_rank, page),
        tail_slots_per_sequence=paging.expected_tail_slots(page),
        tail_bytes_per_sequence_per_rank=paging.expected_tail_slots(page) * row_rank,
        batch_tail=batch_tail,
        contexts=rows,
        notes=_notes(request, kv_dtype, kv_heads, len(stages), weights_source),
    )


def _budget(request: SizeRequest, weight_dtype: str) -> tuple[pool.PoolBudget, str]:
    model, tp, pp = request.model, request.tp, request.pp
    if request.weights_bytes is not None:
        if request.weights_bytes < 0:
            raise InputError(
                f"--weights-gb must not be negative, got {request.weights_bytes} bytes"
            )
        weights = -(-request.weights_bytes // (tp * pp))
        source = "given (--weights-gb), split over TP*PP"
    elif model.num_params is None:
        raise InputError(
            f"{model.name}: parameter count unknown for this layout; give --weights-gb"
        )
    else:
        weights = pool.weights_per_rank(model.num_params, weight_dtype, tp, pp)
        source = f"{model.num_params:,} params x {weight_dtype} / (TP*PP) (seed 003 eq. (4))"
    hbm = request.gpu.hbm_bytes
    if request.mem_fraction_static is not None:
        return pool.sglang_budget(hbm, weights, request.mem_fraction_static), source
    return pool.reserve_budget(hbm, weights, request.reserve_bytes), source


def _context_row(
    request: SizeRequest, context: int, kv_dtype: str, pool_bytes: int, replicas: int
) -> ContextRow:
    model, tp, pp, page = request.model, request.tp, request.pp, request.page_size
    capped = model.trajectory_bytes(context, kv_dtype, tp, pp)
    uncapped = model.trajectory_bytes_uncapped(context, kv_dtype, tp, pp)
    row_rank = model.bytes_per_token(kv_dtype, tp, pp)
    per_replica = pool.max_trajectories(pool_bytes, capped)
    comparison = None
    if request.mean_length is not None and request.mean_length <= context:
        comparison = paging.static_vs_paged(
            context, request.mean_length, page, row_rank, pool_bytes
        )
    return ContextRow(
        context=context,
        trajectory_bytes_model=model.trajectory_bytes(context, kv_dtype),
        trajectory_bytes_per_rank=capped,
        trajectory_bytes_uncapped_per_rank=uncapped,
        pages_per_trajectory=paging.pages_for(context, page),
        max_trajectories=per_replica * replicas,
        max_trajectories_uncapped=pool.max_trajectories(pool_bytes, uncapped) * replicas,
        tail_share_at_max=paging.tail_waste(per_replica, page, row_rank, pool_bytes).share_of_pool,
        static_vs_paged=comparison,
    )


def _summary(model: ModelGeometry) -> ModelSummary:
    return ModelSummary(
        name=model.name,
        source=model.source,
        architecture=model.architecture,
        attention=model.attention,
        num_layers=model.num_layers,
        num_attention_heads=model.num_attention_heads,
        num_kv_heads=model.num_kv_heads,
        head_dim=model.head_dim,
        v_head_dim=model.v_head_dim,
        kv_lora_rank=model.kv_lora_rank,
        qk_rope_head_dim=model.qk_rope_head_dim,
        sliding_window=model.sliding_window,
        sliding_layers=model.num_sliding_layers,
        num_params=model.num_params,
        max_context=model.max_context,
    )


def _notes(
    request: SizeRequest, kv_dtype: str, kv_heads: int, stages: int, weights_source: str
) -> tuple[str, ...]:
    model, tp = request.model, request.tp
    notes = []
    if model.attention == "mla":
        notes.append(
            f"MLA caches one latent row of kv_lora_rank + qk_rope_head_dim = "
            f"{model.kv_lora_rank + model.qk_rope_head_dim} elements per token and layer, "
            f"replicated on every TP rank."
        )
    elif tp > model.num_kv_heads:
        notes.append(
            f"TP={tp} exceeds the {model.num_kv_heads} KV heads: each KV head is replicated "
            f"on {tp // model.num_kv_heads} ranks (1 head per rank)."
        )
    if model.num_sliding_layers:
        notes.append(
            f"{model.num_sliding_layers} of {model.num_layers} layers slide over a "
            f"{model.sliding_window:,}-token window; trajectory footprints cap them there "
            f"(a hybrid SWA pool). A pool that stores every token in every layer, as SGLang's "
            f"default pool does, needs the uncapped figures."
        )
    if stages > 1:
        notes.append(f"PP={stages}: per-rank figures are for the stage holding the most layers.")
    if kv_dtype == "fp4":
        notes.append("fp4 counts the packed payload only; FP4 KV recipes add per-block scales.")
    if request.mem_fraction_static is None:
        notes.append(
            "Budget: HBM - weights - runtime reserve (seed 003 eq. (5)); --mem-fraction "
            "applies SGLang's mem_fraction_static rule instead."
        )
    else:
        notes.append(
            "Budget: SGLang's rule, rest = free_after_load - HBM * (1 - mem_fraction_static), "
            "taking the whole HBM as free before load (a real process has ~0.5-1 GiB less)."
        )
    notes.append(f"Weights: {weights_source}.")
    return tuple(notes)
