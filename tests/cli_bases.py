"""TEST-ONLY: one valid, quick base invocation per kvctl command (imported by name, like
fit80). tests/unit/test_cli_bad_input_property.py replaces one option of a base with a bad
value; tests/integration/test_cli_base_invocations.py shows that every base itself runs.
Not a test module."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACE = str(REPO / "examples/traces/mooncake/head_500.jsonl")
SCENARIO = str(REPO / "examples/scenarios/coding-agents.yaml")
LAYOUT = str(REPO / "examples/layouts/seed000_0x03F.yaml")
DEAD_URL = "http://127.0.0.1:9"  # discard port: nothing listens, a connect fails at once
RECORD_OUT = "/tmp/kvctl-property-record.jsonl"  # never written: every case fails first

# One valid, quick invocation per command (arguments first). Options of an exclusive group
# (monitor/exporter sources) are dropped from the base when the case replaces one of them.
# inspect and record point at DEAD_URL, so a bad value that slipped through would show as
# the dead server's message (the property test rejects that); the base-invocation test
# points them at live endpoints.
BASE: dict[str, list[str]] = {
    "size": ["--model", "Llama-3-8B"],
    "explain": ["U_KV"],
    "addr": [LAYOUT, "--request", "A", "--token", "16", "--layer", "24"],
    "replay": [TRACE, "--limit", "2"],
    "check": ["--scenario", SCENARIO, "--steps", "2"],
    "inspect": ["--url", DEAD_URL, "--timeout", "0.2"],
    "record": ["--url", DEAD_URL, "--out", RECORD_OUT, "--max-requests", "1"],
    "calibrate": ["--url", DEAD_URL, "--out", "/tmp/kvctl-property-calibrate.json"],
    "monitor": ["--scenario", SCENARIO, "--json", "--refresh", "0.05", "--pace", "0"],
    "exporter": ["--scenario", SCENARIO, "--port", "0", "--duration", "0.1", "--json"],
    "sandbox": ["--dry-run", "--port", "0"],  # prints SGLang's launch line, starts nothing
    "plan capacity": ["--model", "Llama-3-8B", "--gpu", "H100-SXM", "--context", "4096",
                      "--output", "512"],
    "plan retention": ["--model", "Llama-3-8B", "--gpu", "H100-SXM", "--context", "4096"],
    "plan chunked-prefill": ["--model", "Llama-3-8B", "--gpu", "H100-SXM", "--prompt", "4096",
                             "--decode-batch", "8"],
    "plan block-size": ["--lengths", "33,25,16", "--row-bytes", "64KiB", "--pool-slots", "128"],
    "plan cow": ["--offset", "34", "--block-size", "16", "--row-bytes", "48KiB"],
    "plan vmm": ["--model", "Llama-3-8B", "--page-group", "64KiB,2MiB", "--lengths", "1024,1025"],
    "plan shared-prefix": ["--prefix", "64", "--suffixes", "8,8,16", "--kv-row-bytes", "512",
                           "--value-dim", "128"],
    "plan recommend": ["--model", "Llama-3-8B", "--gpu", "H100-SXM", "--context", "4096",
                       "--output", "512"],
}
RUNS_A_WORKLOAD = {"check", "monitor", "exporter", "replay"}  # base runs cost seconds
