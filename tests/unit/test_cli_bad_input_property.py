"""Property test: every option of every command, given a bad value, fails the same way.

The real CLI runs in-process (Typer's CliRunner) on the real command tree: the options are
discovered from it, so a new option is covered the day it is added. Each command gets a
small valid base invocation (BASE, checked to run in test_base_invocations_are_valid) and
one option replaced by a generated bad value:

    floats   NaN, +-inf, 1e999, negatives, shares above 1, text and wrong units ("80GB")
    ints     negatives, beyond 2^53, fractions, text, zero where zero means nothing
    files    garbage bytes (any, usually not UTF-8), a folder, a missing path
    --out    an existing file, a folder of someone else's files, a read-only place

Expected, for each: exit code 2, exactly one line on stderr starting `kvctl: error:`, no
traceback, and nothing left under --out. The bad values are the test's own (independent of
kvctl.cli.validate's table), so a rule that is missing there fails here. Cases are cheap
because kvctl rejects them before any engine is built; hypothesis runs derandomized (the
same cases on every CI run), without a deadline.
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from unittest import mock

import pytest
import typer.testing
from cli_bases import BASE, DEAD_URL, RUNS_A_WORKLOAD
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer._click import core as click_core  # Typer 0.29 vendors Click
from typer.core import TyperGroup
from typer.main import get_command
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.unit

SOURCES = {"scenario", "trace", "url"}  # monitor and exporter take exactly one

# Options for which 0 is meaningless (a page of no tokens, zero devices, a rate of 0).
ZERO_INVALID = {"page_size", "block_size", "tp", "pp", "gpus", "steps", "limit", "parallel",
                "token_budget", "max_running", "decode_quantum", "context", "prompt", "chunk",
                "decode_batch", "batch", "mean_length", "max_context", "pool_slots",
                "kv_heads", "head_dim", "layers", "slots", "value_dim", "kv_row_bytes",
                "bytes_per_token", "pool_gb", "hbm_gb", "params_b", "prefill_tflops",
                "peak_tflops", "hbm_tbps", "link_gbps", "nvme_gbps", "mfu", "prefill_mfu",
                "decode_mfu", "link_efficiency", "mem_fraction", "tau_high", "itl_target_ms",
                "interval", "refresh", "duration", "timeout", "gamma", "trajectories",
                "generation_seconds", "arrival_rate", "branches", "max_replicas"}
# Options that are shares of a whole: anything above 1 is wrong.
SHARES = {"tau_high", "mfu", "prefill_mfu", "decode_mfu", "link_efficiency", "mem_fraction",
          "mu", "headroom", "dram_price_ratio"}
# Text options whose value is looked up or parsed, so garbage must be refused.
PARSED_TEXT = {"model", "gpu", "eviction", "tree_core", "retention", "kind", "kv_dtype",
               "weight_dtype", "link", "inject_fault", "context", "hbm_gb", "weights_gb",
               "reserve_gb", "lengths", "block_sizes", "row_bytes", "record_bytes",
               "kernel_lengths", "page_group", "suffixes", "chunk_sizes", "chunk", "tool",
               "sweep", "request", "slo", "routers"}
FILES = {"workload": ".yaml", "layout": ".yaml", "scenario": ".yaml", "trace": ".jsonl",
         "validate_with_replay": ".yaml", "prompt_file": ".json"}


def _leaf_commands() -> dict:
    """{"plan capacity": its Click command, ...} for every leaf of the real command tree."""
    root = get_command(app)
    ctx = click_core.Context(root)
    out = {}

    def walk(command, path):
        if isinstance(command, TyperGroup):
            for name in command.list_commands(ctx):
                walk(command.get_command(ctx, name), [*path, name])
        else:
            out[" ".join(path)] = command

    walk(root, [])
    return out


COMMANDS = _leaf_commands()


def _annotation(param) -> object:
    annotation = param.type_descriptor.annotation
    return getattr(annotation, "__args__", (annotation,))[0] if param.multiple else annotation


def _options(kinds: tuple[type, ...]) -> list[tuple[str, str, str]]:
    """(command, parameter name, flag) for every non-flag option whose type is in kinds."""
    found = []
    for path, command in COMMANDS.items():
        for param in command.params:
            if param.param_type_name != "option" or param.is_flag or param.name == "help":
                continue
            if _annotation(param) in kinds:
                found.append((path, param.name, param.opts[0]))
    return found


NUMERIC = _options((int, float))
TEXT = [case for case in _options((str,)) if case[1] in PARSED_TEXT]
TYPES = {(path, param.name): _annotation(param)
         for path, command in COMMANDS.items() for param in command.params}


def _finite_text(value: float) -> str:
    return repr(value) if math.isfinite(value) else str(value)


def bad_number(path: str, name: str):
    """A strategy of command-line strings that no numeric option `name` may accept."""
    is_int = TYPES[(path, name)] is int
    strategies = [
        st.sampled_from(["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e999"]),
        st.floats(max_value=-1e-6, allow_nan=False, allow_infinity=False).map(_finite_text),
        st.text("abcxyz%/_ ", min_size=1, max_size=6),  # not a number at all
        st.sampled_from(["80GB", "32k tokens", "1.5.2", "0x", "--", "1,000"]),  # wrong unit
    ]
    if is_int:
        strategies += [st.integers(max_value=-1).map(str),
                       st.integers(min_value=2**63, max_value=2**80).map(str),
                       st.sampled_from(["1.5", "2.25", "1e3x"])]
    if name in ZERO_INVALID:
        strategies.append(st.sampled_from(["0", "0.0", "-0"] if not is_int else ["0", "-0"]))
    if name in SHARES:
        strategies.append(st.floats(min_value=1.001, max_value=1e9).map(_finite_text))
    if name in ("page_size", "block_size"):
        strategies.append(st.integers(min_value=10**6, max_value=2**50).map(str))
    return st.one_of(strategies)


def bad_text():
    """Strings that are no preset, policy, size or list (units and names included)."""
    return st.one_of(
        st.sampled_from(["nan", "inf", "-5", "80parsecs", "GiB", "1e999GiB", ",,", "no-such-x",
                         "KEY", "=", "NaN,1", "-1,2"]),
        st.text("qzjx!@#", min_size=1, max_size=8),
    )


POSITIONAL = {"workload", "layout"}  # the first token of their command's base
CLI = get_command(app)  # built once: Typer rebuilds the tree (~0.5 s) on every CliRunner call


class Runner(CliRunner):
    """CliRunner on the command tree built once (the same tree `kvctl` builds per run)."""

    def invoke(self, _app, args, **kwargs):
        with mock.patch.object(typer.testing, "_get_command", lambda _: CLI):
            return super().invoke(app, args, **kwargs)


def invoke(path: str, name: str | None, values: list[str]):
    """Run `kvctl <path>` with its base, minus option `name` (and, for a source of monitor
    or exporter, the other sources), plus `values`; return the CliRunner result."""
    base = list(BASE[path])
    if name in POSITIONAL:
        return Runner().invoke(app, [*path.split(), *values, *base[1:]])
    if name is not None:
        names = {name} | (SOURCES if name in SOURCES else set())
        drop = {"--" + n.replace("_", "-") for n in names}
        kept, index = [], 0
        while index < len(base):
            token = base[index]
            takes_value = index + 1 < len(base) and not base[index + 1].startswith("--")
            if token in drop:
                index += 2 if takes_value else 1
                continue
            kept.append(token)
            index += 1
        base = kept
    return Runner().invoke(app, [*path.split(), *base, *values])


def assert_one_line_error(result, expected_codes=(2,), *, names=()) -> None:
    """Exit code in `expected_codes`, no traceback, exactly one `kvctl: error:` line on
    stderr, and that line contains one of `names` (the option or file at fault)."""
    stderr = result.stderr
    assert result.exit_code in expected_codes, (result.exit_code, stderr, result.stdout[-300:])
    assert "Traceback" not in stderr + result.stdout
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvctl: error: "), stderr
    if names:
        assert any(name in lines[0] for name in names), (names, lines[0])


# inspect's base reaches its dead URL (exit 1): a bad value it did not check shows as 1, not 2.
# record's base reaches it too, with exit 2: a bad value it did not check would show as the
# dead server's message, which assert_caught_before_the_server rejects.
DEAD_BASE = {"inspect", "record", "calibrate"}  # their base invocation reaches DEAD_URL
FAST = [path for path in BASE if path.split()[0] not in RUNS_A_WORKLOAD | DEAD_BASE]
DEAD_SERVER_WORDS = ("cannot reach", "no server answered")


def assert_caught_before_the_server(path: str, result) -> None:
    """For commands whose base points at a dead server: the error is the bad value's."""
    if path in DEAD_BASE:
        assert not any(w in result.stderr for w in DEAD_SERVER_WORDS), result.stderr


@pytest.mark.parametrize("path", FAST)
def test_base_invocations_are_valid(path):
    """Each base invocation itself succeeds, so a failure below is the bad value's doing."""
    result = invoke(path, None, [])
    assert result.exit_code == 0, result.stderr


def test_every_command_has_a_base():
    """The command tree and BASE agree: a new command gets a base (and so these cases)."""
    assert set(COMMANDS) == set(BASE)
    assert len(NUMERIC) > 100  # every numeric option of every command is a case


@settings(max_examples=2500, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_bad_numbers_fail_with_one_line_exit_2(data):
    """Any numeric option given NaN, inf, a negative, a fraction for an int, text, a wrong
    unit, a share above 1 or a meaningless zero: exit 2, one line, no traceback."""
    path, name, flag = data.draw(st.sampled_from(NUMERIC), label="option")
    value = data.draw(bad_number(path, name), label="value")
    result = invoke(path, name, [f"{flag}={value}"])
    assert_one_line_error(result, names=(flag,))
    assert_caught_before_the_server(path, result)


@settings(max_examples=500, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_bad_text_fails_with_one_line_exit_2(data):
    """A name, unit or list option given garbage: exit 2, one line naming the option, no
    traceback."""
    path, name, flag = data.draw(st.sampled_from(TEXT), label="option")
    value = data.draw(bad_text(), label="value")
    result = invoke(path, name, [f"{flag}={value}"])
    assert_one_line_error(result, names=(flag,))
    assert_caught_before_the_server(path, result)


FILE_CASES = [(path, param.name, param.opts[0] if param.opts else None)
              for path, command in COMMANDS.items() for param in command.params
              if param.name in FILES]


_SERIAL = itertools.count()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bad-files")


@settings(max_examples=600, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.data())
def test_garbage_files_fail_with_one_line(scratch, data):
    """Every file-taking option and argument given random bytes, a folder or a missing
    path: one line, exit 2 (exit 1 only for inspect, which may reach its dead URL)."""
    path, name, flag = data.draw(st.sampled_from(FILE_CASES), label="file option")
    kind = data.draw(st.sampled_from(["bytes", "bytes", "bytes", "folder", "missing"]))
    target = scratch / f"input-{next(_SERIAL)}{FILES[name]}"  # a fresh path per case
    if kind == "bytes":
        target.write_bytes(data.draw(st.binary(min_size=1, max_size=512), label="bytes"))
    elif kind == "folder":
        target.mkdir(exist_ok=True)
    values = [str(target)] if name in POSITIONAL else [flag, str(target)]
    codes = (1, 2) if path == "inspect" else (2,)
    named = (str(target), target.name) + ((flag,) if flag else ())
    assert_one_line_error(invoke(path, name, values), codes, names=named)


def _unwritable(tmp: Path) -> list[tuple[str, Path]]:
    existing_file = tmp / "a-file"
    existing_file.write_text("not a folder\n")
    foreign = tmp / "someone-elses"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me\n")
    cases = [("existing file", existing_file), ("foreign folder", foreign),
             ("under a file", existing_file / "sub"), ("read-only place", Path("/proc/kvctl-out"))]
    return cases


@pytest.mark.parametrize("sweep", [False, True])
def test_unwritable_out_fails_before_any_work(tmp_path, sweep):
    """--out that cannot be (re)placed as a whole: one line, exit 2, before the replay runs
    (the base would take seconds; these fail in milliseconds), and nothing is written."""
    for label, out in _unwritable(tmp_path):
        before = sorted(p.name for p in tmp_path.rglob("*"))
        extra = ["--sweep", "eviction=lru,fifo"] if sweep else []
        result = invoke("replay", None, ["--out", str(out), *extra])
        assert_one_line_error(result, names=("--out",))
        assert sorted(p.name for p in tmp_path.rglob("*")) == before, label
    assert (tmp_path / "someone-elses" / "notes.txt").read_text() == "keep me\n"
    assert not os.path.exists("/proc/kvctl-out")


# Every --url, --plugin-url and --plugin-token of every command that takes one.
ADDRESS_OPTIONS = {"url", "plugin_url", "plugin_token"}
ADDRESS_CASES = [(path, param.name, param.opts[0])
                 for path, command in COMMANDS.items() for param in command.params
                 if param.name in ADDRESS_OPTIONS]


def bad_address(name: str):
    """Text no address option may accept: no http(s) scheme, no port where none is implied,
    a port out of range, a query, spaces; for the token, empty or not one header word."""
    if name == "plugin_token":
        return st.one_of(st.sampled_from(["", "two words", "line\nbreak", "tab\there", "ünï"]),
                         st.text(" \t\n\r\x00\x7f", min_size=1, max_size=4))
    return st.one_of(
        st.sampled_from(["notaurl", "localhost", "ftp://h:1", "tcp://127.0.0.1:5557", "http://",
                         "://x", "", " ", "h:port", "http://h:99999999", "http:// h:1",
                         "http://h:1?x=1", "https://h:1#frag"]),
        st.text("qzjx!@#/", min_size=1, max_size=8),  # no digits: never a HOST:PORT
    )


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_bad_addresses_fail_before_any_connection(data):
    """--url, --plugin-url or --plugin-token malformed, on every command that takes them,
    with a dead --url beside it: exit 2 and one line naming the option (not the dead
    server's message, so the shape is checked before any work); a token is never echoed."""
    path, name, flag = data.draw(st.sampled_from(ADDRESS_CASES), label="option")
    value = data.draw(bad_address(name), label="value")
    if name != "url" and path in ("monitor", "exporter"):  # their base watches a scenario
        result = invoke(path, "url", ["--url", DEAD_URL, f"{flag}={value}"])
    else:
        result = invoke(path, name, [f"{flag}={value}"])
    assert_one_line_error(result, names=(flag,))
    assert not any(w in result.stderr for w in DEAD_SERVER_WORDS)
    if name == "plugin_token" and value.strip():
        assert value not in result.stderr


def test_every_address_option_is_a_case():
    """The five remote commands each contribute their --url, --plugin-url, --plugin-token;
    replay its --plugin-url (for --against, whose URL is not named --url)."""
    assert sorted((path, name) for path, name, _ in ADDRESS_CASES) == sorted(
        [(path, name) for path in ("inspect", "monitor", "exporter", "record", "calibrate")
         for name in ADDRESS_OPTIONS] + [("replay", "plugin_url")])
