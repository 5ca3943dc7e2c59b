"""`kvctl replay TRACE --against URL`, start to end, as one JSON-ready document.

    1. read the trace (every line validated)           InputError: nothing sent
    2. probe the server (server_probe.py)               InputError: nothing sent
    3. POST /flush_cache: both sides start empty        refused (busy): InputError, nothing sent
    4. drive the server (drive.py)                      measured
       meanwhile read the plugin's timed steps (clock.py)  (the server's step costs only)
    5. fit the clock; replay with the server's settings  predicted
       (predict.py)
    6. compare (compare.py)

The document has `measured` and `predicted` blocks of the same keys (compare.py), their
`agreement`, the settings the replay took from the server (`replay_options`) and those it
could not (`unmapped`), the requests each side rejected, the prediction's `clock` (also in
the predicted block: its source, and R^2 / median / p90 relative error when fitted), and
notes saying what that clock is.
"""

from __future__ import annotations

import urllib.error
import urllib.request

from kvctl.errors import InputError
from kvctl.replay.engine_setup import Deployment
from kvctl.replay.mooncake import iter_records
from kvctl.twin import compare
from kvctl.twin.clock import FITTED, TwinClock, decide, start_sampler
from kvctl.twin.drive import drive
from kvctl.twin.predict import predict
from kvctl.twin.prompts import BlockVocabulary
from kvctl.twin.server_probe import probe


def run_twin(trace: str, url: str, *, speedup: float = 1.0, limit: int | None = None,
             vocab_size: int | None = None, seed: int = 0,
             deployment: Deployment = Deployment(), on_sent=None, on_replay=None,
             cost_model: str | None = None, plugin_url: str | None = None) -> dict:
    """Drive, predict, compare (module docstring). `on_sent(n)` after each answer;
    `on_replay(progress)` during the replay. `cost_model`: a model file, the clock instead of
    one fitted during the drive; `plugin_url`: the server's kvctl plugin when /server_info
    does not advertise it."""
    if not speedup > 0:
        raise InputError(f"--speedup must be > 0, got {speedup}")
    records = list(iter_records(trace, limit=limit))
    if not records:
        raise InputError(f"{trace}: the trace holds no requests")
    file_model = _load_model(cost_model)
    profile = probe(url, vocab_size=vocab_size)
    _flush(profile.url)
    vocabulary = BlockVocabulary(profile.vocab_size, records[0].block_tokens, seed=seed)
    sampler, why_none = start_sampler(profile.url, plugin_url)
    try:
        result = drive(profile.url, records, vocabulary, speedup=speedup, on_done=on_sent)
    finally:
        if sampler is not None:
            sampler.finish()
    clock = decide(file_model, sampler, why_none)
    prediction = predict(records, profile, speedup=speedup, deployment=deployment, seed=seed,
                         on_progress=on_replay, cost_model=clock.model)
    measured = compare.measured_block(result)
    predicted = compare.predicted_block(prediction, len(records), records[0].arrival_s / speedup)
    predicted["clock"] = clock.summary()
    return {
        "trace": str(trace), "server": profile.url, "speedup": speedup,
        "block_tokens": records[0].block_tokens, "vocab_size": profile.vocab_size,
        "measured": measured, "predicted": predicted,
        "agreement": compare.agreement(result, prediction, measured, predicted),
        "replay_options": prediction.options, "unmapped": prediction.unmapped,
        "rejected": {
            "measured": [{"line": m.line, "reason": m.rejected} for m in result.requests
                         if m.rejected is not None],
            "predicted": [{"line": line, "reason": why} for line, why in prediction.rejected],
        },
        "clock": clock.summary(),
        "notes": [
            clock_note(clock, deployment),
            f"measured TTFT: {result.ttft_source}",
            "the server's radix cache was flushed before the drive; the replay starts empty",
        ] + ([f"the replay has no option for {', '.join(sorted(prediction.unmapped))}: "
              "it runs kvctl's own (fcfs, no separate prefill cap)"]
             if prediction.unmapped else []),
    }


def clock_note(clock: TwinClock, deployment: Deployment) -> str:
    """One line: what times the predicted latencies, and how well it fits."""
    if clock.model is None:
        return (f"predicted latencies are modeled (roofline clock for {deployment.model} on "
                f"{deployment.gpu} x TP{deployment.tp}), not fitted to this server, because "
                f"{clock.why}: compare hit figures, and TTFT only with a fitted clock")
    where = (FITTED + f" ({clock.samples:,} server steps"
             + (f", {clock.lost:,} lost" if clock.lost else "")
             + f": {clock.steps_s:,.1f} s of step time in the {clock.span_s:,.1f} s they span,"
             " conserved by the fit)"
             if clock.source == "fitted" else f"from {clock.model.source}")
    fit = clock.fit
    quality = (f"; fit R^2 {fit['r2']:.3f}, relative error median {fit['median_rel_error']:.1%}"
               f", p90 {fit['p90_rel_error']:.1%}" if fit else "")
    return f"predicted latencies are on a step-cost model {where}{quality}"


def _load_model(path: str | None):
    """--cost-model FILE, read before anything is sent (a bad file: InputError)."""
    if path is None:
        return None
    from kvctl.calibrate.model_file import load_cost_model

    return load_cost_model(path)


def _flush(url: str) -> None:
    """Empty the server's radix cache so both sides start alike; refused while requests run."""
    request = urllib.request.Request(f"{url}/flush_cache", data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            status = reply.status
    except urllib.error.HTTPError as err:
        status = err.code
    except OSError as err:
        raise InputError(f"cannot reach {url}/flush_cache ({err}); no request was sent") from None
    if status != 200:
        raise InputError(f"{url} refused /flush_cache (HTTP {status}): it is serving requests; "
                         "--against needs an idle server (its cache must start empty)")
