"""Layout manifest validation (seed 000 0x03I's rejected manifests)."""

import copy
from pathlib import Path

import pytest
import yaml

from kvctl.errors import InputError
from kvctl.sizing.layout import layout_from_dict, load_layout

pytestmark = pytest.mark.unit

MANIFEST = Path(__file__).resolve().parents[2] / "examples" / "layouts" / "seed000_0x03F.yaml"


@pytest.fixture()
def raw():
    return copy.deepcopy(yaml.safe_load(MANIFEST.read_text()))


def test_seed_manifest_loads(raw):
    """The shipped 0x03F manifest is valid: two groups, four request snapshots."""
    layout = layout_from_dict(raw)
    assert [g.id for g in layout.groups] == ["g0", "g1"]
    assert sorted(layout.requests) == ["A", "B", "C", "C_v3"]


def test_layer_gap_is_rejected(raw):
    """0x03I: g1 starting at layer 25 leaves layer 24 in no group."""
    raw["groups"][1]["layers"] = [25, 32]
    raw["groups"][1]["shape"][0] = 7
    with pytest.raises(InputError, match="layer gap or overlap"):
        layout_from_dict(raw)


def test_duplicate_axis_is_rejected(raw):
    """0x03I: an axis order naming head_dim twice has no token_offset stride."""
    raw["groups"][1]["axis_order"] = ["layer_local", "physical_slot", "head_dim", "kv_head_local", "head_dim"]
    with pytest.raises(InputError, match="axis_order must name each"):
        layout_from_dict(raw)


def test_shape_disagreeing_with_block_size_is_rejected(raw):
    """The token_offset dimension must equal the group's block size."""
    raw["groups"][1]["shape"][2] = 32
    with pytest.raises(InputError, match="token_offset=32"):
        layout_from_dict(raw)


def test_overlapping_tensors_are_rejected(raw):
    """0x03I: g1's V tensor may not overlap g1's K tensor (each is 1 MiB)."""
    raw["groups"][1]["base"]["V"] = 4_311_744_512 + 1024
    with pytest.raises(InputError, match="overlap"):
        layout_from_dict(raw)


def test_slot_reuse_is_rejected(raw):
    """0x03I: two live blocks of one generation cannot hold the same slot."""
    raw["groups"][1]["descriptors"][2000]["physical_slot"] = 6
    with pytest.raises(InputError, match="both hold slot 6"):
        layout_from_dict(raw)


def test_table_length_drift_is_rejected(raw):
    """0x03I: A's 33 tokens need 3 blocks per group; a 2-entry table has drifted."""
    raw["requests"]["A"]["block_tables"]["g1"] = [2000, 2001]
    with pytest.raises(InputError, match="table-length drift"):
        layout_from_dict(raw)


def test_missing_field_names_it(raw):
    """A group without block_size fails with the field's name."""
    del raw["groups"][0]["block_size"]
    with pytest.raises(InputError, match="missing field 'block_size'"):
        layout_from_dict(raw)


def test_unreadable_file_is_one_line(tmp_path):
    """A missing manifest is an InputError naming the path."""
    with pytest.raises(InputError, match=r"layout .*absent\.yaml: no such file"):
        load_layout(tmp_path / "absent.yaml")


def test_malformed_yaml_is_one_line(tmp_path):
    """YAML syntax errors become one line naming the file."""
    path = tmp_path / "bad.yaml"
    path.write_text("groups: [\n")
    with pytest.raises(InputError, match="bad.yaml"):
        load_layout(path)
