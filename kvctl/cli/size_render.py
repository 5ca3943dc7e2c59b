"""`kvctl size` for people: title, summary, the per-context table, assumptions, notes.

Every line fits 80 columns without cutting a number or a name: the summary's rows are short
enough not to wrap mid-figure, table columns never truncate (`no_wrap`), and the footer
points at `kvctl explain` for the terms. A model that does not fit still shows its bytes
per token and geometry, then the verdict and the smallest split that fits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvctl.cli.glossary_terms import FOOTER
from kvctl.sizing.size_report import SizeReport
from kvctl.util.units import fmt_bytes, fmt_pct

if TYPE_CHECKING:
    from rich.console import Group


def render_size_report(report: SizeReport) -> Group:
    """The report as Rich renderables."""
    from rich.console import Group
    from rich.text import Text

    m = report.model
    title = Text.assemble(
        (m.name, "bold"),
        f" on {report.gpus} x {report.gpu.name}   TP {report.tp}  PP {report.pp}  "
        f"replicas {report.replicas}  KV {report.kv_dtype}  page {report.page_size}",
    )
    parts = [title, _summary_grid(report)]
    if report.fits:
        parts.append(_context_table(report))
        static = _static_table(report)
        if static is not None:
            parts.append(static)
    else:
        parts.append(_verdict(report))
    parts.append(_assumptions(report))
    parts.append(Text("\n".join(f"- {note}" for note in report.notes), style="dim"))
    parts.append(Text(FOOTER, style="dim"))
    return Group(*parts)


def _verdict(report: SizeReport):
    from rich.text import Text

    lines = [f"Does not fit: {report.verdict}."]
    s = report.smallest_fit
    if s is None:
        lines.append("No TP x PP up to 64 GPUs of this kind holds one "
                     f"{max(r.context for r in report.contexts):,}-token trajectory; use a "
                     "larger GPU, a smaller weight or KV dtype, or a shorter context.")
    else:
        lines.append(f"Smallest that fits: {_split(s)}.")
        if report.smallest_fit_tp_only not in (None, s):
            lines.append(f"With tensor parallelism alone: {_split(report.smallest_fit_tp_only)}.")
    return Text("\n".join(lines), style="bold red")


def _split(s) -> str:
    flags = f"--tp {s.tp}" + (f" --pp {s.pp}" if s.pp > 1 else "")
    plural = "y" if s.max_trajectories == 1 else "ies"
    return (f"{flags} = {s.gpus} GPU{'s' if s.gpus > 1 else ''}, {s.max_trajectories:,} "
            f"trajector{plural} of {s.context:,} tokens per replica")


def _assumptions(report: SizeReport):
    from rich.text import Text

    return Text("Assumptions\n" + "\n".join(f"  {a.name}: {a.value} ({a.source})"
                                            for a in report.assumptions))


def _heads(report: SizeReport) -> str:
    m = report.model
    if m.attention == "mla":
        return f"MLA latent {m.kv_lora_rank}+{m.qk_rope_head_dim}"
    dims = (f"head_dim {m.head_dim}" if m.head_dim == m.v_head_dim
            else f"K/V head_dim {m.head_dim}/{m.v_head_dim}")
    return f"{m.attention.upper()} {m.num_attention_heads} query / {m.num_kv_heads} KV heads, {dims}"


def _summary_grid(report: SizeReport):
    from rich.table import Table

    m, b = report.model, report.budget
    params = f"{m.num_params / 1e9:.2f}B params, " if m.num_params else ""
    window = (f", sliding {m.sliding_window:,} on {m.sliding_layers}/{m.num_layers} layers"
              if m.sliding_layers else "")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold cyan", no_wrap=True)
    grid.add_column()
    grid.add_row("Model", f"{m.num_layers} layers, {_heads(report)}")
    grid.add_row("", f"{params}window {m.max_context:,}{window}")
    grid.add_row("KV per token", f"{fmt_bytes(report.bytes_per_token_model)} model-wide, "
                                 f"{fmt_bytes(report.bytes_per_token_per_rank)} per GPU "
                                 f"({report.bytes_per_token_per_rank:,} B)")
    hbm = report.gpu.hbm_bytes
    if b is None:
        grid.add_row("Memory per GPU", f"{fmt_bytes(hbm)} HBM, "
                                       f"{fmt_bytes(report.weights_bytes_per_rank)} weights")
        return grid
    runtime = ("reserve" if b.rule == "reserve"
               else f"slack (mem_fraction_static {b.mem_fraction_static})")
    grid.add_row("Memory per GPU", f"{fmt_bytes(b.hbm_bytes)} HBM - {fmt_bytes(b.weights_bytes)} "
                                   f"weights - {fmt_bytes(b.runtime_bytes)} {runtime}")
    plural = "s" if report.gpus > 1 else ""
    grid.add_row("KV pool", f"{fmt_bytes(b.pool_bytes)} per GPU, "
                            f"{fmt_bytes(report.pool_bytes_node)} on {report.gpus} GPU{plural}")
    grid.add_row("", f"per GPU {report.pool_tokens_per_rank:,} tokens = "
                     f"{report.pool_pages_per_rank:,} pages of "
                     f"{fmt_bytes(report.page_bytes_per_rank)}")
    grid.add_row("Tail waste", f"(P-1)/2 = {report.tail_slots_per_sequence:g} slots = "
                               f"{fmt_bytes(report.tail_bytes_per_sequence_per_rank)} per "
                               f"sequence per GPU")
    if report.batch_tail is not None:
        t = report.batch_tail
        grid.add_row("", f"{t.sequences:,} sequences: {fmt_bytes(t.total_bytes)} = "
                         f"{fmt_pct(t.share_of_pool, 2)} of the pool")
    return grid


def _context_table(report: SizeReport):
    from kvctl.cli.fit_table import FitTable

    capped = any(r.max_trajectories != r.max_trajectories_uncapped for r in report.contexts)
    where = f" (all {report.gpus} GPUs)" if report.gpus > 1 else ""
    table = FitTable(title=f"Trajectories that fit, per context{where}, "
                        f"{report.headroom:.0%} headroom", title_justify="left",
                  title_style="bold", header_style="bold")
    for name in ("Context", "KV/traj", "per GPU", "pages"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("Max traj", justify="right", style="bold green", no_wrap=True)
    if capped:
        table.add_column("uncapped", justify="right", no_wrap=True)
    table.add_column("tail@max", justify="right", no_wrap=True)
    for r in report.contexts:
        cells = [f"{r.context:,}", fmt_bytes(r.trajectory_bytes_model),
                 fmt_bytes(r.trajectory_bytes_per_rank), f"{r.pages_per_trajectory:,}",
                 f"{r.max_trajectories:,}"]
        if capped:
            cells.append(f"{r.max_trajectories_uncapped:,}")
        cells.append(fmt_pct(r.tail_share_at_max, 2))
        table.add_row(*cells)
    return table


def _static_table(report: SizeReport):
    from kvctl.cli.fit_table import FitTable

    rows = [r.static_vs_paged for r in report.contexts if r.static_vs_paged is not None]
    if not rows:
        return None
    table = FitTable(title=f"Static worst-case reservation vs paging, mean length "
                        f"{rows[0].mean_tokens:,}",
                  title_justify="left", title_style="bold", header_style="bold")
    for name in ("Reserve", "per GPU", "static max", "used", "paged max", "used "):
        table.add_column(name, justify="right", no_wrap=True)
    for s in rows:
        table.add_row(f"{s.max_tokens:,}", fmt_bytes(s.reservation_bytes),
                      f"{s.static_trajectories * report.replicas:,}", fmt_pct(s.static_efficiency),
                      f"{s.paged_trajectories * report.replicas:,}", fmt_pct(s.paged_efficiency))
    return table
