"""The plugin's switches and KVCTL_PLUGIN_* parsing (engine_adapter/plugin/settings.py) and the
discovery entry it adds to /server_info (server_info.py). Pure: no SGLang."""

from __future__ import annotations

import pytest

from engine_adapter.plugin.server_info import add_plugin_address
from engine_adapter.plugin.settings import PluginSettings, plugin_enabled
from kvctl.errors import InputError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("environ", "enabled"), [
    ({}, False),
    ({"KVCTL_SGLANG_PLUGIN": "0"}, False),
    ({"KVCTL_SGLANG_PLUGIN": "true"}, False),
    ({"KVCTL_SGLANG_PLUGIN": "1"}, True),
    ({"SGLANG_PLUGINS": "other"}, False),
    ({"SGLANG_PLUGINS": "other, kvctl "}, True),
    ({"SGLANG_PLUGINS": "kvctl_extra"}, False),
])
def test_enabled_only_by_an_explicit_switch(environ, enabled):
    """Only KVCTL_SGLANG_PLUGIN=1 or `kvctl` named in SGLANG_PLUGINS enables the plugin."""
    assert plugin_enabled(environ) is enabled


def test_defaults_match_the_documented_values():
    """Unset variables give loopback, port 30100, no token, 1 s / 10 s cadences, 5 failures."""
    assert PluginSettings.from_env({}) == PluginSettings(
        host="127.0.0.1", port_base=30100, token=None, ledger_s=1.0, tree_s=10.0,
        max_failures=5)


def test_values_are_parsed():
    """Every variable is read."""
    settings = PluginSettings.from_env({
        "KVCTL_PLUGIN_HOST": "0.0.0.0", "KVCTL_PLUGIN_PORT": "31000", "KVCTL_PLUGIN_TOKEN": "t",
        "KVCTL_PLUGIN_LEDGER_S": "0.5", "KVCTL_PLUGIN_TREE_S": "30",
        "KVCTL_PLUGIN_MAX_FAILURES": "2"})
    assert (settings.host, settings.port_base, settings.token, settings.ledger_s,
            settings.tree_s, settings.max_failures) == ("0.0.0.0", 31000, "t", 0.5, 30.0, 2)
    assert settings.port(3) == 31003


@pytest.mark.parametrize(("name", "value", "message"), [
    ("KVCTL_PLUGIN_PORT", "http", "KVCTL_PLUGIN_PORT='http' is not an integer"),
    ("KVCTL_PLUGIN_PORT", "70000", "KVCTL_PLUGIN_PORT=70000 must be between 1 and 65535"),
    ("KVCTL_PLUGIN_LEDGER_S", "-1", "KVCTL_PLUGIN_LEDGER_S=-1 must be a finite number"),
    ("KVCTL_PLUGIN_TREE_S", "nan", "KVCTL_PLUGIN_TREE_S=nan must be a finite number"),
    ("KVCTL_PLUGIN_MAX_FAILURES", "0", "KVCTL_PLUGIN_MAX_FAILURES=0 must be >= 1"),
])
def test_bad_values_name_the_variable(name, value, message):
    """A value that does not parse is an InputError naming the variable and the value."""
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        PluginSettings.from_env({name: value})


def test_wildcard_bind_is_announced_at_the_server_host():
    """0.0.0.0 is not an address to dial: /server_info names the server's own host; an
    IPv6 host is bracketed."""
    settings = PluginSettings(host="0.0.0.0", port_base=30100)
    assert settings.url(1, server_host="10.0.0.7") == "http://10.0.0.7:30101"
    assert settings.url(0) == "http://127.0.0.1:30100"
    assert PluginSettings(host="::1").url(0) == "http://[::1]:30100"


def test_server_info_entry():
    """The hook adds kvctl_plugin (rank-0 URL, schema version, port base, DP size) to the
    document SGLang built, leaving the rest alone."""
    doc = {"host": "0.0.0.0", "dp_size": 2, "page_size": 16}
    add_plugin_address(doc, {"KVCTL_PLUGIN_HOST": "0.0.0.0", "KVCTL_PLUGIN_PORT": "30200"})
    assert doc == {"host": "0.0.0.0", "dp_size": 2, "page_size": 16,
                   "kvctl_plugin": {"url": "http://127.0.0.1:30200", "schema_version": 1,
                                    "port_base": 30200, "dp_size": 2}}


def test_whatif_rate_defaults_to_one_percent_and_refuses_a_rate_above_one():
    """KVCTL_PLUGIN_WHATIF_RATE: 0.01 when unset, 0 turns the shadow off, 1.5 is refused
    naming the variable."""
    from engine_adapter.plugin.settings import PluginSettings
    from kvctl.errors import InputError

    assert PluginSettings.from_env({}).whatif_rate == 0.01
    assert PluginSettings.from_env({"KVCTL_PLUGIN_WHATIF_RATE": "0"}).whatif_rate == 0.0
    with pytest.raises(InputError, match="KVCTL_PLUGIN_WHATIF_RATE=1.5 must be a rate in"):
        PluginSettings.from_env({"KVCTL_PLUGIN_WHATIF_RATE": "1.5"})


@pytest.mark.parametrize(("environ", "refused"), [
    ({}, False),                                                    # loopback default
    ({"KVCTL_PLUGIN_HOST": "::1"}, False),
    ({"KVCTL_PLUGIN_HOST": "localhost"}, False),
    ({"KVCTL_PLUGIN_HOST": "0.0.0.0"}, True),
    ({"KVCTL_PLUGIN_HOST": "::"}, True),
    ({"KVCTL_PLUGIN_HOST": "10.0.0.7"}, True),
    ({"KVCTL_PLUGIN_HOST": "gpu-7.internal"}, True),               # a name: assume reachable
    ({"KVCTL_PLUGIN_HOST": "0.0.0.0", "KVCTL_PLUGIN_TOKEN": "s3cret"}, False),
    ({"KVCTL_PLUGIN_HOST": "0.0.0.0", "KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED": "1"}, False),
    ({"KVCTL_PLUGIN_HOST": "0.0.0.0", "KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED": "0"}, True),
])
def test_a_public_bind_needs_a_token_or_an_explicit_opt_out(environ, refused):
    """Loopback binds serve; any other bind without KVCTL_PLUGIN_TOKEN is refused unless
    KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED=1."""
    assert (PluginSettings.from_env(environ).bind_refusal() is not None) is refused


def test_refusal_names_the_fix_and_the_opt_out_is_warned():
    """The refusal names the token, loopback and the opt-out; the opt-out gives a warning,
    a token none."""
    public = {"KVCTL_PLUGIN_HOST": "0.0.0.0", "KVCTL_PLUGIN_PORT": "31000"}
    assert PluginSettings.from_env(public).bind_refusal() == (
        "not serving on 0.0.0.0:31000: a non-loopback bind needs KVCTL_PLUGIN_TOKEN (set it, "
        "and pass --plugin-token to kvctl), or KVCTL_PLUGIN_HOST=127.0.0.1, or "
        "KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED=1 to serve it to anyone who can reach the port")
    opted = PluginSettings.from_env({**public, "KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED": "1"})
    assert opted.exposure_warning().startswith("serving /snapshot, /receipts and /records on "
                                               "0.0.0.0 WITHOUT authentication")
    assert PluginSettings.from_env({**public, "KVCTL_PLUGIN_TOKEN": "t"}).exposure_warning() is None


def test_opt_out_switch_takes_only_0_or_1():
    """KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED=yes is an InputError naming the variable."""
    with pytest.raises(InputError, match=r"^KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED='yes' must be 1"):
        PluginSettings.from_env({"KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED": "yes"})
