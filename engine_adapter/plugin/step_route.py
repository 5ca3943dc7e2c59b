"""`GET /step_samples?since=N`: the step timer's samples (step_timer.py), as a pure function.

The plugin's HTTP server calls `step_samples_response(timer, query)` and sends the status
and JSON body it returns::

    {"schema_version": 1, "kvctl_version": "..", "timer_id": "5e0c..", "first": 0, "next": 812,
     "clock": "seconds since the plugin attached (time.monotonic)",
     "samples": {"fields": ["seq", "end_s", "wall_s", ...], "rows": [[0, 3.2, 0.0041, ...]]}}

`since` asks for samples numbered >= N (default 0: every sample still kept); `next` is the
N to send next. `first` > N means samples were lost to the ring's bound in between. A
changed `timer_id` means the server restarted (numbers start again at 0). Samples carry
counts and durations only, never token ids or request ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine_adapter.step_samples import encode_samples

STEP_SAMPLES_SCHEMA_VERSION = 1
CLOCK = "seconds since the plugin attached (time.monotonic)"
STEP_TIMING_OFF = ("step timing is off: the server runs with KVCTL_PLUGIN_STEP_TIMING=0 "
                   "(unset it, or set 1)")


def step_samples_response(timer: Any, query: Mapping[str, str]) -> tuple[int, dict]:
    """(HTTP status, body without the envelope). 404 when the runtime has no step timer
    (KVCTL_PLUGIN_STEP_TIMING=0), 400 for a `since` that is not a non-negative integer."""
    if timer is None:
        return 404, {"error": STEP_TIMING_OFF}
    raw = query.get("since", "0")
    try:
        since = int(raw)
        if since < 0:
            raise ValueError
    except ValueError:
        return 400, {"error": f"since={raw!r} must be a non-negative step-sample number"}
    first, next_seq, samples = timer.log.after(since)
    return 200, {"schema_version": STEP_SAMPLES_SCHEMA_VERSION, "timer_id": timer.timer_id,
                 "first": first, "next": next_seq, "clock": CLOCK,
                 "samples": encode_samples(samples)}
