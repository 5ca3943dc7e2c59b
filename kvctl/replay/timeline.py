"""The per-step timeline of a replay: sampled snapshot rows, bounded in size, as CSV.

A full-trace replay runs tens of thousands of steps; a snapshot per step would cost more
than the step itself. `TimelineRecorder` samples every `every` steps and keeps at most
`max_rows` rows by decimation: when the buffer overflows, it keeps the rows on multiples
of 2 x every and doubles `every`. The rule depends only on step numbers, so it is
deterministic, and the kept rows are always evenly spaced:

    every=1:  0 1 2 3 4 5 6 7 8 ...        (overflow)
    every=2:  0   2   4   6   8 ...        (overflow)
    every=4:  0       4       8 ...

The last step is always recorded (`finish`). Rows hold cumulative counters; the windowed
hit rate between consecutive kept rows is derived when the rows are read, so decimation
never mixes windows.
"""

from __future__ import annotations

import csv
import io
from dataclasses import astuple, dataclass, fields, replace

from engine_adapter.embedded.engine import StepReport
from engine_adapter.snapshot import Snapshot


@dataclass(frozen=True, kw_only=True)
class TimelineRow:
    """One sampled step. Token counts are pool slots (see engine_adapter.snapshot)."""

    step: int
    virtual_time_s: float
    requests_submitted: int
    requests_finished: int
    prompt_tokens: int
    hit_tokens: int
    hit_rate_cumulative: float
    hit_rate_window: float
    u_kv: float
    token_usage: float
    free_tokens: int
    evictable_tokens: int
    protected_tokens: int
    private_tokens: int
    host_tokens: int
    evicted_tokens: int
    retractions: int
    mapping_lag_tokens: int
    prefill_tokens_step: int
    decode_requests_step: int
    ledger_residual_tokens: int


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(TimelineRow))


def row_from(step: int, snap: Snapshot, report: StepReport | None) -> TimelineRow:
    """A row from one snapshot (windowed hit rate filled in later by `with_windows`)."""
    led = snap.ledger
    c = snap.counters
    funnel = snap.funnel
    return TimelineRow(
        step=step,
        virtual_time_s=snap.virtual_time_s,
        requests_submitted=c.requests_submitted,
        requests_finished=c.requests_finished,
        prompt_tokens=funnel.prompt_tokens,
        hit_tokens=funnel.hit_tokens,
        hit_rate_cumulative=funnel.hit_rate or 0.0,
        hit_rate_window=0.0,
        u_kv=led.u_kv,
        token_usage=led.token_usage,
        free_tokens=led.free_tokens,
        evictable_tokens=led.evictable_tokens,
        protected_tokens=led.protected_tokens or 0,
        private_tokens=led.private_tokens or 0,
        host_tokens=led.host_tokens,
        evicted_tokens=c.evicted_tokens,
        retractions=c.retractions,
        mapping_lag_tokens=snap.mapping.lag_tokens,
        prefill_tokens_step=report.prefill_tokens if report else 0,
        decode_requests_step=report.decode_requests if report else 0,
        ledger_residual_tokens=led.residual_tokens,
    )


class TimelineRecorder:
    """Decides which steps to sample and keeps the rows. Mutates only itself."""

    def __init__(self, *, max_rows: int = 2000, every: int = 1) -> None:
        if max_rows < 2 or every < 1:
            raise ValueError("max_rows >= 2 and every >= 1")
        self.max_rows = max_rows
        self.every = every
        self._rows: list[TimelineRow] = []

    def wants(self, step: int) -> bool:
        return step % self.every == 0

    def wants_between(self, before: int, after: int) -> bool:
        """Whether (before, after] contains a sampling step (a report may cover several)."""
        return after // self.every > before // self.every

    def add(self, row: TimelineRow) -> None:
        if self._rows and self._rows[-1].step == row.step:
            return
        self._rows.append(row)
        while len(self._rows) > self.max_rows:
            self.every *= 2
            self._rows = self._thinned()

    def _thinned(self) -> list[TimelineRow]:
        """The first row at or after each multiple of `every` (rows of a jump land off grid)."""
        kept: list[TimelineRow] = []
        for row in self._rows:
            if not kept or row.step // self.every > kept[-1].step // self.every or row.step == 0:
                kept.append(row)
        return kept

    def finish(self, row: TimelineRow) -> None:
        """Record the final step even when it is off the sampling grid."""
        if not self._rows or self._rows[-1].step != row.step:
            self._rows.append(row)

    def rows(self) -> list[TimelineRow]:
        """Kept rows with `hit_rate_window` = hit / prompt tokens since the previous row."""
        out: list[TimelineRow] = []
        previous: TimelineRow | None = None
        for row in self._rows:
            prompt = row.prompt_tokens - (previous.prompt_tokens if previous else 0)
            hits = row.hit_tokens - (previous.hit_tokens if previous else 0)
            if prompt > 0:
                window = hits / prompt
            else:  # nothing admitted in between: the last window still describes the cache
                window = out[-1].hit_rate_window if out else 0.0
            out.append(replace(row, hit_rate_window=window))
            previous = row
        return out


def time_weighted_mean(times: list[float], values: list[float]) -> float:
    """Mean of a step function sampled at `times` (each value holds until the next sample);
    the plain mean when no virtual time passed."""
    if not values:
        return 0.0
    span = times[-1] - times[0]
    if span <= 0:
        return sum(values) / len(values)
    total = sum(values[i] * (times[i + 1] - times[i]) for i in range(len(values) - 1))
    return total / span


def to_csv(rows: list[TimelineRow]) -> str:
    """CSV text with a header row; floats printed with repr (round-trips exactly)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow(astuple(row))
    return buffer.getvalue()
