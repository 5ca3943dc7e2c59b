"""`kvctl sandbox --replicas N --router POLICY`: option checks (one line naming the option,
exit 2, nothing started) and the commands the fleet would run (kvctl/sandbox/fleet.py)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app
from kvctl.errors import InputError
from kvctl.sandbox.config import SandboxConfig
from kvctl.sandbox.fleet import (
    MAX_REPLICAS,
    ROUTER_POLICIES,
    RouterConfig,
    SandboxFleet,
    check_replicas,
)

pytestmark = pytest.mark.unit


def _pairs(args: list[str]) -> dict[str, str]:
    return {a: b for a, b in zip(args, args[1:]) if a.startswith("--")}


def _sandbox(*args: str):
    return CliRunner().invoke(app, ["sandbox", *args])


@pytest.mark.parametrize(("args", "message"), [
    (["--replicas", "0"], "--replicas must be positive, got 0"),  # kvctl's CLI guard
    (["--replicas", "-1"], "--replicas must be positive, got -1"),  # kvctl's CLI guard
    (["--replicas", str(MAX_REPLICAS + 1)], f"--replicas must be between 1 and {MAX_REPLICAS}"),
    (["--replicas", "2", "--router", "least_loaded"],
     "--router 'least_loaded' is not a policy of SGLang's router"),
    (["--replicas", "2", "--cache-threshold", "1.5"], "--cache-threshold must be in [0, 1]"),
    (["--replicas", "2", "--cache-threshold", "-0.1"], "--cache-threshold must not be negative"),
    (["--replicas", "2", "--cache-threshold", "nan"], "--cache-threshold must be a finite"),
    (["--replicas", "2", "--balance-abs-threshold", "-1"],
     "--balance-abs-threshold must not be negative"),
    (["--replicas", "2", "--balance-rel-threshold", "0.5"], "--balance-rel-threshold must be a"),
    (["--replicas", "2", "--balance-rel-threshold", "inf"], "--balance-rel-threshold must be a"),
    (["--replicas", "2", "--eviction-interval", "0"], "--eviction-interval must be at least 1"),
    (["--replicas", "2", "--max-tree-size", "0"], "--max-tree-size must be at least 1"),
    (["--router", "cache_aware"], "--router cache_aware needs --replicas N"),
    (["--cache-threshold", "0.5"], "--cache-threshold is a router option"),
    (["--replicas", "2", "--no-tokenizer"], "--no-tokenizer does not go with --replicas"),
])
def test_bad_fleet_options_are_one_line_exit_2_before_anything_starts(args, message, tmp_path,
                                                                      monkeypatch):
    """Each bad option: exit 2, one line naming it; no temp dir is made (nothing started)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    result = _sandbox("--port", "0", *args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if line]
    assert len(lines) == 1 and message in lines[0], result.output
    assert list(tmp_path.iterdir()) == []


def test_router_defaults_are_sglang_router_0_3_2s_own():
    """RouterConfig's defaults are the RouterArgs defaults of the pinned router (when it is
    installed, read from it)."""
    config = RouterConfig()
    assert (config.policy, config.cache_threshold, config.balance_abs_threshold,
            config.balance_rel_threshold, config.eviction_interval_s, config.max_tree_size) == (
        "cache_aware", 0.3, 64, 1.5, 60, 2**26)
    router_args = pytest.importorskip("sglang_router.router_args")
    ours = router_args.RouterArgs()
    assert (ours.cache_threshold, ours.balance_abs_threshold, ours.balance_rel_threshold,
            ours.eviction_interval_secs, ours.max_tree_size) == (
        0.3, 64, 1.5, 60, 2**26)


def test_router_policies_are_the_routers_choices():
    assert ROUTER_POLICIES == ("random", "round_robin", "cache_aware", "power_of_two", "manual")
    for policy in ROUTER_POLICIES:
        RouterConfig(policy=policy).check()


def test_router_config_refuses_what_the_cli_guard_lets_through():
    """The library checks on its own too (callers other than the CLI)."""
    for bad, flag in ((dict(cache_threshold=-0.1), "--cache-threshold"),
                      (dict(cache_threshold=float("nan")), "--cache-threshold"),
                      (dict(balance_abs_threshold=-1), "--balance-abs-threshold")):
        with pytest.raises(InputError, match=f"^{flag} must"):
            RouterConfig(**bad).check()


def test_check_replicas_bounds():
    check_replicas(1)
    check_replicas(MAX_REPLICAS)
    for bad in (0, -1, MAX_REPLICAS + 1):
        with pytest.raises(InputError, match=r"^--replicas must be between 1 and"):
            check_replicas(bad)


def test_router_command_names_every_worker_the_policy_and_its_options(tmp_path):
    """The router's command: --worker-urls of every worker, the policy and every option with
    0.3.2's flag names, loopback for both its ports, a short shutdown grace."""
    router = RouterConfig(policy="round_robin", cache_threshold=0.5, balance_abs_threshold=8,
                          balance_rel_threshold=2.0, eviction_interval_s=30, max_tree_size=1000)
    fleet = SandboxFleet(SandboxConfig(port=0, plugin_port=0), tmp_path, replicas=3,
                         router=router)
    command = fleet.router_command()
    assert command[1:3] == ["-m", "sglang_router.launch_router"]
    at = command.index("--worker-urls")
    assert command[at + 1:at + 4] == fleet.worker_urls and len(set(fleet.worker_urls)) == 3
    got = _pairs(command)
    assert {k: got[k] for k in ("--policy", "--cache-threshold", "--balance-abs-threshold",
                                "--balance-rel-threshold", "--eviction-interval-secs",
                                "--max-tree-size", "--host", "--prometheus-host")} == {
        "--policy": "round_robin", "--cache-threshold": "0.5", "--balance-abs-threshold": "8",
        "--balance-rel-threshold": "2", "--eviction-interval-secs": "30",
        "--max-tree-size": "1000", "--host": "127.0.0.1", "--prometheus-host": "127.0.0.1"}
    assert got["--port"] == str(fleet.port) and got["--prometheus-port"] == str(fleet.metrics_port)
    assert fleet.router_environment()["HF_HUB_OFFLINE"] == "1"


def test_workers_share_one_model_dir_with_its_tokenizer_and_no_port(tmp_path):
    """One model dir for all (the router groups workers by model path); every worker loads
    the tokenizer and has the plugin; no port is given twice across workers and router."""
    fleet = SandboxFleet(SandboxConfig(port=0, plugin_port=0, dp_size=2), tmp_path, replicas=4,
                         router=RouterConfig())
    assert {s.model_dir for s in fleet.servers} == {fleet.model_dir}
    assert (fleet.model_dir / "tokenizer.json").exists()
    ports = [fleet.port, fleet.metrics_port]
    for server in fleet.servers:
        args = server.command()
        assert "--skip-tokenizer-init" not in args
        assert _pairs(args)["--model-path"] == str(fleet.model_dir)
        assert server.environment()["KVCTL_SGLANG_PLUGIN"] == "1"
        ports += [server.port]
        for base in (server.plugin_port, server.events_port, server.replay_port):
            ports += [base, base + 1]  # dp 2: a block of two
    assert len(ports) == len(set(ports))


def test_the_routers_port_is_the_fleets_port_and_checked_free(tmp_path):
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(InputError, match=rf"^--port: port {port} on 127.0.0.1 is in use"):
            SandboxFleet(SandboxConfig(port=port, plugin_port=0), tmp_path, replicas=2,
                         router=RouterConfig())


def test_dry_run_prints_every_worker_then_the_router_and_starts_nothing():
    result = _sandbox("--dry-run", "--port", "0", "--replicas", "2", "--router", "cache_aware",
                      "--cache-threshold", "0.5")
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.count("-m sglang.launch_server") == 2
    assert "# worker 0" in out and "# worker 1" in out and "# router" in out
    router_line = out.strip().splitlines()[-1]
    assert "-m sglang_router.launch_router" in router_line
    assert "--policy cache_aware" in router_line and "--cache-threshold 0.5" in router_line
    assert len(re.findall(r"--worker-urls http://127\.0\.0\.1:\d+ http://127\.0\.0\.1:\d+ ",
                          router_line)) == 1


def test_single_server_sandbox_loads_the_tokenizer_unless_told_not_to():
    """Without --replicas the sandbox is one server as before; it loads the tokenizer
    (requests may carry text), --no-tokenizer keeps --skip-tokenizer-init."""
    on = _sandbox("--dry-run", "--port", "0")
    off = _sandbox("--dry-run", "--port", "0", "--no-tokenizer")
    assert on.exit_code == off.exit_code == 0
    assert "launch_router" not in on.output and on.output.count("sglang.launch_server") == 1
    assert "--skip-tokenizer-init" not in on.output
    assert "--skip-tokenizer-init" in off.output


def _fleet_with_fake_workers(tmp_path, replicas: int, fails: set[int]):
    """A fleet whose workers 'start' in no time (or fail) and whose router is not launched;
    records which parts were stopped."""
    from kvctl.sandbox.launcher import SandboxFailed

    fleet = SandboxFleet(SandboxConfig(port=0, plugin_port=0), tmp_path, replicas=replicas,
                         router=RouterConfig())
    events: list[str] = []
    for k, server in enumerate(fleet.servers):
        def start(timeout_s, k=k):
            events.append(f"start {k}")
            if k in fails:
                raise SandboxFailed(f"sglang.launch_server exited 1; log w{k}.log: ... | boom")
            return 1.0
        server.start = start
        server.stop = lambda k=k: events.append(f"stop {k}")
    fleet._launch_router = lambda: events.append("router launched")
    fleet._wait_for_router = lambda deadline: events.append("router ready")
    return fleet, events


def test_a_worker_that_fails_to_start_stops_everything_with_one_line_naming_it(tmp_path):
    from kvctl.sandbox.launcher import SandboxFailed

    fleet, events = _fleet_with_fake_workers(tmp_path, 2, fails={1})
    with pytest.raises(SandboxFailed) as failed:
        fleet.start(timeout_s=60)
    message = str(failed.value)
    assert message.startswith(f"worker 1 of 2 ({fleet.servers[1].url}) did not start: "
                              "sglang.launch_server exited 1; log w1.log")
    assert "\n" not in message
    assert {"stop 0", "stop 1"} <= set(events) and "router ready" not in events


def test_a_fleet_that_starts_reports_every_worker_then_the_router(tmp_path):
    fleet, events = _fleet_with_fake_workers(tmp_path, 3, fails=set())
    assert fleet.start(timeout_s=60) >= 0
    assert events[0] == "router launched" and events[-1] == "router ready"
    assert sorted(e for e in events if e.startswith("start")) == ["start 0", "start 1",
                                                                 "start 2"]
    assert fleet.worker_startup_s == [1.0, 1.0, 1.0]


def test_stop_during_start_leaves_no_worker_to_start_later(tmp_path):
    """stop() (Ctrl-C, SIGTERM) while workers wait for a core: none of them starts after it."""
    fleet, events = _fleet_with_fake_workers(tmp_path, 4, fails=set())
    fleet.stop()
    fleet._start_workers(deadline=1e18)
    assert not [e for e in events if e.startswith("start")]


def test_the_routers_log_tail_is_one_line_without_colour_codes(tmp_path):
    fleet = SandboxFleet(SandboxConfig(port=0, plugin_port=0), tmp_path, replicas=1,
                         router=RouterConfig())
    fleet.log_path.write_text("\x1b[2m2026-12-07\x1b[0m \x1b[32m INFO\x1b[0m starting\n\n"
                              "\x1b[31mERROR\x1b[0m bind failed\n")
    assert fleet.router_tail() == "2026-12-07  INFO starting | ERROR bind failed"


def test_without_the_router_package_nothing_starts(tmp_path, monkeypatch):
    from kvctl.sandbox import fleet as fleet_module
    from kvctl.sandbox.launcher import SandboxFailed

    fleet, events = _fleet_with_fake_workers(tmp_path, 2, fails=set())
    monkeypatch.setattr(fleet_module, "installed_router_version", lambda: None)
    with pytest.raises(SandboxFailed, match=r"^SGLang's router is not installed .*"
                                            r"requirements/router\.txt"):
        fleet.start(timeout_s=60)
    assert events == []


def test_replicas_1_is_one_worker_behind_the_router():
    result = _sandbox("--dry-run", "--port", "0", "--replicas", "1", "--router", "round_robin")
    assert result.exit_code == 0, result.output
    assert result.output.count("-m sglang.launch_server") == 1
    router_line = result.output.strip().splitlines()[-1]
    assert re.search(r"--worker-urls http://127\.0\.0\.1:\d+ --policy round_robin ", router_line)


def test_a_bigger_fleet_gets_longer_to_start_by_default():
    from kvctl.sandbox.fleet import default_startup_timeout

    assert default_startup_timeout(2, cores=2) == 600.0
    assert default_startup_timeout(1, cores=2) == 600.0
    assert default_startup_timeout(8, cores=2) == 1500.0
    assert default_startup_timeout(8, cores=16) == 600.0
