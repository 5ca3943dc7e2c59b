"""The GPU check's wheel set (issue 27 item 1), checked without network or wheels.

The full proof (Python 3.12, the image's packages, the set installed with --no-index, a real
server) is `benchmarks/gpu_wheels.sh --prove`: a benchmark, since it downloads about 3.5 GB.
Here: the manifest's shape, the carry planner and the pruner;
tests/integration/test_gpu_wheel_closure.py checks the set against what the check imports.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu.wheel_set import (  # noqa: E402
    DEVICE_LIMIT,
    IMAGE_NAMES,
    WHEELS,
    normalise,
    plan_carries,
    prune,
    read_names,
    read_pins,
    recorded_bytes,
    uncovered,
)

IMAGE_PACKAGES = ROOT / "benchmarks" / "gpu" / "image-packages.txt"


@pytest.mark.unit
def test_every_wheel_is_pinned_once_and_none_is_on_the_image():
    """Each manifest line pins one version (==) of a name that appears once and that the
    image does not hold (a carried copy would shadow the image's)."""
    lines = [raw.split("#", 1)[0].strip() for raw in WHEELS.read_text().splitlines()]
    pins = [line for line in lines if line]
    names = [normalise(p.partition("==")[0]) for p in pins]
    assert all("==" in p and p.partition("==")[2] for p in pins)
    assert len(names) == len(set(names))
    assert set(names) & read_names(IMAGE_NAMES) == set()
    assert read_pins(WHEELS)["sglang"] == "0.5.23"


@pytest.mark.unit
def test_the_image_stand_in_only_names_image_packages_at_the_listed_versions():
    """image-packages.txt (what the proof installs for the image) names only image packages,
    and pins torch 2.11.0 and transformers 5.17.0 as KINDS.md reads them."""
    pins = read_pins(IMAGE_PACKAGES)
    assert set(pins) <= read_names(IMAGE_NAMES)
    assert (pins["torch"], pins["transformers"], pins["triton"]) == ("2.11.0", "5.17.0", "3.6.0")


@pytest.mark.unit
def test_uncovered_names_what_neither_the_image_nor_the_set_holds():
    """Names compare normalised; only the one in neither list is reported."""
    assert uncovered(["Pydantic_Core", "torch", "left.out"], {"pydantic-core": "2"},
                     {"torch"}) == ["left-out"]


@pytest.mark.unit
def test_carries_pack_largest_first_within_the_limit_with_the_tree():
    """Room per call is the limit less the tree (50): first fit, largest first, gives 40+10
    in one call and 30+8 in the next; with no tree all four fit one call."""
    sizes = {"a.whl": 40, "b.whl": 30, "c.whl": 10, "d.whl": 8}
    assert plan_carries(sizes, tree_bytes=50, limit=100) == [["a.whl", "c.whl"],
                                                             ["b.whl", "d.whl"]]
    assert plan_carries(sizes, tree_bytes=0, limit=100) == [["a.whl", "b.whl", "c.whl",
                                                             "d.whl"]]


@pytest.mark.unit
def test_a_wheel_too_big_for_any_call_is_refused_by_name():
    """One wheel larger than the room the tree leaves: a ValueError naming it and the sizes."""
    with pytest.raises(ValueError,
                       match=r"a\.whl \(60 bytes\) cannot travel with the 50-byte tree"):
        plan_carries({"a.whl": 60}, tree_bytes=50, limit=100)


@pytest.mark.unit
def test_prune_keeps_one_pinned_version_and_reports_missing(tmp_path):
    """An unpinned version and an unlisted package are removed; a pin with no wheel is named."""
    for name in ("sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl",
                 "sglang-0.5.22-cp312-cp312-manylinux_2_34_x86_64.whl",
                 "extra-1.0-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    missing = prune(tmp_path, {"sglang": "0.5.23", "orjson": "3.13.0"})
    assert missing == ["orjson"]
    assert [p.name for p in tmp_path.iterdir()] == [
        "sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl"]


def _travelling_tree_bytes() -> int:
    """What a device call carries of the tree: the files git tracks or does not ignore
    (gpu_wheels.sh's `size` step counts the same)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout
    paths = (ROOT / name for name in listed.decode().split("\0") if name)
    return sum(path.stat().st_size for path in paths if path.is_file())


@pytest.mark.unit
def test_the_tree_and_the_recorded_wheel_set_fit_one_device_call():
    """The GPU check is one call carrying the tree and the set (docs/gpu-check.md): the
    tree as it stands plus the set's recorded bytes stays under the 64 MiB a call carries.
    Fails when the tree outgrows the margin (see "If the carry is too big")."""
    wheels = recorded_bytes()
    assert wheels > 50_000_000  # the manifest records the set (SGLang's wheel alone is 39 MB)
    tree = _travelling_tree_bytes()
    assert tree + wheels <= DEVICE_LIMIT, (
        f"tree {tree} + wheels {wheels} = {tree + wheels} bytes > {DEVICE_LIMIT}")
