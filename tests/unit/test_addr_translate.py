"""Address translation through a layout manifest (seed 000 0x03C-0x03I)."""

import copy
from pathlib import Path

import pytest
import yaml

from kvctl.errors import InputError
from kvctl.sizing.address import AddressRejected, Layout, RejectStage, translate
from kvctl.sizing.layout import layout_from_dict, load_layout

pytestmark = pytest.mark.unit

MANIFEST = Path(__file__).resolve().parents[2] / "examples" / "layouts" / "seed000_0x03F.yaml"


@pytest.fixture(scope="module")
def raw():
    return yaml.safe_load(MANIFEST.read_text())


@pytest.fixture(scope="module")
def layout():
    return load_layout(MANIFEST)


def _k(layout, request, token, layer=24, head=0, lane=0, kind="K"):
    return translate(layout, request=request, token=token, layer=layer, kind=kind, head=head, lane=lane)


def test_seed_000_0x03F_slot_id_is_96(layout):
    """0x03F steps 1-7: layer 24 -> g1, block 1 offset 0 -> 2001 -> slot 6; slot_id = 6*16 + 0 = 96."""
    t = _k(layout, "A", 16, head=1, lane=5)
    assert (t.group, t.layer_local, t.logical_block, t.token_offset) == ("g1", 0, 1, 0)
    assert (t.physical_block, t.pool_generation, t.physical_slot, t.valid_rows) == (2001, 7, 6, 16)
    assert t.slot_id == 96


def test_seed_000_0x03F_byte_address(layout):
    """0x03F steps 8-10: strides [65536, 8192, 512, 128, 1], E = 49,285, O = 98,570, A = 4,311,843,082."""
    t = _k(layout, "A", 16, head=1, lane=5)
    assert t.strides == (65536, 8192, 512, 128, 1)
    assert t.coordinate == (0, 6, 0, 1, 5)
    assert (t.element_offset, t.byte_offset) == (49_285, 98_570)
    assert t.base_address == 4_311_744_512
    assert t.byte_address == 4_311_843_082


def test_v_address_uses_the_v_base(layout):
    """0x03E: K and V differ only in base address: same offset from V's base."""
    t = _k(layout, "A", 16, head=1, lane=5, kind="V")
    assert t.byte_address == 4_312_793_088 + 98_570


def test_seed_000_0x03G_shorter_request_reads_shared_block(layout):
    """0x03G: B's token 24 -> logical block 1, offset 8, physical block 2001: legal."""
    t = _k(layout, "B", 24)
    assert (t.logical_block, t.token_offset, t.physical_block) == (1, 8, 2001)


def test_seed_000_0x03G_visibility_rejects_token_25(layout):
    """0x03G: token 25 is outside B's 25-token context even though block 2001 has 16 valid rows."""
    with pytest.raises(AddressRejected) as err:
        _k(layout, "B", 25)
    assert err.value.stage is RejectStage.REQUEST_VISIBILITY


def test_request_visibility_is_checked_before_the_layer(layout):
    """0x03G order: request visibility first, even when the layer is also out of range."""
    with pytest.raises(AddressRejected) as err:
        _k(layout, "B", 25, layer=99)
    assert err.value.stage is RejectStage.REQUEST_VISIBILITY


def test_seed_000_0x03H_successor_slots(layout):
    """0x03H: C's token 16 in the successor: g0 1003 -> slot 0 -> slot_id 0; g1 2003 -> slot 4 -> 64."""
    assert _k(layout, "C_v3", 16, layer=0).slot_id == 0
    assert _k(layout, "C_v3", 16, layer=24).slot_id == 64


def test_uncommitted_row_fails_physical_validity(raw):
    """0x03G reverse failure: a visible row the descriptor has not committed must not be read."""
    data = copy.deepcopy(raw)
    data["groups"][1]["descriptors"][2002]["valid_rows"] = 0
    with pytest.raises(AddressRejected) as err:
        _k(layout_from_dict(data), "A", 32)
    assert err.value.stage is RejectStage.PHYSICAL_VALIDITY


def test_stale_generation_fails_physical_identity(raw):
    """0x03A: a descriptor from an older pool generation names a recycled object."""
    data = copy.deepcopy(raw)
    data["groups"][1]["descriptors"][2001]["pool_generation"] = 6
    with pytest.raises(AddressRejected) as err:
        _k(layout_from_dict(data), "A", 16)
    assert err.value.stage is RejectStage.PHYSICAL_IDENTITY


def test_table_bounds_are_checked_for_an_unvalidated_layout(layout):
    """0x03I: logical_block < len(table), even when a caller builds a Layout by hand."""
    short = dict(layout.requests)
    a = short["A"]
    short["A"] = type(a)(id="A", context_length=33, table_version=5,
                         block_tables={"g0": (1000, 1001, 1002), "g1": (2000,)})
    bad = Layout(name="hand-built", groups=layout.groups, requests=short)
    with pytest.raises(AddressRejected) as err:
        _k(bad, "A", 16)
    assert err.value.stage is RejectStage.TABLE_BOUNDS


def test_head_out_of_range_fails_coordinates(layout):
    """0x03I: 0 <= head < kv_heads_local (4)."""
    with pytest.raises(AddressRejected) as err:
        _k(layout, "A", 16, head=4)
    assert err.value.stage is RejectStage.COORDINATE


def test_rejection_is_an_input_error_with_exit_2(layout):
    """A rejected translation is bad input: one line, exit code 2."""
    with pytest.raises(InputError) as err:
        _k(layout, "Z", 0)
    assert err.value.exit_code == 2
    assert str(err.value) == "rejected at unknown request: no request 'Z' in the layout"
