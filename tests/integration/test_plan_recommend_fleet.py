"""`kvctl plan recommend --trace` end to end on SGLang's real caches: the answer is derived
in the test from two fleet replays run directly (run_fleet), then the command must find it.

head_500's first 30 requests on a 20,000-token pool per replica: one round_robin replica
queues (TTFT p99 tens of seconds on the roofline clock), two halve the queue. An SLO
between the two p99s is met by 2 and missed by 1, so the fewest replicas is 2, and the
command's own runs must be those two (doubling starts at 1, meets at 2; --max-replicas 4).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app
from kvctl.fleet.runner import FleetSettings, prepare_fleet, run_fleet
from kvctl.replay.runner import ReplaySettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HEAD = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake" / "head_500.jsonl"
LIMIT, POOL = 30, 20_000


def _ttft_p99(replicas: int) -> float:
    settings = ReplaySettings(workload=str(HEAD), limit=LIMIT, pool_tokens=POOL)
    result = run_fleet(prepare_fleet(settings, FleetSettings(replicas=replicas,
                                                              router="round_robin")))
    return result.to_dict()["fleet"]["ttft_s"]["p99"]


def test_recommends_the_replicas_the_fleet_replay_says(sglang_ready):
    one, two = _ttft_p99(1), _ttft_p99(2)
    assert two < one  # the premise: a second replica shortens the queue
    target = math.sqrt(one * two)  # strictly between them
    result = CliRunner().invoke(app, [
        "plan", "recommend", "--trace", str(HEAD), "--limit", str(LIMIT),
        "--pool-tokens", str(POOL), "--routers", "round_robin", "--max-replicas", "4",
        "--slo", f"ttft-p99={target:.6f}s", "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    rec = doc["recommendation"]
    assert (rec["router"], rec["replicas"]) == ("round_robin", 2)
    assert rec["below"]["replicas"] == 1 and rec["below"]["missed"] == ["ttft-p99"]
    runs = [(r["replicas"], r["meets"]) for r in doc["runs"]]
    assert runs == [(1, False), (2, True)]
    # the command's runs are the same fleet replays (deterministic: same seed, same trace)
    assert doc["runs"][0]["metrics"]["ttft-p99"] == pytest.approx(one)
    assert doc["runs"][1]["metrics"]["ttft-p99"] == pytest.approx(two)
    assert doc["validated_by"] == {"method": "fleet replay", "runs": 2, "clock": "modeled"}
