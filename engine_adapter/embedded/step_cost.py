"""A step-cost model fitted to a real server (`kvctl calibrate`), and the replay clock that
prices steps with it instead of the roofline (cost_model.py). Every time it produces is
*fitted*: measured on one server, extrapolated by a linear model.

What a transformer step costs, term by term (engine_adapter/step_samples.py defines the shape):

    t_step = c0                                  scheduling round, launch, sampling
           + c1 * extend_tokens                  linear layers over the prefill tokens
           + c2 * prefill_attention_pairs        causal attention of the prefill part
           + c3 * prefill_requests               per-request prefill work (metadata, logits)
           + c4 * decode_requests                linear layers over the decode tokens
           + c5 * decode_context_tokens          attention reads of the decode part

with every c >= 0 (seconds per unit). A step with nothing to compute costs 0, as in the
roofline. `FittedCostModel` offers the roofline's interface: `step_seconds` (with the
prefill part's requests, when the caller passes them, for the attention term),
`prefill_seconds`; host-link transfers and bytes stay the roofline's (a server's steps say
nothing about its host link). A step's HiCache load-back is not in the fitted price: no
regressor measures it, so `step_seconds` takes `loaded_tokens` and ignores it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engine_adapter.step_samples import StepShape, attention_pairs

TERMS = ("intercept", "extend_tokens", "prefill_attention_pairs", "prefill_requests",
         "decode_requests", "decode_context_tokens")
UNITS = ("s per step", "s per token", "s per (query, key) pair", "s per request",
         "s per request", "s per context token")


def features(shape: StepShape) -> tuple[float, ...]:
    """The regressors of `shape`, in TERMS order (the fitter and the clock share them)."""
    return (1.0, float(shape.extend_tokens), float(shape.prefill_attention_pairs),
            float(shape.prefill_requests), float(shape.decode_requests),
            float(shape.decode_context_tokens))


@dataclass(frozen=True, kw_only=True)
class FitQuality:
    """How well the model explains the samples it was fitted to (kvctl/calibrate/fit.py)."""

    samples: int
    by_kind: dict[str, int]
    r2: float
    median_rel_error: float
    p90_rel_error: float
    median_rel_error_by_kind: dict[str, float]
    measured_s: float = 0.0  # the samples' measured step seconds, summed (0: not recorded)
    fitted_s: float = 0.0  # the model's seconds for the same steps (the fit conserves the sum)


@dataclass(frozen=True, kw_only=True)
class StepCostModel:
    """Coefficients in TERMS order (seconds per unit, all >= 0). `source` names where it came
    from (a file name) for report labels; `fit` is None for a model written by hand."""

    coefficients: tuple[float, ...]
    source: str = ""
    fit: FitQuality | None = None

    def seconds(self, shape: StepShape) -> float:
        """The fitted duration of a step of `shape`; 0 for a step that computes nothing."""
        if shape.extend_tokens == 0 and shape.decode_requests == 0:
            return 0.0
        return sum(c * x for c, x in zip(self.coefficients, features(shape)))

    def as_dict(self) -> dict[str, float]:
        return dict(zip(TERMS, self.coefficients))


def prefill_shape(members: Iterable[Any]) -> tuple[int, int]:
    """(requests, attention pairs) of a step's prefill part from its scheduled requests
    (the embedded engine's `Tracked`, whose SGLang `Req` holds `prefix_len` and
    `extend_end` for this step: admission.py)."""
    extend, prefix = [], []
    for member in members:
        req = member.req
        extend.append(req.extend_end - req.prefix_len)
        prefix.append(req.prefix_len)
    return len(extend), attention_pairs(extend, prefix)


class FittedCostModel:
    """The replay clock from a `StepCostModel`; the roofline's interface (cost_model.py)."""

    def __init__(self, step: StepCostModel, roofline: Any) -> None:
        self.step = step
        self.roofline = roofline
        self.params = roofline.params

    @property
    def label(self) -> str:
        return f"fitted ({self.step.source or 'step-cost model'})"

    def step_seconds(self, prefill_tokens: int, decode_requests: int, decode_context_tokens: int,
                     prefill_members: Iterable[Any] | None = None, *,
                     loaded_tokens: int = 0) -> float:
        """Fitted duration of one step. Without `prefill_members` the prefill part is priced
        as one request with no cached prefix (an upper bound on its attention).
        `loaded_tokens` (HiCache load-back) is not priced: the fit has no term for it."""
        if prefill_members is not None:
            requests, pairs = prefill_shape(prefill_members)
        else:
            requests = 1 if prefill_tokens else 0
            pairs = attention_pairs((prefill_tokens,), (0,))
        return self.step.seconds(StepShape(prefill_tokens, requests, pairs, decode_requests,
                                           decode_context_tokens))

    def prefill_seconds(self, tokens: int) -> float:
        """Recompute time of `tokens` prompt tokens alone (no intercept: the step runs anyway)."""
        if tokens <= 0:
            return 0.0
        shape = StepShape(tokens, 1, attention_pairs((tokens,), (0,)), 0, 0)
        return self.step.seconds(shape) - self.step.coefficients[0]

    def transfer_seconds(self, tokens: int) -> float:
        return self.roofline.transfer_seconds(tokens)

    def kv_bytes(self, tokens: int) -> int:
        return self.roofline.kv_bytes(tokens)


def build_cost_model(config: Any) -> Any:
    """The engine's clock: the fitted model when `config.step_cost` is set, else the roofline."""
    from engine_adapter.embedded.cost_model import RooflineCostModel

    roofline = RooflineCostModel(config.cost)
    step = getattr(config, "step_cost", None)
    return roofline if step is None else FittedCostModel(step, roofline)
