"""`kvctl sandbox`'s options reach SGLang's command line, and its CPU platform stays scoped to
the sandbox (never registered for a user's own server)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app
from kvctl.errors import InputError
from kvctl.sandbox.config import SandboxConfig
from kvctl.sandbox.launcher import SandboxServer

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]


def _pairs(args: list[str]) -> dict[str, str]:
    return {a: b for a, b in zip(args, args[1:]) if a.startswith("--")}


def test_options_pass_through_to_sglang_arguments():
    """page, pool, context, running cap, DP, eviction and schedule policy become SGLang's
    own flags with the values given."""
    config = SandboxConfig(page_size=16, pool_tokens=8192, context_length=2048, max_running=4,
                           dp_size=2, eviction="lfu", schedule_policy="lpm")
    got = _pairs(config.server_args(port=31000, events={"publisher": "zmq"}))
    assert {k: got[k] for k in ("--page-size", "--max-total-tokens", "--context-length",
                                "--max-running-requests", "--dp-size",
                                "--radix-eviction-policy", "--schedule-policy", "--port")} == {
        "--page-size": "16", "--max-total-tokens": "8192", "--context-length": "2048",
        "--max-running-requests": "4", "--dp-size": "2", "--radix-eviction-policy": "lfu",
        "--schedule-policy": "lpm", "--port": "31000"}


def test_eviction_the_server_refuses_is_named_before_start():
    """fifo is a replay policy SGLang's server does not take: refused naming the option and
    the five it does take."""
    with pytest.raises(InputError, match=r"^--eviction 'fifo' .*valid: lru, lfu, slru, "
                                         r"priority, tlru$"):
        SandboxConfig(eviction="fifo").check()


def test_dp_2_binds_one_core_per_rank_and_one_plugin_port_per_rank(tmp_path):
    """--dp-size 2: SGLANG_CPU_OMP_THREADS_BIND "0|1" (the CPU platform's per-rank cores) and
    plugin endpoints at base and base + 1."""
    server = SandboxServer(SandboxConfig(port=0, plugin_port=0, dp_size=2), tmp_path)
    env = server.environment()
    assert env["SGLANG_CPU_OMP_THREADS_BIND"] == "0|1"
    assert env["KVCTL_PLUGIN_PORT"] == str(server.plugin_port)
    assert server.plugin_urls == [f"http://127.0.0.1:{server.plugin_port}",
                                  f"http://127.0.0.1:{server.plugin_port + 1}"]


def test_the_cpu_platform_is_registered_only_in_the_sandbox_temp_dir(tmp_path):
    """kvctl's package metadata declares no sglang.srt.platforms entry point; the sandbox
    writes one into its own dir, which only its server's PYTHONPATH holds."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "sglang.srt.platforms" not in project.get("entry-points", {})
    server = SandboxServer(SandboxConfig(port=0, plugin_port=0), tmp_path)
    entry = (server.dist_dir / "kvctl_sandbox_cpu-0.0.0.dist-info" / "entry_points.txt")
    assert entry.read_text() == ("[sglang.srt.platforms]\n"
                                 "kvctl_sandbox_cpu = kvctl.sandbox.cpu_platform:activate\n")
    assert server.environment()["PYTHONPATH"].split(":")[0] == str(server.dist_dir)


def test_no_product_module_imports_the_cpu_platform():
    """Only the sandbox's server process imports kvctl.sandbox.cpu_platform (by entry point)."""
    pattern = re.compile(r"^\s*(from|import)\s+kvctl\.sandbox\.cpu_platform\b|"
                         r"^\s*from\s+kvctl\.sandbox\s+import\s+.*\bcpu_platform\b", re.M)
    offenders = [str(p.relative_to(REPO)) for package in ("kvctl", "engine_adapter", "telemetry")
                 for p in (REPO / package).rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_dry_run_prints_the_launch_line_and_starts_nothing():
    """--dry-run: SGLang's command with the options given and the sandbox's environment."""
    result = CliRunner().invoke(app, ["sandbox", "--dry-run", "--port", "0", "--dp-size", "2",
                                      "--page-size", "16", "--record"])
    assert result.exit_code == 0, result.output
    assert "SGLANG_PLATFORM=kvctl_sandbox_cpu" in result.output
    assert "SGLANG_CPU_OMP_THREADS_BIND='0|1'" in result.output
    assert "KVCTL_RECORD=1" in result.output and "KVCTL_SGLANG_PLUGIN=1" in result.output
    launch = result.output.strip().splitlines()[-1]
    assert "-m sglang.launch_server" in launch
    assert "--dp-size 2" in launch and "--page-size 16" in launch


def test_hicache_ratio_turns_on_sglangs_hicache_with_the_cpu_strategys_flags():
    """--hicache-ratio 2 adds SGLang's own HiCache flags, with the only I/O backend and layout
    the sandbox's CPU strategy implements (kvctl/sandbox/hicache_cpu.py); none without it."""
    args = SandboxConfig(hicache_ratio=2.0, hicache_write_policy="write_back").server_args(
        port=31000, events={"publisher": "zmq"})
    assert "--enable-hierarchical-cache" in args
    assert {k: _pairs(args)[k] for k in ("--hicache-ratio", "--hicache-write-policy",
                                         "--hicache-io-backend", "--hicache-mem-layout")} == {
        "--hicache-ratio": "2", "--hicache-write-policy": "write_back",
        "--hicache-io-backend": "direct", "--hicache-mem-layout": "layer_first"}
    plain = SandboxConfig().server_args(port=31000, events={"publisher": "zmq"})
    assert not [a for a in plain if a.startswith("--hicache") or "hierarchical" in a]


@pytest.mark.parametrize(("ratio", "policy", "message"), [
    (1.0, "write_through", "--hicache-ratio must be a finite number above 1"),
    (float("nan"), "write_through", "--hicache-ratio must be a finite number above 1"),
    (2.0, "write_around", "--hicache-write-policy 'write_around' is unknown"),
])
def test_hicache_options_sglang_would_refuse_are_named_before_start(ratio, policy, message):
    """A host pool no larger than the device pool, or a write policy SGLang does not have, is
    an InputError naming the option before anything starts."""
    with pytest.raises(InputError, match=re.escape(message)):
        SandboxConfig(hicache_ratio=ratio, hicache_write_policy=policy).check()
