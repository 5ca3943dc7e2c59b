"""Predicted against measured, as two blocks of the same shape and their agreement. Pure.

    block           measured (drive.py)                 predicted (predict.py)
    requests        sent                                in the trace
    rejected        refused by the server               refused by the server's rule
    prompt_tokens   over served requests                over replayed requests
    hit_tokens      sum of SGLang's cached_tokens       sum of the replay's hit tokens
    hit_rate        hit_tokens / prompt_tokens          (seed 003 eq. 2, H_prefix)
    evicted_tokens  sglang:evicted_tokens_total delta   the replay's evicted tokens
    ttft_p50/p99_s  server (or client) TTFT             the replay's clock (modeled/fitted)
    e2e_p50/p99_s   end-to-end latency                  finish - arrival
    throughput      (prompt + output tokens) / span from the first arrival to the last finish

`agreement`: the share of requests served by both whose hit tokens are equal and the
hit-rate points, over all requests; TTFT and end-to-end p50/p99 of both sides and their
ratios over the requests the clock is judged on (holdout.py: the held-out requests when the
clock was fitted on this drive, `ttft_judged_on` says which). A figure one side cannot
observe is None, never 0.
"""

from __future__ import annotations

from kvctl.replay.report import percentiles
from kvctl.twin.drive import DriveResult
from kvctl.twin.holdout import Judged
from kvctl.twin.predict import Prediction

LATENCIES = ("ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s")


def measured_block(result: DriveResult) -> dict:
    served = [m for m in result.requests if m.rejected is None]
    hits = [m.cached_tokens for m in served]
    known = all(h is not None for h in hits)
    finished = [m.finished_s for m in served if m.finished_s is not None]
    span = max(finished) - min(m.sent_s for m in served) if finished else None
    return _block(
        requests=len(result.requests), rejected=len(result.requests) - len(served),
        prompt=sum(m.prompt_tokens for m in served), output=sum(m.output_tokens for m in served),
        hit=sum(hits) if known else None, evicted=result.evicted_tokens,
        ttft=[m.ttft_s for m in served if m.ttft_s is not None],
        e2e=[m.e2e_s for m in served if m.e2e_s is not None], span=span,
    ) | {"ttft_source": result.ttft_source, "wall_s": round(result.wall_s, 3)}


def predicted_block(prediction: Prediction, requests: int, first_arrival_s: float) -> dict:
    served = prediction.requests
    report = prediction.report or {}
    span = (max(p.finished_s for p in served) - first_arrival_s) if served else None
    return _block(
        requests=requests, rejected=len(prediction.rejected),
        prompt=sum(p.prompt_tokens for p in served), output=sum(p.output_tokens for p in served),
        hit=sum(p.hit_tokens for p in served), evicted=report.get("evicted_tokens", 0),
        ttft=[p.ttft_s for p in served], e2e=[p.e2e_s for p in served], span=span,
    )


def agreement(result: DriveResult, prediction: Prediction, measured: dict,
              predicted: dict, judged: Judged) -> dict:
    """How far apart the two blocks are (module docstring); latencies on `judged` only."""
    seen = {m.line: m.cached_tokens for m in result.requests if m.rejected is None}
    both = [(seen[p.line], p.hit_tokens) for p in prediction.requests if p.line in seen]
    equal = sum(1 for m, p in both if m == p)
    on = judged_latencies(result, prediction, judged)
    return {
        "requests_compared": len(both),
        "hit_tokens_equal_share": equal / len(both) if both else None,
        "hit_rate_points": _diff(predicted["hit_rate"], measured["hit_rate"], 100.0),
        "rejected_equal": measured["rejected"] == predicted["rejected"],
        "ttft_judged_on": judged.on, "ttft_out_of_sample": judged.out_of_sample,
        "judged": on,
        **{key.removesuffix("_s") + "_ratio": _ratio(on["predicted"][key], on["measured"][key])
           for key in LATENCIES},
    }


def judged_latencies(result: DriveResult, prediction: Prediction, judged: Judged) -> dict:
    """TTFT and end-to-end p50/p99 of each side over the judged requests it served."""
    def keep(line: int) -> bool:
        return judged.lines is None or line in judged.lines

    served = [m for m in result.requests if m.rejected is None and keep(m.line)]
    ours = [p for p in prediction.requests if keep(p.line)]
    return {"requests": len(served),
            "measured": _latencies([m.ttft_s for m in served if m.ttft_s is not None],
                                   [m.e2e_s for m in served if m.e2e_s is not None]),
            "predicted": _latencies([p.ttft_s for p in ours], [p.e2e_s for p in ours])}


def _latencies(ttft: list, e2e: list) -> dict:
    t, e = percentiles(ttft), percentiles(e2e)
    return {"ttft_p50_s": t.p50, "ttft_p99_s": t.p99, "e2e_p50_s": e.p50, "e2e_p99_s": e.p99}


def _block(*, requests, rejected, prompt, output, hit, evicted, ttft, e2e, span) -> dict:
    ttft_p, e2e_p = percentiles(ttft), percentiles(e2e)
    return {
        "requests": requests, "rejected": rejected, "served": requests - rejected,
        "prompt_tokens": prompt, "output_tokens": output, "hit_tokens": hit,
        "hit_rate": hit / prompt if hit is not None and prompt else None,
        "evicted_tokens": evicted,
        "ttft_p50_s": ttft_p.p50, "ttft_p99_s": ttft_p.p99,
        "e2e_p50_s": e2e_p.p50, "e2e_p99_s": e2e_p.p99,
        "throughput_tokens_per_s": (prompt + output) / span if span else None,
    }


def _diff(a, b, scale: float) -> float | None:
    return None if a is None or b is None else (a - b) * scale


def _ratio(a, b) -> float | None:
    return None if a is None or not b else a / b
