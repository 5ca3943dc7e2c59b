"""Test support: real SGLang `Req` objects as a scheduler holds them at arrival and finish.

Not a test module; imported by name. SGLang is imported lazily (about 10 s the first time).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence


def make_req(rid: str, tokens: Sequence[int], *, cache_salt: str | None = None,
             extra_key: str | None = None):
    """A `Req` built the way the scheduler builds one (prompt as array('q'))."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    sampling = SamplingParams(max_new_tokens=64, temperature=0, ignore_eos=True)
    sampling.normalize(None)
    return Req(rid, "", array("q", tokens), sampling, vocab_size=1 << 31,
               eos_token_ids=set(), cache_salt=cache_salt, extra_key=extra_key)


def finish(req, outputs: int) -> None:
    """`outputs` generated tokens, then SGLang's length finish."""
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH

    req.output_ids.extend(range(1 << 30, (1 << 30) + outputs))
    req.finished_reason = FINISH_LENGTH(length=outputs)


def abort(req) -> None:
    from sglang.srt.managers.schedule_batch import FINISH_ABORT

    req.finished_reason = FINISH_ABORT(message="client went away")
