"""Entry points without an install: write `NAME-VERSION.dist-info` folders SGLang can find.

    python benchmarks/gpu/dist_info.py TARGET_DIR

On the lent GPU machine nothing is pip-installed from the working tree: kvctl runs from the
tree on PYTHONPATH. SGLang finds kvctl's plugin (group `sglang.srt.plugins`) and the
test-only CUDA platform (group `sglang.srt.platforms`) through `importlib.metadata`
entry points, so this writes, under TARGET_DIR (which goes on PYTHONPATH):
  kvctl-0.1.0.dist-info                      kvctl's plugin entry point, read from pyproject.toml
  kvctl_gpu_check_platform-0.0.0.dist-info   the no-kernel CUDA platform's entry point
Prints the target. Idempotent.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu.nokernel_settings import ENTRY_POINT_NAME, PLATFORM_TARGET  # noqa: E402


def write_dist(target: Path, name: str, version: str, groups: dict[str, dict[str, str]]) -> Path:
    dist = target / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = []
    for group, points in groups.items():
        lines.append(f"[{group}]")
        lines += [f"{key} = {value}" for key, value in points.items()]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return dist


def write_all(target: Path) -> list[Path]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    kvctl = write_dist(target, project["name"], project["version"],
                       dict(project.get("entry-points", {})))
    platform = write_dist(target, "kvctl-gpu-check-platform", "0.0.0", {
        "sglang.srt.platforms": {ENTRY_POINT_NAME: PLATFORM_TARGET}})
    return [kvctl, platform]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: dist_info.py TARGET_DIR", file=sys.stderr)
        sys.exit(2)
    write_all(Path(sys.argv[1]))
    print(sys.argv[1])
