"""`kvctl replay TRACE --against URL`, start to end, as one JSON-ready document.

    1. read the trace (every line validated)           InputError: nothing sent
    2. probe the server (server_probe.py)               InputError: nothing sent
    3. POST /flush_cache: both sides start empty        refused (busy): InputError, nothing sent
    4. drive the server (drive.py)                      measured
    5. replay with the server's settings (predict.py)   predicted
    6. compare (compare.py)

The document has `measured` and `predicted` blocks of the same keys (compare.py), their
`agreement`, the settings the replay took from the server (`replay_options`) and those it
could not (`unmapped`), the requests each side rejected, and notes saying what the
prediction's clock is.
"""

from __future__ import annotations

import urllib.error
import urllib.request

from kvctl.errors import InputError
from kvctl.replay.engine_setup import Deployment
from kvctl.replay.mooncake import iter_records
from kvctl.twin import compare
from kvctl.twin.drive import drive
from kvctl.twin.predict import predict
from kvctl.twin.prompts import BlockVocabulary
from kvctl.twin.server_probe import probe


def run_twin(trace: str, url: str, *, speedup: float = 1.0, limit: int | None = None,
             vocab_size: int | None = None, seed: int = 0,
             deployment: Deployment = Deployment(), on_sent=None, on_replay=None) -> dict:
    """Drive, predict, compare (module docstring). `on_sent(n)` after each answer;
    `on_replay(progress)` during the replay."""
    if not speedup > 0:
        raise InputError(f"--speedup must be > 0, got {speedup}")
    records = list(iter_records(trace, limit=limit))
    if not records:
        raise InputError(f"{trace}: the trace holds no requests")
    profile = probe(url, vocab_size=vocab_size)
    _flush(profile.url)
    vocabulary = BlockVocabulary(profile.vocab_size, records[0].block_tokens, seed=seed)
    result = drive(profile.url, records, vocabulary, speedup=speedup, on_done=on_sent)
    prediction = predict(records, profile, speedup=speedup, deployment=deployment, seed=seed,
                         on_progress=on_replay)
    measured = compare.measured_block(result)
    predicted = compare.predicted_block(prediction, len(records), records[0].arrival_s / speedup)
    fitted = "cost_model" in prediction.options
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
        "notes": [
            "predicted latencies are " + (
                "on the step-cost model fitted to this server" if fitted else
                f"modeled (roofline clock for {deployment.model} on {deployment.gpu} x "
                f"TP{deployment.tp}), not fitted to this server: compare hit figures, and "
                "TTFT only with a fitted cost model"),
            f"measured TTFT: {result.ttft_source}",
            "the server's radix cache was flushed before the drive; the replay starts empty",
        ] + ([f"the replay has no option for {', '.join(sorted(prediction.unmapped))}: "
              "it runs kvctl's own (fcfs, no separate prefill cap)"]
             if prediction.unmapped else []),
    }


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
