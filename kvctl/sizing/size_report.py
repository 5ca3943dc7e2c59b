"""Everything `kvctl size` reports, computed from one SizeRequest. Pure: no I/O, no printing.

Conventions: "per rank" numbers are for one GPU of one model replica (the busiest rank
under PP); "node" numbers multiply by the GPUs (`gpus`) or by the replicas
(gpus / (TP*PP)) for trajectory counts. Trajectory footprints cap sliding-window layers at
their window; the `uncapped` twins are what a pool that stores every token in every layer
(SGLang's default pool) needs. Trajectory counts leave the allocator's headroom free
(`kvctl.sizing.budget`, the same rule and defaults as `kvctl plan capacity`).

When the weights and the reserve leave no pool, the report is still built (`fits` False):
bytes per token and geometry are known, the pool fields are 0, and `smallest_fit` names the
smallest TP x PP that holds one trajectory of the longest context.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvctl.errors import InputError
from kvctl.sizing import paging, pool
from kvctl.sizing.budget import (
    DEFAULT_HEADROOM,
    DEFAULT_RESERVE_BYTES,
    UNITS_NOTE,
    Assumption,
    HardwareBudget,
    trajectories_with_headroom,
)
from kvctl.sizing.dtypes import canonical_dtype
from kvctl.sizing.fit_search import FitSuggestion, smallest_fit
from kvctl.sizing.geometry import ModelGeometry
from kvctl.sizing.hardware import GpuSpec
from kvctl.util.pages import ceil_div, page_ceil

DEFAULT_CONTEXTS = (8192, 32768, 131072)


@dataclass(frozen=True, kw_only=True)
class SizeRequest:
    """Inputs of one sizing. `weights_bytes` is the whole model (split over TP*PP);
    `reserve_bytes` is per GPU; `headroom` the share of pool tokens kept free;
    `mem_fraction_static` switches to SGLang's budget rule. `given` names the options the
    user set (`hbm`, `reserve`, `headroom`), so the assumptions say what was defaulted."""

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
    headroom: float = DEFAULT_HEADROOM
    mem_fraction_static: float | None = None
    page_size: int = 16
    batch: int | None = None
    mean_length: int | None = None
    given: frozenset[str] = frozenset()


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
    fits: bool
    verdict: str | None  # why it does not fit, None when it does
    smallest_fit: FitSuggestion | None  # fewest GPUs, when it does not fit
    smallest_fit_tp_only: FitSuggestion | None  # fewest GPUs with PP = 1
    budget: pool.PoolBudget | None  # None when the weights and reserve leave no pool
    weights_bytes_per_rank: int
    headroom: float
    assumptions: tuple[Assumption, ...]
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
    """Compute the whole report. Raises InputError for any impossible input; a model that
    does not fit is an answer (`fits` False), not an error."""
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
    if not 0.0 <= request.headroom < 1.0:
        raise InputError(f"--headroom must be in [0, 1), got {request.headroom}")
    if request.mean_length is not None and request.mean_length > max(request.contexts):
        raise InputError(f"--mean-length {request.mean_length:,} exceeds every --context "
                         f"(the static reservation must hold the mean)")
    if request.batch is not None and request.batch < 1:
        raise InputError(f"--batch must be positive, got {request.batch}")
    kv_dtype = canonical_dtype(request.kv_dtype or model.dtype)
    weight_dtype = canonical_dtype(request.weight_dtype or model.weight_dtype)

    weights, weights_source = _weights(request, weight_dtype, tp, pp)
    verdict, suggestions = None, (None, None)
    try:
        budget = _budget(request, weights)
    except pool.NoPoolError as err:
        budget, verdict = None, str(err).split(";")[0]
        suggestions = tuple(smallest_fit(
            model, kv_dtype=kv_dtype, context=max(request.contexts), headroom=request.headroom,
            budget_for=lambda t, p: _budget(request, _weights(request, weight_dtype, t, p)[0]),
            max_pp=max_pp) for max_pp in (None, 1))
    pool_bytes = budget.pool_bytes if budget is not None else 0
    row_model = model.model_bytes_per_token(kv_dtype)
    row_rank = model.bytes_per_token(kv_dtype, tp, pp)
    page = request.page_size
    replicas = gpus // (tp * pp)

    rows = tuple(_context_row(request, context, kv_dtype, pool_bytes, replicas)
                 for context in request.contexts)
    batch_tail = None
    if request.batch is not None and budget is not None:
        batch_tail = paging.tail_waste(request.batch, page, row_rank, pool_bytes)
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
        fits=budget is not None,
        verdict=verdict,
        smallest_fit=suggestions[0],
        smallest_fit_tp_only=suggestions[1],
        budget=budget,
        weights_bytes_per_rank=weights,
        headroom=request.headroom,
        assumptions=_assumptions(request, weights_source),
        pool_bytes_node=pool_bytes * gpus,
        page_size=page,
        page_bytes_per_rank=paging.page_bytes(row_rank, page),
        pool_tokens_per_rank=pool.pool_tokens(pool_bytes, row_rank, page),
        pool_pages_per_rank=pool.pool_pages(pool_bytes, row_rank, page),
        tail_slots_per_sequence=paging.expected_tail_slots(page),
        tail_bytes_per_sequence_per_rank=paging.expected_tail_slots(page) * row_rank,
        batch_tail=batch_tail,
        contexts=rows,
        notes=_notes(request, kv_dtype, kv_heads, len(stages)),
    )


def _weights(request: SizeRequest, weight_dtype: str, tp: int, pp: int) -> tuple[int, str]:
    """Weights per device at this TP x PP and where the number came from."""
    model = request.model
    if request.weights_bytes is not None:
        if request.weights_bytes < 0:
            raise InputError(
                f"--weights-gb must not be negative, got {request.weights_bytes} bytes"
            )
        return ceil_div(request.weights_bytes, tp * pp), "whole model, split over TP*PP"
    if model.num_params is None:
        raise InputError(
            f"{model.name}: parameter count unknown for this layout; give --weights-gb"
        )
    return (pool.weights_per_rank(model.num_params, weight_dtype, tp, pp),
            f"{model.num_params / 1e9:.2f}B params x {weight_dtype} / (TP*PP)")


def _budget(request: SizeRequest, weights: int) -> pool.PoolBudget:
    hbm = request.gpu.hbm_bytes
    if request.mem_fraction_static is not None:
        return pool.sglang_budget(hbm, weights, request.mem_fraction_static)
    return pool.reserve_budget(hbm, weights, request.reserve_bytes)


def _assumptions(request: SizeRequest, weights_source: str) -> tuple[Assumption, ...]:
    """What the numbers rest on: HBM, reserve (or SGLang's rule), headroom, weights, units."""
    hardware = HardwareBudget(
        gpu=request.gpu, hbm_given="hbm" in request.given, reserve_bytes=request.reserve_bytes,
        reserve_given="reserve" in request.given, headroom=request.headroom,
        headroom_given="headroom" in request.given)
    hbm, reserve, headroom = hardware.assumptions()
    if request.mem_fraction_static is not None:
        reserve = Assumption("reserve",
                             f"SGLang's slack, HBM x (1 - {request.mem_fraction_static})",
                             "--mem-fraction")
    weights = Assumption("weights", weights_source, "--weights-gb" if request.weights_bytes
                         is not None else "default: counted, seed 003 eq. (4)")
    return (hbm, reserve, headroom, weights,
            Assumption("trajectory", "a context counts prompt and output tokens", "--context"),
            Assumption("units", UNITS_NOTE, "convention"))


def _context_row(
    request: SizeRequest, context: int, kv_dtype: str, pool_bytes: int, replicas: int
) -> ContextRow:
    model, tp, pp, page = request.model, request.tp, request.pp, request.page_size
    capped = model.trajectory_bytes(context, kv_dtype, tp, pp)
    uncapped = model.trajectory_bytes_uncapped(context, kv_dtype, tp, pp)
    row_rank = model.bytes_per_token(kv_dtype, tp, pp)
    headroom = request.headroom
    # A paged allocator hands out whole pages (seed 000 0x02G): a trajectory occupies its
    # token rows rounded up to the page, so a 32k context on 64k-token pages holds a page.
    capped = _page_rounded(capped, row_rank, page)
    uncapped = _page_rounded(uncapped, row_rank, page)
    if row_rank > 0:  # the pool itself is whole pages, as SGLang sizes it (// cell // page)
        pool_bytes = max(pool_bytes, 0) // row_rank // page * page * row_rank
    per_replica = trajectories_with_headroom(pool_bytes, row_rank, capped, headroom)
    comparison = None
    if request.mean_length is not None and request.mean_length <= context and pool_bytes > 0:
        comparison = paging.static_vs_paged(
            context, request.mean_length, page, row_rank, pool_bytes
        )
    tail_share = (paging.tail_waste(per_replica, page, row_rank, pool_bytes).share_of_pool
                  if pool_bytes > 0 else 0.0)
    return ContextRow(
        context=context,
        trajectory_bytes_model=model.trajectory_bytes(context, kv_dtype),
        trajectory_bytes_per_rank=capped,
        trajectory_bytes_uncapped_per_rank=uncapped,
        pages_per_trajectory=paging.pages_for(context, page),
        max_trajectories=per_replica * replicas,
        max_trajectories_uncapped=trajectories_with_headroom(
            pool_bytes, row_rank, uncapped, headroom) * replicas,
        tail_share_at_max=tail_share,
        static_vs_paged=comparison,
    )


def _page_rounded(trajectory_bytes: int, row_bytes: int, page: int) -> int:
    """Bytes of whole pages that hold `trajectory_bytes` of rows of `row_bytes` each."""
    rows = ceil_div(trajectory_bytes, row_bytes)
    return page_ceil(rows, page) * row_bytes


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


def _notes(request: SizeRequest, kv_dtype: str, kv_heads: int, stages: int) -> tuple[str, ...]:
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
    return tuple(notes)
