"""Turn the operator's choices (model, GPU, pool, policy) into an `EngineConfig`.

The only place that connects kvctl's calculators (`kvctl.sizing`) to the embedded engine:
the roofline `CostParams` come from the model and GPU presets, and `--pool-gb` or
`--model/--gpu` become a pool size in tokens with the same arithmetic as `kvctl size`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine_adapter.embedded.config import CostParams, EngineConfig
from kvctl.errors import InputError
from kvctl.sizing.hardware import resolve_gpu
from kvctl.sizing.models import resolve_model
from kvctl.util.pages import page_ceil

DEFAULT_MODEL = "Llama-3-8B"
DEFAULT_GPU = "H100-SXM"


@dataclass(frozen=True, kw_only=True)
class Deployment:
    """The modeled deployment a replay prices (virtual clock, bytes per token)."""

    model: str = DEFAULT_MODEL
    gpu: str = DEFAULT_GPU
    gpus: int = 1
    tp: int = 1

    def cost_params(self) -> CostParams:
        geometry = resolve_model(self.model)
        gpu = resolve_gpu(self.gpu)
        if self.gpus <= 0 or self.tp <= 0:
            raise InputError("--gpus and --tp must be positive")
        if geometry.num_params is None:
            raise InputError(f"{geometry.name}: parameter count unknown; the cost model needs it")
        return CostParams(
            model_name=geometry.name,
            num_params=float(geometry.num_params),
            weight_bytes_per_param=_dtype_bytes(geometry.weight_dtype),
            kv_bytes_per_token=geometry.model_bytes_per_token(),
            num_gpus=self.tp,
            peak_flops_per_gpu=gpu.peak_bf16_flops,
            hbm_bandwidth_per_gpu=gpu.hbm_bandwidth_bytes_per_s,
            host_link_bandwidth=gpu.host_link_bytes_per_s * self.tp,
        )

    def pool_tokens(self, page_size: int) -> int:
        """The KV pool per rank, in tokens, that `kvctl size` computes for this deployment
        (seed 003 eq. (3)-(5) with kvctl's default runtime reserve)."""
        from kvctl.sizing.size_report import SizeRequest, build_size_report, default_contexts

        model = resolve_model(self.model)
        report = build_size_report(SizeRequest(
            model=model, gpu=resolve_gpu(self.gpu), contexts=default_contexts(model),
            tp=self.tp, page_size=page_size,
        ))
        if report.pool_tokens_per_rank <= 0:
            raise InputError(f"{self.model} leaves no KV pool on {self.gpu} x TP{self.tp}")
        return report.pool_tokens_per_rank

    def pool_tokens_for_bytes(self, pool_bytes: float) -> int:
        """Tokens a pool of `pool_bytes` (whole deployment) holds for this model."""
        per_token = resolve_model(self.model).model_bytes_per_token()
        return int(pool_bytes // per_token)


def _dtype_bytes(dtype: str) -> float:
    from kvctl.sizing.dtypes import dtype_bytes

    return dtype_bytes(dtype)


def engine_config(
    *,
    deployment: Deployment | None = None,
    pool_tokens: int | None = None,
    pool_gb: float | None = None,
    unbounded_tokens: int | None = None,
    **overrides,
) -> EngineConfig:
    """Build a validated EngineConfig.

    Exactly one of pool_tokens / pool_gb may be given; pool_tokens == 0 means unbounded and
    then `unbounded_tokens` (the workload's total demand, from the caller) sizes the pool.
    `overrides` are EngineConfig fields (page_size, eviction_policy, tree_core, ...).
    """
    deployment = deployment or Deployment()
    if pool_tokens is not None and pool_gb is not None:
        raise InputError("give --pool-tokens or --pool-gb, not both")
    if pool_gb is not None:
        if pool_gb <= 0:
            raise InputError(f"--pool-gb must be positive, got {pool_gb}")
        pool_tokens = deployment.pool_tokens_for_bytes(pool_gb * 1e9)
        if pool_tokens == 0:  # not "unbounded": the user asked for a pool too small
            per_token = deployment.pool_tokens_for_bytes(1e12)
            raise InputError(f"--pool-gb {pool_gb:g} holds no token of {deployment.model}'s KV "
                             f"({1e12 / per_token:,.0f} bytes per token); give a larger pool")
    if pool_tokens is not None and pool_tokens < 0:
        raise InputError(f"--pool-tokens must be >= 0, got {pool_tokens}")
    if pool_tokens == 0:
        if not unbounded_tokens:
            raise InputError("an unbounded pool (--pool-tokens 0) needs a finite workload")
        pool_tokens = unbounded_tokens
    config = EngineConfig(cost=deployment.cost_params(), **overrides)
    if pool_tokens is not None:
        page = config.page_size
        if page > 0 and page_ceil(pool_tokens, page) < 2 * page:  # the user's figure, not ours
            raise InputError(f"a pool of {pool_tokens:,} tokens is smaller than two pages of "
                             f"{page} ({2 * page} tokens); give a larger --pool-tokens / "
                             "--pool-gb, or --pool-tokens 0 for unbounded")
        config = replace(config, pool_tokens=page_ceil(pool_tokens, page))
    config.validate()
    return config
