"""The timeline of a replay: snapshot rows sampled on a virtual-time grid, bounded in
size, as CSV.

A full-trace replay runs tens of thousands of steps; a snapshot per step would cost more
than the step itself. `TimelineRecorder` samples whenever the engine's virtual clock
crosses the next multiple of `every_s` and keeps at most `max_rows` rows by decimation:
when the buffer overflows it doubles `every_s` and keeps the first row at or after each
multiple. The rule reads only the virtual clock, never wall time, so it is deterministic:

    every_s=0:   every step                       (overflow: every_s from the span so far)
    every_s=e:   first step at/after 0 e 2e 3e ... (overflow)
    every_s=2e:  first step at/after 0   2e   4e ...

`every_s=0` samples every step (a small replay's timeline is exact); a workload that
knows its horizon starts at `for_horizon(horizon_s, max_rows)` instead, so a full trace
costs about max_rows snapshots whatever its step count. The first row (step 0) and the
last step (`finish`) are always kept. Rows hold cumulative counters; the windowed hit
rate between consecutive kept rows is derived when the rows are read, so decimation never
mixes windows.
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


HORIZON_FILL = 0.8  # share of max_rows a known horizon fills: room to drain before overflow


def for_horizon(horizon_s: float | None, max_rows: int) -> float:
    """The starting cadence for a workload whose arrivals end at `horizon_s`: about
    HORIZON_FILL x max_rows rows by then, so the drain after the last arrival fits before
    an overflow halves the rows. 0.0 (every step) when the horizon is unknown or zero."""
    if horizon_s is None or horizon_s <= 0:
        return 0.0
    return horizon_s / (HORIZON_FILL * max_rows)


class TimelineRecorder:
    """Decides which steps to sample (by virtual time) and keeps the rows. Mutates only itself."""

    def __init__(self, *, max_rows: int = 2000, every_s: float = 0.0) -> None:
        if max_rows < 2 or not every_s >= 0:
            raise ValueError("max_rows >= 2 and every_s >= 0")
        self.max_rows = max_rows
        self.every_s = every_s
        self._rows: list[TimelineRow] = []
        self._skipped = False  # a step went unsampled, or a thinning dropped a row

    @property
    def sample_every_s(self) -> float:
        """The grid the kept rows lie on: 0.0 when every step reported was kept."""
        return self.every_s if self._skipped else 0.0

    def would_want(self, before_s: float, after_s: float) -> bool:
        """What `wants_between` would answer, without counting a refusal."""
        return self.every_s == 0 or after_s // self.every_s > before_s // self.every_s

    def wants_between(self, before_s: float, after_s: float) -> bool:
        """Whether the clock crossed a multiple of every_s in (before_s, after_s] (a step
        may cross several); always at every_s = 0. A refusal counts as a skipped step."""
        wanted = self.every_s == 0 or after_s // self.every_s > before_s // self.every_s
        self._skipped = self._skipped or not wanted
        return wanted

    def add(self, row: TimelineRow) -> None:
        if self._rows and self._rows[-1].step == row.step:
            return
        self._rows.append(row)
        while len(self._rows) > self.max_rows:
            self.every_s = self._coarser()
            self._rows = self._thinned()
            self._skipped = True

    def _coarser(self) -> float:
        """Twice every_s; from every step, the grid that keeps about half the span so far
        (still every step while no virtual time has passed)."""
        if self.every_s > 0:
            return self.every_s * 2
        span = self._rows[-1].virtual_time_s - self._rows[0].virtual_time_s
        return 2 * span / self.max_rows if span > 0 else 0.0

    def _thinned(self) -> list[TimelineRow]:
        """The first row at or after each multiple of every_s, the first row always (at
        every_s = 0, with no time passed: the first and the last row)."""
        every = self.every_s
        if every == 0:
            return [self._rows[0], self._rows[-1]]
        kept = [self._rows[0]]
        for row in self._rows[1:]:
            if row.virtual_time_s // every > kept[-1].virtual_time_s // every:
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


def to_csv(rows: list[TimelineRow]) -> str:
    """CSV text with a header row; floats printed with repr (round-trips exactly)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow(astuple(row))
    return buffer.getvalue()
