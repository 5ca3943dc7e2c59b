"""The GPU check's wheel set: read its lists, prune a download folder, plan carries, check cover.

    python benchmarks/gpu/wheel_set.py prune DEST LIST
    python benchmarks/gpu/wheel_set.py carries DEST --tree-bytes N [--limit BYTES]
    python benchmarks/gpu/wheel_set.py cover CLOSURE_JSON LIST [IMAGE_NAMES]

`prune` keeps in DEST exactly one wheel per `name==version` of LIST (exit 1 naming a pin with
no wheel); `carries` packs the wheels, largest first, into as few device calls as the limit
allows, each call carrying the working tree too (exit 1 when one wheel alone cannot travel);
`cover` exits 1 naming every distribution of the import closure that is neither on the image
(image-names.txt) nor in the set. Names compare normalised (PEP 503: lower case, runs of
'-', '_', '.' as '-').
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
WHEELS = HERE / "wheels.txt"
IMAGE_NAMES = HERE / "image-names.txt"
DEVICE_LIMIT = 64 * 1024 * 1024  # device tool README, Limits: the tree that travels


def recorded_bytes(path: Path = WHEELS) -> int:
    """The set's total size as `# set bytes: N` in the manifest records it (0 if absent)."""
    found = re.search(r"^# set bytes: (\d+)$", path.read_text(), re.MULTILINE)
    return int(found.group(1)) if found else 0


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> dict[str, str | None]:
    """`name==version` (or a bare name: version None) per non-comment line, by normalised name."""
    pins: dict[str, str | None] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        pins[normalise(name)] = version.strip() or None
    return pins


def wheel_name(path: Path) -> tuple[str, str]:
    """(normalised distribution name, version) from a wheel's file name."""
    parts = path.name.split("-")
    return normalise(parts[0]), parts[1]


def prune(dest: Path, pins: dict[str, str | None]) -> list[str]:
    """Remove wheels LIST does not pin; returns the pins with no wheel in dest."""
    present: set[str] = set()
    for wheel in sorted(dest.glob("*.whl")):
        name, version = wheel_name(wheel)
        if pins.get(name) == version and name not in present:
            present.add(name)
        else:
            wheel.unlink()
    return sorted(set(pins) - present)


def plan_carries(sizes: dict[str, int], tree_bytes: int, limit: int) -> list[list[str]]:
    """First-fit decreasing: lists of wheel files, each list plus the tree within `limit`."""
    room = limit - tree_bytes
    too_big = [n for n, s in sizes.items() if s > room]
    if too_big:
        raise ValueError(f"{too_big[0]} ({sizes[too_big[0]]} bytes) cannot travel with the "
                         f"{tree_bytes}-byte tree under {limit} bytes")
    bins: list[tuple[int, list[str]]] = []
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        for i, (used, names) in enumerate(bins):
            if used + sizes[name] <= room:
                bins[i] = (used + sizes[name], names + [name])
                break
        else:
            bins.append((sizes[name], [name]))
    return [names for _, names in bins]


def uncovered(closure: list[str], wheels: dict, image_names: set[str]) -> list[str]:
    return sorted(n for n in map(normalise, closure) if n not in wheels and n not in image_names)


def read_names(path: Path) -> set[str]:
    return set(read_pins(path))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="wheel_set.py")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prune")
    p.add_argument("dest", type=Path)
    p.add_argument("list", type=Path)
    c = sub.add_parser("carries")
    c.add_argument("dest", type=Path)
    c.add_argument("--tree-bytes", type=int, required=True)
    c.add_argument("--limit", type=int, default=DEVICE_LIMIT)
    v = sub.add_parser("cover")
    v.add_argument("closure", type=Path)
    v.add_argument("list", type=Path)
    v.add_argument("names", type=Path, nargs="?", default=IMAGE_NAMES)
    args = parser.parse_args(argv)

    if args.cmd == "prune":
        missing = prune(args.dest, read_pins(args.list))
        if missing:
            print(f"wheel_set: no wheel downloaded for {', '.join(missing)}", file=sys.stderr)
            return 1
        print(f"{len(list(args.dest.glob('*.whl')))} wheels, one version of each")
        return 0
    if args.cmd == "carries":
        sizes = {w.name: w.stat().st_size for w in sorted(args.dest.glob("*.whl"))}
        try:
            carries = plan_carries(sizes, args.tree_bytes, args.limit)
        except ValueError as exc:
            print(f"wheel_set: {exc}", file=sys.stderr)
            return 1
        total = sum(sizes.values())
        if total != recorded_bytes():
            print(f"wheel_set: the set is {total} bytes, wheels.txt records "
                  f"{recorded_bytes()}: update its '# set bytes:' line", file=sys.stderr)
        print(f"wheels {total} bytes + tree {args.tree_bytes} bytes = "
              f"{total + args.tree_bytes} of {args.limit}: {len(carries)} carr"
              f"{'y' if len(carries) == 1 else 'ies'}")
        for i, names in enumerate(carries, 1):
            used = sum(sizes[n] for n in names) + args.tree_bytes
            print(f"  call {i}: {len(names)} wheels, {used} bytes with the tree")
        (args.dest / "carries.json").write_text(json.dumps(
            {"limit": args.limit, "tree_bytes": args.tree_bytes, "wheel_bytes": total,
             "carries": carries}, indent=1))
        return 0
    closure = json.loads(args.closure.read_text())
    missing = uncovered(closure, read_pins(args.list), read_names(args.names))
    if missing:
        print(f"wheel_set: imported but neither on the image nor in the set: "
              f"{', '.join(missing)}", file=sys.stderr)
        return 1
    print(f"cover: all {len(closure)} imported distributions are on the image or in the set")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
