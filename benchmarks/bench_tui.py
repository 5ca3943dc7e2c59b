"""Frame update time of `kvctl monitor` with a radix tree of >= 100k nodes.

The dashboard's refresh path is: a new `Snapshot` is published to the screen's reactive,
every panel's watcher re-renders, the tree browser re-indexes the per-node read and
re-syncs its mounted nodes, the compositor lays out and renders the changed widgets. This
benchmark times that path end to end in a headless app (160x50) and prints median/p95/max
against the 100 ms target, with the machine's load average (the figures scale with it).

Tree source: a SYNTHETIC per-node read (`TreeNodes`, 100,981 nodes: one shared
system-prompt node with 1,020 session subtrees of 99 nodes each; `--flat` puts every node
directly under the root instead), spliced into REAL snapshots of the embedded engine
(coding-agents, seed 7, from step 400, advanced 5 steps per frame so every panel changes)
with 500 synthetic request views holding paths in the tree. Driving the engine to 100k
nodes would take minutes, and its per-node printout is the engine's cost, not the UI's.

Each frame is timed in three parts (wall time, and CPU time of this process, which is
what a frame costs; on a loaded machine wall time also waits for other processes):
indexing the per-node read (the app's polling worker does this off the UI thread), the UI
(publish to the reactive, watchers, layout, compositor, timed without the idle sleeps
`pilot.pause()` adds), and encoding a full frame to terminal segments (headless Textual
skips the write; a full frame is an upper bound of what it would send). The total is the
sum of the three: what an operator waits for from a read arriving to its frame. After the
frame, the polling worker drops the read shown before (`MonitorApp.release_old_read`:
freeing 100k nodes' columns); that is timed too and counted in the CPU figure (the
frame's cost to this process), not in the wall total (no one waits for it). Only
`reshaped` frames free a read here: `tree` frames reuse two read objects, as a live engine
does not (every live read is new, so in `kvctl monitor` each per-node read frees one).

Kinds of refresh, alternating between two different trees/request lists:
  tree      every snapshot carries a new per-node read of the same shape as the last
            (same node ids and parents; sizes, refs and holders differ), ~1 per second live
  reshaped  every snapshot carries a new per-node read with new nodes (one more session
            subtree per frame): nothing about the last read's shape can be reused
  stats     snapshots without a per-node read (the common case: the tree is kept)

Before and after, in one run: each kind is measured for `baseline` (the browser's refresh
shortcuts switched off, see `Variant`) and for `kvctl` as shipped, in interleaved halves (baseline,
kvctl, baseline, kvctl) so that load drift hits both. Prints p50/p95 of each and the
baseline/kvctl ratio of the p95s.

    .venv/bin/python benchmarks/bench_tui.py [--frames 20] [--flat]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET_S = 0.100
SIZE = (160, 50)
SESSIONS = 1_020
NODES_PER_SESSION = 99  # a chain of 33 turns, each with two short side branches


def synthetic_tree(variant: int, *, flat: bool, extra_sessions: int = 0):
    """>= 100k TreeNodeViews in SGLang's depth-first order. `variant` changes lock refs and
    side-branch sizes, so two trees differ in content but not in shape (same ids, same
    parents); `extra_sessions` appends that many new session subtrees (new node ids: a read
    whose shape changed, as when requests inserted new prefixes)."""
    from engine_adapter.snapshot import TreeNodes, TreeNodeView

    nodes = [
        TreeNodeView(
            node_id=1,
            parent_id=None,
            depth=1,
            tokens=3_488,
            pages=218,
            recorded_lock_ref=2 + variant,
            derived_lock_ref=2 + variant,
            holders=("r0", "r1"),
            namespace="ns-37a8eec1ce19",
        )
    ]
    next_id = 2
    for session in range(SESSIONS + extra_sessions):
        parent, depth = (None, 1) if flat else (1, 2)
        for turn in range(NODES_PER_SESSION // 3):
            held = (f"r{session}",) if session < 500 and turn == 0 else ()
            chain = TreeNodeView(
                node_id=next_id,
                parent_id=parent,
                depth=depth,
                tokens=640 + 16 * (turn % 7),
                pages=40 + turn % 7,
                recorded_lock_ref=len(held),
                derived_lock_ref=len(held),
                holders=held,
                namespace="ns-37a8eec1ce19" if held else None,
            )
            nodes.append(chain)
            for side in range(2):
                nodes.append(
                    TreeNodeView(
                        node_id=next_id + 1 + side,
                        parent_id=next_id,
                        depth=depth + 1,
                        tokens=48 + 16 * side + variant,
                        pages=3 + side,
                        recorded_lock_ref=0,
                        derived_lock_ref=0,
                        medium="host" if side else "device",
                    )
                )
            parent, depth, next_id = next_id, depth + 1, next_id + 3
    return TreeNodes.of(nodes)  # by column, as the engine's snapshot builder produces it


def request_views(tree, frame: int):
    """500 running requests holding paths in `tree`; their output grows frame by frame."""
    from engine_adapter.snapshot import RequestView

    held = [n for n in tree if n.holders and n.node_id != 1][:500]
    return tuple(
        RequestView(
            rid=n.holders[0],
            state="running",
            namespace="ns-37a8eec1ce19",
            prompt_tokens=4_000 + n.tokens,
            output_tokens=10 + frame,
            prefix_hit_tokens=3_488,
            retention="retain",
            lease_node=n.node_id,
        )
        for n in held
    )


def live_run():
    """The real embedded engine on coding-agents, seed 7, 400 steps (SGLang import)."""
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.live import LiveRun
    from kvctl.replay.engine_setup import engine_config
    from kvctl.replay.scenario import load_scenario
    from kvctl.tui.heap import settle_heap

    path = Path(__file__).resolve().parents[1] / "examples" / "scenarios" / "coding-agents.yaml"
    defaults = dict(load_scenario(path).engine_defaults)
    pool = defaults.pop("pool_tokens", None)
    engine = EmbeddedEngine(engine_config(pool_tokens=pool, **defaults))
    run = LiveRun(
        engine,
        lambda i: load_scenario(path, seed=7 + i),
        pace=None,
        tree_interval_s=1.0,
        start_paused=True,
    )
    for _ in range(400):
        run.step_once()
    settle_heap()  # as `kvctl monitor` does once the engine is built (kvctl/tui/heap.py)
    return run


class StaticSource:
    """A read-only SnapshotSource holding one snapshot (the benchmark publishes by hand)."""

    read_only = True

    def __init__(self, snapshot) -> None:
        self._snapshot = snapshot

    def snapshot(self):
        return self._snapshot

    def take_receipts(self):
        return []

    def close(self) -> None:
        pass


def next_snapshot(run, tree, frame: int, *, per_node: bool):
    """Advance the real engine 5 steps and splice in the synthetic tree and requests."""
    for _ in range(5):
        run.step_once()
    real = run.snapshot()
    refs = dataclasses.replace(real.refs, per_node=per_node)
    return dataclasses.replace(
        real, refs=refs, requests=request_views(tree, frame), tree_nodes=tree if per_node else ()
    )


def tree_for(kind: str, trees, frame: int, *, flat: bool):
    """The per-node read a frame of `kind` carries (reshaped: built for the frame)."""
    if kind == "reshaped":
        return synthetic_tree(frame % 2, flat=flat, extra_sessions=frame)
    return trees[frame % 2]


def _set_label(self, node, label) -> None:
    node.set_label(label)  # Textual's: one repaint message per relabelled node


def _repaint_all(self, *, structural: bool) -> None:
    self.refresh()  # the whole browser after every sync


class Variant:
    """What is measured: `kvctl` as shipped, or `baseline`, the same app with the browser's
    refresh shortcuts switched off, as before them: it paints with Textual's own line
    cache only (relabelling an ancestor repaints every line under it), relabels through
    `set_label` (a repaint message per node), repaints the whole browser after a sync
    (not only relabelled lines), measures labels by rendering them, and indexes every
    per-node read from scratch (no lookups shared with a same-shape read).
    (Reading label keys from the columns, relabelling the "… N more" row in place, the
    index's array lookups, labels built as one string, panels skipping text equal to what
    they show and the worker freeing the last read are in both: `git stash`/checkout an
    older commit to measure without them.)"""

    def __init__(self, name: str) -> None:
        self.name = name
        self._saved: dict = {}

    def __enter__(self) -> Variant:
        from textual.widgets import Tree

        from kvctl.tui.widgets.tree.radix_tree import RadixTreeBrowser

        if self.name == "baseline":
            for attr, plain in (("_render_line", Tree._render_line),
                                ("get_label_width", Tree.get_label_width),
                                ("_relabel", _set_label),
                                ("_repaint", _repaint_all)):
                self._saved[attr] = RadixTreeBrowser.__dict__[attr]
                setattr(RadixTreeBrowser, attr, plain)
        return self

    def __exit__(self, *exc) -> None:
        from kvctl.tui.widgets.tree.radix_tree import RadixTreeBrowser

        for attr, shipped in self._saved.items():
            setattr(RadixTreeBrowser, attr, shipped)

    def forget_last_index(self) -> None:
        import kvctl.tui.tree_index as tree_index

        if self.name == "baseline":
            tree_index._last = None


KINDS = ("tree", "reshaped", "stats")
PARTS = ("index", "index_cpu", "ui", "ui_cpu", "encode", "release", "total", "total_cpu")


async def measure(run, trees, variant: Variant, *, frames: int, flat: bool,
                  results: dict) -> None:
    """`frames` frames of each kind for `variant`, appended to `results[variant][kind]`."""
    from kvctl.tui.app import make_app
    from kvctl.tui.tree_index import index_for
    from kvctl.tui.widgets.tree.radix_tree import RadixTreeBrowser

    first = next_snapshot(run, trees[0], 0, per_node=True)
    app = make_app(StaticSource(first), refresh_s=3600.0, label="bench_tui (synthetic tree)")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        browser = app.screen.query_one(RadixTreeBrowser)
        middle = trees[0][len(trees[0]) // 2].node_id
        browser.jump_to(middle)  # a path opened deep in the tree, as an operator would
        await pilot.pause()
        for kind in KINDS:
            parts = results.setdefault(variant.name, {}).setdefault(
                kind, {part: [] for part in PARTS})
            for frame in range(1, frames + 1):
                per_node = kind != "stats"
                snapshot = next_snapshot(run, tree_for(kind, trees, frame, flat=flat), frame,
                                         per_node=per_node)
                variant.forget_last_index()
                start = time.perf_counter()
                index_cpu = time.process_time()
                if per_node:
                    index_for(snapshot.tree_nodes)  # done by the polling worker thread
                indexed = time.perf_counter()
                cpu = time.process_time()
                parts["index_cpu"].append(cpu - index_cpu)
                app.publish(snapshot)  # watchers run here, synchronously
                await pilot._wait_for_screen()  # messages the watchers posted (no idle sleep)
                app.screen._on_timer_update()  # layout + compositor: the frame Textual paints
                shown = time.perf_counter()
                parts["ui_cpu"].append(time.process_time() - cpu)
                release_start = time.perf_counter()
                app.release_old_read(snapshot)  # the polling worker, once the frame is shown
                parts["release"].append(time.perf_counter() - release_start)
                await pilot.pause()  # settle (untimed) before the next frame
                update = app.screen._compositor.render_update(full=True)
                encode_start = time.perf_counter()
                update.render_segments(app.console)  # what a terminal driver would write
                encoded = time.perf_counter()
                parts["index"].append(indexed - start)
                parts["ui"].append(shown - indexed)
                parts["encode"].append(encoded - encode_start)
                parts["total"].append(
                    (indexed - start) + (shown - indexed) + (encoded - encode_start)
                )
                parts["total_cpu"].append(
                    parts["index_cpu"][-1] + parts["ui_cpu"][-1] + (encoded - encode_start)
                    + parts["release"][-1]
                )
        results.setdefault("mounted", {})[variant.name] = sum(1 for _ in _walk(browser.root))


def _walk(node):
    for child in node.children:
        yield child
        yield from _walk(child)


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def report(name: str, parts: dict[str, list[float]]) -> float:
    """Print one variant's figures for one kind; returns its wall p95."""
    total = sorted(parts["total"])
    p95 = _p95(total)
    median = statistics.median(total)
    print(
        f"  {name:<9} total p50 {median * 1e3:6.1f} ms  p95 {p95 * 1e3:6.1f} ms  "
        f"max {total[-1] * 1e3:6.1f} ms   p95/target {p95 / TARGET_S:.2f}  "
        f"{'OK' if p95 < TARGET_S else 'OVER'} (< {TARGET_S * 1e3:.0f} ms)"
    )
    print(
        f"            of which (medians): index {_median_ms(parts['index']):5.1f} ms "
        f"(worker thread), UI {_median_ms(parts['ui']):5.1f} ms "
        f"(CPU {_median_ms(parts['ui_cpu']):5.1f} ms), "
        f"terminal encode {_median_ms(parts['encode']):5.1f} ms; after the frame: "
        f"freeing the last read {_median_ms(parts['release']):4.1f} ms (worker thread)"
    )
    cpu_p95 = _p95(parts["total_cpu"])
    print(
        f"            CPU time only (what the frame costs this process): median "
        f"{_median_ms(parts['total_cpu']):5.1f} ms  p95 {cpu_p95 * 1e3:5.1f} ms  "
        f"p95/target {cpu_p95 / TARGET_S:.2f}"
    )
    return p95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20, help="frames per kind and variant")
    parser.add_argument("--flat", action="store_true", help="every node a child of the root")
    args = parser.parse_args()

    started = time.perf_counter()
    run = live_run()
    print(
        f"real engine: coding-agents seed 7 from step {run.snapshot().counters.steps}, 5 steps "
        f"per frame ({time.perf_counter() - started:.1f} s to get there incl. SGLang import)"
    )
    trees = [synthetic_tree(v, flat=args.flat) for v in (0, 1)]
    shape = (
        "flat: all under the root"
        if args.flat
        else f"{SESSIONS:,} session subtrees under one prefix"
    )
    print(
        f"tree: SYNTHETIC per-node read of {len(trees[0]):,} nodes ({shape}), two "
        f"variants alternating; 500 synthetic request views"
    )
    if len(trees[0]) < 100_000:
        sys.exit("tree too small for the benchmark")
    load = os.getloadavg()[0]
    results: dict = {}
    half = max(1, args.frames // 2)
    for name in ("baseline", "kvctl", "baseline", "kvctl"):  # interleaved halves, one run
        with Variant(name) as variant:
            asyncio.run(measure(run, trees, variant, frames=half, flat=args.flat,
                                results=results))
    run.close()
    mounted = results.pop("mounted")
    print(
        f"frame update, snapshot -> rendered {SIZE[0]}x{SIZE[1]} frame -> terminal bytes, "
        f"{2 * half} frames per kind and variant, {mounted['kvctl']} tree nodes mounted, "
        f"load average {load:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs:"
    )
    for kind in KINDS:
        print(f"{kind}:")
        before = report("baseline", results["baseline"][kind])
        after = report("kvctl", results["kvctl"][kind])
        cpu_ratio = _p95(results["baseline"][kind]["total_cpu"]) / _p95(
            results["kvctl"][kind]["total_cpu"])
        print(f"  p95 baseline / kvctl: wall {before / after:.2f}x, CPU {cpu_ratio:.2f}x")


if __name__ == "__main__":
    main()
