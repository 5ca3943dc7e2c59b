"""`kvctl replay`'s scheduler options, named and defaulted as SGLang's server flags.

Each maps to the server flag of the same name (srt/arg_groups/fields/schedule.py) and
reaches SGLang's own classes in the replay (engine_adapter/embedded/admission.py). Kept
out of replay.py so the command file stays small; the choices come from the engine's
config module, which imports no SGLang (so `--help` stays fast).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from engine_adapter.embedded.config import SCHEDULE_POLICIES

SchedulePolicyOption = Annotated[Optional[str], typer.Option(
    "--schedule-policy",
    help=(f"SGLang's --schedule-policy: {', '.join(SCHEDULE_POLICIES)} (default fcfs); "
          "SGLang's SchedulePolicy orders the waiting queue."))]
ChunkedPrefillOption = Annotated[Optional[int], typer.Option(
    "--chunked-prefill-size", "--token-budget",
    help=("SGLang's --chunked-prefill-size: prefill tokens per step (default 8192); "
          "--token-budget is the older name."))]
MaxPrefillOption = Annotated[Optional[int], typer.Option(
    "--max-prefill-tokens",
    help="SGLang's --max-prefill-tokens: tokens in one prefill batch (default 16384).")]


def sched_header(settings: dict) -> str:
    """The report header's scheduler line: SGLang's flags, then kvctl's own mechanisms
    that are on (a stock server has none of them)."""
    mechanisms = settings.get("kvctl_mechanisms") or []
    parts = ["kvctl-only: " + ", ".join(mechanisms)] if mechanisms else []
    running = settings["max_running_requests"]
    stock = settings.get("stock_max_running_requests")
    if stock is not None and stock != running:  # config.sglang_default_max_running
        parts.append(f"kvctl's default max running; a stock server runs {stock:,}: "
                     f"--max-running {stock}")
    own = "; ".join(parts) or "as a stock SGLang server"
    return (f"schedule policy {settings['schedule_policy']}  chunked prefill "
            f"{settings['chunked_prefill_size']:,}  max prefill {settings['max_prefill_tokens']:,}"
            f"  max running {running:,}  ({own})")


def rejected_lines(doc: dict, shown: int = 5):
    """The requests SGLang would refuse, one line each (the first `shown`), as Rich text."""
    from rich.text import Text

    rejected = doc["rejected"]
    lines = [f"  rejected {r['rid']} ({r['prompt_tokens']:,} prompt tokens): {r['reason']}"
             for r in rejected["list"][:shown]]
    if rejected["requests"] > shown:
        lines.append(f"  ... and {rejected['requests'] - shown:,} more (--json lists them all)")
    return Text("\n".join(lines), style="red")
