"""A live server's settings as `kvctl replay` options: the twin replays what the server runs.

    /server_info field        ReplaySettings field       when the replay has no such field
    page_size              -> page_size
    max_total_num_tokens   -> pool_tokens                 (the pool the scheduler built)
    radix_eviction_policy  -> eviction_policy
    max_running_requests   -> max_running_requests        (the scheduler's resolved value:
                                                          internal_states' effective_max_
                                                          running_requests_per_dp when the
                                                          flag was not given)
    chunked_prefill_size   -> chunked_prefill_size        -> token_budget (tokens per step)
    max_prefill_tokens     -> max_prefill_tokens          (dropped: no equivalent)
    schedule_policy        -> schedule_policy             (dropped; kvctl's is fcfs)
    (SGLang has none)      -> tau_high not passed: kvctl's seed-003 ceiling stays off

Options are passed by name when `ReplaySettings` has the field (SGLang's scheduling in the
replay, a parallel change, adds the three marked ones), so this works before and after it;
`unmapped_settings` says what the replay cannot take yet. The prediction may use these
settings and a step-cost model fitted to the server (clock.py, passed to `predict` apart
from these options); never the measured per-request outcomes.
"""

from __future__ import annotations

import dataclasses

from kvctl.replay.runner import ReplaySettings

_FIELDS = frozenset(f.name for f in dataclasses.fields(ReplaySettings))
_PASS_THROUGH = (  # (server_info key, ReplaySettings field)
    ("page_size", "page_size"), ("max_total_num_tokens", "pool_tokens"),
    ("radix_eviction_policy", "eviction_policy"),
    ("max_running_requests", "max_running_requests"),
    ("chunked_prefill_size", "chunked_prefill_size"),
    ("max_prefill_tokens", "max_prefill_tokens"), ("schedule_policy", "schedule_policy"),
)


def server_settings_to_replay_options(server_info: dict) -> dict:
    """ReplaySettings keyword arguments that mirror `server_info` (module docstring).
    Values the server leaves unset (None, or <= 0 for sizes) are not passed."""
    options, _dropped = _split(server_info)
    return options


def unmapped_settings(server_info: dict) -> dict:
    """{server_info key: value} of the server's settings this replay has no field for."""
    return _split(server_info)[1]


def resolved_max_running(server_info: dict) -> int | None:
    """What the scheduler runs when --max-running-requests was not given: the top-level field
    is then None (it echoes the flag) and each scheduler reports its own resolution
    (`resolve_max_num_reqs`) as `internal_states[i].effective_max_running_requests_per_dp`.
    Rank 0's, as the replay models one rank; None when the server does not say."""
    for state in server_info.get("internal_states") or ():
        value = state.get("effective_max_running_requests_per_dp") if isinstance(state, dict) \
            else None
        if isinstance(value, int) and value > 0:
            return value
    return None


def _split(server_info: dict) -> tuple[dict, dict]:
    options: dict = {}
    dropped: dict = {}
    for key, field in _PASS_THROUGH:
        value = server_info.get(key)
        if key == "max_running_requests" and value is None:
            value = resolved_max_running(server_info)
        if value is None or value == "" or (isinstance(value, int) and value <= 0):
            continue  # unset (SGLang resolves None itself; -1 turns chunked prefill off)
        if field in _FIELDS:
            options[field] = value
        else:
            dropped[key] = value
    if "chunked_prefill_size" in dropped:  # kvctl's per-step token budget is the chunk
        options["token_budget"] = dropped.pop("chunked_prefill_size")
    # kvctl's seed-003 tau_high ceiling is not passed: SGLang has none, and a replay's is off
    # unless asked for (ReplaySettings.tau_high None), so the prediction runs without it
    return options, dropped

