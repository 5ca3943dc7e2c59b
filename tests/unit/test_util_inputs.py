"""kvctl.util.inputs (taking a file from the user) and kvctl.util.atomic.atomic_dir (writing
an output folder as a whole set), on real files in a temporary folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvctl.errors import InputError
from kvctl.util.atomic import atomic_dir
from kvctl.util.inputs import check_input_file, check_out_dir, load_json, load_yaml, read_text

pytestmark = pytest.mark.unit


def test_non_utf8_names_the_file_and_line(tmp_path):
    """A bad byte on line 3 is reported as file:3 with the byte."""
    path = tmp_path / "s.yaml"
    path.write_bytes(b"name: x\nseed: 1\nbad: \xd6\n")
    with pytest.raises(InputError, match=r"s\.yaml:3: not UTF-8 text \(byte 0xd6\)"):
        read_text(path, what="scenario")


def test_a_folder_is_not_a_file(tmp_path):
    """A folder given as an input file: 'is a folder, not a file' (not 'no such file')."""
    with pytest.raises(InputError, match=r"is a folder, not a file$"):
        check_input_file(tmp_path)


def test_missing_file(tmp_path):
    """A missing path: 'no such file', with the option that named it."""
    with pytest.raises(InputError, match=r"^--trace .*absent\.jsonl: no such file$"):
        check_input_file(tmp_path / "absent.jsonl", what="--trace")


def test_fifo_is_not_a_regular_file(tmp_path):
    """A FIFO would block a reader forever: refused up front."""
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        check_input_file(fifo)


def test_yaml_and_json_errors_name_the_line(tmp_path):
    """Parse errors name file:line."""
    (tmp_path / "a.yaml").write_text("a: 1\nb: [\n")
    (tmp_path / "c.json").write_text('{\n  "a": 1,\n}\n')
    with pytest.raises(InputError, match=r"a\.yaml:3: not valid YAML"):
        load_yaml(tmp_path / "a.yaml")
    with pytest.raises(InputError, match=r"c\.json:3: not valid JSON"):
        load_json(tmp_path / "c.json")


def test_out_refuses_a_file_and_a_foreign_folder(tmp_path):
    """--out at an existing file, or at a folder of files kvctl does not write: refused."""
    (tmp_path / "f").write_text("x")
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    with pytest.raises(InputError, match="exists and is not a folder"):
        check_out_dir(tmp_path / "f")
    with pytest.raises(InputError, match="holds files kvctl did not write"):
        check_out_dir(foreign)
    with pytest.raises(InputError, match="cannot write in"):
        check_out_dir(Path("/proc/kvctl-out"))


def test_out_accepts_a_new_path_and_an_old_kvctl_output(tmp_path):
    """A new path (parents created later) and a folder kvctl wrote before are accepted, and
    the check leaves nothing behind."""
    old = tmp_path / "run"
    old.mkdir()
    (old / "report.json").write_text("{}")
    assert check_out_dir(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    assert check_out_dir(old) == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_atomic_dir_replaces_the_old_set_as_a_whole(tmp_path):
    """The new set replaces the old folder: no old file survives beside the new ones."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("old")
    (out / "hit_rate.png").write_text("old plot")
    with atomic_dir(out) as folder:
        (folder / "report.json").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == ["report.json"]
    assert (out / "report.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temp folder left


def test_ctrl_c_while_writing_leaves_the_old_folder_untouched(tmp_path):
    """KeyboardInterrupt mid-write: the old folder is intact and no temp folder remains."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic_dir(out) as folder:
        (folder / "report.json").write_text("half")
        raise KeyboardInterrupt
    assert [p.name for p in out.iterdir()] == ["report.json"]
    assert (out / "report.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_ctrl_c_on_a_new_folder_leaves_nothing(tmp_path):
    """KeyboardInterrupt while writing a new --out: nothing is created at all."""
    with pytest.raises(KeyboardInterrupt), atomic_dir(tmp_path / "fresh") as folder:
        (folder / "report.json").write_text("half")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
