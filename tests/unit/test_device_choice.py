"""`--device` resolution that needs no torch: the default, cpu, and bad names."""

from __future__ import annotations

import pytest

from engine_adapter.embedded.config import EngineConfig
from engine_adapter.embedded.device import resolve_device
from kvctl.cli.device_option import resolve_device_option
from kvctl.errors import InputError

pytestmark = pytest.mark.unit


def test_no_device_and_cpu_resolve_to_cpu():
    """Omitting --device keeps the engine on the CPU, as before the option existed."""
    assert (resolve_device(None), resolve_device("cpu")) == ("cpu", "cpu")


def test_an_unknown_device_is_an_input_error_naming_the_choices():
    """--device tpu names the three valid choices."""
    with pytest.raises(InputError, match=r"unknown --device 'tpu'; valid: auto, cpu, cuda"):
        resolve_device("tpu")


def test_device_with_url_is_refused():
    """A remote server's devices are its own: --device with --url is an input error."""
    with pytest.raises(InputError, match="not --url"):
        resolve_device_option("cpu", url_given=True)
    assert resolve_device_option(None, url_given=True) == "cpu"


def test_engine_config_accepts_only_resolved_devices():
    """EngineConfig holds cpu or cuda; 'auto' must be resolved before the config is built."""
    EngineConfig(device="cuda").validate()
    with pytest.raises(InputError, match="unknown device 'auto'"):
        EngineConfig(device="auto").validate()
