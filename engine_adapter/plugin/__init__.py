"""kvctl inside a real SGLang server: an SGLang 0.5.23 plugin (entry point group
`sglang.srt.plugins`, name `kvctl`, see docs/plugin.md).

    entry.py          register(): gated by KVCTL_SGLANG_PLUGIN=1 or SGLANG_PLUGINS naming kvctl
    settings.py       the KVCTL_PLUGIN_* environment, parsed once
    hooks.py          the hook functions and their dotted targets
    runtime.py        per-scheduler state: cadences, failures, the latest snapshot
    scheduler_host.py a Scheduler's objects -> the shared sampler's SampleInputs
    tally.py          cheap per-step counters and the observable part of the funnel
    server.py         /healthz, /snapshot, /receipts over the stdlib HTTP server
    server_info.py    discovery: `kvctl_plugin` in SGLang's /server_info

Nothing here imports SGLang at module import time except hooks that SGLang itself calls.
"""
