"""GPU presets (kvctl.sizing.hardware): datasheet numbers, lookup, custom capacity."""

from __future__ import annotations

import pytest

from kvctl.errors import InputError
from kvctl.sizing.hardware import GPU_PRESETS, resolve_gpu, with_capacity
from kvctl.util.units import GIB

pytestmark = pytest.mark.unit

# (preset, capacity GiB, HBM bytes/s, host link bytes/s, dense bf16 FLOP/s, dense fp8 FLOP/s)
DATASHEET = [
    ("A100-80GB", 80, 2.039e12, 32e9, 312e12, None),
    ("H100-SXM", 80, 3.35e12, 64e9, 989.4e12, 1978.9e12),
    ("H200", 141, 4.8e12, 64e9, 989.4e12, 1978.9e12),
    ("B200", 180, 8.0e12, 64e9, 2250e12, 4500e12),
    ("L40S", 48, 0.864e12, 32e9, 362.05e12, 733e12),
    ("MI300X", 192, 5.3e12, 64e9, 1307.4e12, 2614.9e12),
]


@pytest.mark.parametrize(("name", "gib", "hbm_bw", "link", "bf16", "fp8"), DATASHEET)
def test_preset_datasheet_numbers(name, gib, hbm_bw, link, bf16, fp8):
    """Each preset carries the vendor datasheet's capacity, bandwidths and dense peaks."""
    spec = resolve_gpu(name)
    assert spec.hbm_bytes == gib * GIB
    assert spec.hbm_bandwidth_bytes_per_s == pytest.approx(hbm_bw, rel=1e-12)
    assert spec.host_link_bytes_per_s == link
    assert spec.peak_bf16_flops == pytest.approx(bf16, rel=1e-12)
    assert spec.peak_fp8_flops == (None if fp8 is None else pytest.approx(fp8, rel=1e-12))


def test_every_required_preset_exists():
    """The six presets the issue names are all there."""
    assert set(GPU_PRESETS) == {"A100-80GB", "H100-SXM", "H200", "B200", "L40S", "MI300X"}


def test_lookup_is_case_insensitive_with_aliases():
    """'h100' and 'H100-SXM5' both name the H100 SXM preset."""
    assert resolve_gpu("h100") is resolve_gpu("H100-SXM5") is GPU_PRESETS["H100-SXM"]


def test_unknown_gpu_names_closest():
    """An unknown GPU lists the closest presets."""
    with pytest.raises(InputError, match="closest: .*H100-SXM"):
        resolve_gpu("H100-PCIE")


def test_custom_capacity_keeps_bandwidth():
    """--hbm-gb replaces capacity only; the name says it is custom."""
    spec = with_capacity(resolve_gpu("H100-SXM"), 94 * 10**9)
    assert spec.hbm_bytes == 94 * 10**9
    assert spec.hbm_bandwidth_bytes_per_s == GPU_PRESETS["H100-SXM"].hbm_bandwidth_bytes_per_s
    assert spec.name == "H100-SXM (custom capacity)"


def test_zero_capacity_is_an_input_error():
    """A capacity of zero bytes is refused."""
    with pytest.raises(InputError, match="must be positive"):
        with_capacity(resolve_gpu("H200"), 0)
