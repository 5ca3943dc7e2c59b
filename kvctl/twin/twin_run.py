"""`kvctl replay TRACE --against URL`, start to end, as one JSON-ready document.

    1. read the trace (every line validated)           InputError: nothing sent
    2. probe the server (server_probe.py)               InputError: nothing sent
    3. POST /flush_cache: both sides start empty        refused (busy): InputError, nothing sent
    4. drive the server (drive.py)                      measured
       meanwhile read the plugin's timed steps (clock.py)  (the server's step costs only),
       marking those completed before request k is sent (holdout.py)
    5. fit the clock on the steps before the mark;       predicted
       replay with the server's settings (predict.py)
    6. compare (compare.py): hit figures over all requests, latencies over requests k..N
       (held out), or over all with --cost-model (another run's clock) or the roofline

The document has `measured` and `predicted` blocks of the same keys (compare.py), their
`agreement`, the settings the replay took from the server (`replay_options`) and those it
could not (`unmapped`), the requests each side rejected, the prediction's `clock` (also in
the predicted block: its source, and R^2 / median / p90 relative error when fitted), and
notes saying what that clock is. `save_cost_model`: a model fitted on every step of this
drive is written there (for --cost-model on another run), after the drive.
"""

from __future__ import annotations

import dataclasses
import urllib.error
import urllib.request

from kvctl.errors import InputError
from kvctl.replay.engine_setup import Deployment
from kvctl.replay.mooncake import iter_records
from kvctl.twin import compare
from kvctl.twin import holdout
from kvctl.twin.clock import FITTED, TwinClock, decide, start_sampler
from kvctl.twin.drive import drive
from kvctl.twin.predict import predict
from kvctl.twin.prompts import BlockVocabulary
from kvctl.twin.server_probe import probe


def run_twin(trace: str, url: str, *, speedup: float = 1.0, limit: int | None = None,
             vocab_size: int | None = None, seed: int = 0,
             deployment: Deployment = Deployment(), on_sent=None, on_replay=None,
             cost_model: str | None = None, plugin_url: str | None = None,
             fit_share: float | None = None, save_cost_model: str | None = None) -> dict:
    """Drive, predict, compare (module docstring). `on_sent(n)` after each answer;
    `on_replay(progress)` during the replay. `cost_model`: a model file, the clock instead of
    one fitted during the drive (every request judged); `plugin_url`: the server's kvctl
    plugin when /server_info does not advertise it; `fit_share`: the share of requests whose
    steps fit the clock (holdout.py; default 0.5, not with `cost_model`)."""
    if not speedup > 0:
        raise InputError(f"--speedup must be > 0, got {speedup}")
    if fit_share is not None and cost_model is not None:
        raise InputError("--fit-share splits a drive whose steps fit the clock; with "
                         "--cost-model nothing is fitted: drop --fit-share")
    share = holdout.check_fit_share(holdout.DEFAULT_FIT_SHARE if fit_share is None
                                    else fit_share)
    records = list(iter_records(trace, limit=limit))
    if not records:
        raise InputError(f"{trace}: the trace holds no requests")
    file_model = _load_model(cost_model)
    if save_cost_model is not None:  # before the drive, not after it
        from kvctl.record.writer import check_destination

        check_destination(save_cost_model, what="--save-cost-model", example="clock.json")
    profile = probe(url, vocab_size=vocab_size)
    _flush(profile.url)
    vocabulary = BlockVocabulary(profile.vocab_size, records[0].block_tokens, seed=seed)
    sampler, why_none = start_sampler(profile.url, plugin_url)
    k = holdout.first_held_out(len(records), share) if file_model is None else None
    mark = holdout.SendMark(k, sampler.take_mark) if sampler is not None and k else None
    try:
        result = drive(profile.url, records, vocabulary, speedup=speedup, on_done=on_sent,
                       on_send=mark)
    finally:
        if sampler is not None:
            sampler.finish()
    before = (sampler.collector.samples[:sampler.mark]
              if sampler is not None and sampler.mark is not None else None)
    clock, judged = clock_and_judged(file_model, sampler, why_none, mark, len(records), before)
    saved = save_model(save_cost_model, sampler, {"url": profile.url})
    prediction = predict(records, profile, speedup=speedup, deployment=deployment, seed=seed,
                         on_progress=on_replay, cost_model=clock.model)
    measured = compare.measured_block(result)
    predicted = compare.predicted_block(prediction, len(records), records[0].arrival_s / speedup)
    predicted["clock"] = clock.summary()
    if sampler is not None and sampler.mark_pause_s is not None:
        predicted["clock"]["mark_pause_s"] = round(sampler.mark_pause_s, 4)
    return {
        "trace": str(trace), "server": profile.url, "speedup": speedup,
        "block_tokens": records[0].block_tokens, "vocab_size": profile.vocab_size,
        "measured": measured, "predicted": predicted,
        "agreement": compare.agreement(result, prediction, measured, predicted, judged),
        "replay_options": prediction.options, "unmapped": prediction.unmapped,
        "rejected": {
            "measured": [{"line": m.line, "reason": m.rejected} for m in result.requests
                         if m.rejected is not None],
            "predicted": [{"line": line, "reason": why} for line, why in prediction.rejected],
        },
        "clock": predicted["clock"],
        **({"saved_cost_model": saved} if save_cost_model is not None else {}),
        "notes": [
            clock_note(clock, deployment),
            f"TTFT and end-to-end compared on {judged.on}; hit figures on all requests",
            f"measured TTFT: {result.ttft_source}",
            "the server's radix cache was flushed before the drive; the replay starts empty",
        ] + ([f"--save-cost-model: {saved}" if saved != save_cost_model else
              f"a step-cost model fitted on all {clock.samples:,} steps of this drive was "
              f"written to {saved} (--cost-model on another run)"]
             if save_cost_model is not None else [])
          + ([f"the replay has no option for {', '.join(sorted(prediction.unmapped))}: "
              "it runs kvctl's own (fcfs, no separate prefill cap)"]
             if prediction.unmapped else []),
    }


# few steps before request k: a queue-bound drive (every request sent within seconds,
# served over minutes) has run almost none when request k is sent, and only a request sent
# later has its whole life after the fit
NO_FIRST_PART = ("to fit more steps and still judge TTFT out of sample: --cost-model from "
                 "another drive (--save-cost-model writes one), a larger --fit-share, or a "
                 "smaller --speedup")


def clock_and_judged(file_model, sampler, why_none, mark, requests: int, fitted):
    """The clock and the requests it is judged on (holdout.py). `fitted`: the steps
    completed before the mark (None: no mark taken): fitted, and requests k..N judged; else
    every request (a file, the roofline, or too few requests to hold any out: fitted on
    every step, in sample, and said so)."""
    if file_model is None and sampler is not None and mark is not None and fitted is not None:
        clock = decide(None, sampler, why_none, fitted=fitted,
                       scope=f"the {len(fitted):,} steps timed before request {mark.k:,} "
                             "was sent")
        if clock.source == "fitted":
            return clock, holdout.held_out(mark, requests, len(fitted))
        if sampler.error is None:  # the first part ran too few steps: say how to get more
            clock = dataclasses.replace(clock, why=f"{clock.why} ({NO_FIRST_PART})")
        return clock, holdout.every_request(clock.source)
    clock = decide(file_model, sampler, why_none)
    name = file_model.source if file_model is not None else ""
    return clock, holdout.every_request(clock.source, clock_name=name, steps=clock.samples)


def save_model(path: str | None, sampler, server: dict) -> str | None:
    """--save-cost-model: a model fitted on every step of this drive (for another run);
    the path written, or why nothing was written (a line for the document). `sampler`:
    .error and .collector.samples (the fleet's pooled one too)."""
    if path is None:
        return None
    from kvctl.calibrate.fit import fit_from_samples
    from kvctl.calibrate.model_file import write_model

    if sampler is None or sampler.error is not None:
        return "not written: no steps were timed during the drive"
    try:
        model = fit_from_samples(sampler.collector.samples, source=FITTED)
    except InputError as err:
        return f"not written: the drive's steps could not be fitted: {err}"
    write_model(path, model, server=server)
    return path


def clock_note(clock: TwinClock, deployment: Deployment) -> str:
    """One line: what times the predicted latencies, and how well it fits."""
    if clock.model is None:
        return (f"predicted latencies are modeled (roofline clock for {deployment.model} on "
                f"{deployment.gpu} x TP{deployment.tp}), not fitted to this server, because "
                f"{clock.why}: compare hit figures, and TTFT only with a fitted clock")
    steps = (f"{clock.samples:,} server steps" if clock.fit_steps is None
             else f"{clock.fit_steps:,} of the {clock.samples:,} server steps, those "
                  "completed before the held-out mark")
    where = (FITTED + f" ({steps}"
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
