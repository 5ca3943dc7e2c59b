"""The out-of-sample rule of the twin's TTFT check (issue 34 item 3): which steps fit the
clock, which requests judge it.

A clock fitted on a drive's steps and judged on the same drive's TTFT is in sample: the fit
conserves the measured step time, so in a queue-bound drive the percentiles agree nearly by
construction. So, when the clock is fitted during the drive, the drive is cut in two at the
moment request k = ceil(F x N) + 1 (in send order) is sent, F = --fit-share (default 0.5):

    requests, in the order they were sent    1 ........ k-1 | k ........... N
    steps the plugin completed               fitted (S)     | not fitted
                                                            ^ mark: the drive reads the
                                                              plugin, then sends request k
    TTFT / end-to-end judged on                             | requests k..N (held out)

The plugin's step samples carry `end_s` from the plugin's attach time, not the client's
clock, so the cut is a synchronous mark, not a time: `SendMark` counts the drive's sends
and, just before the k-th POST, calls `at_split` (DriveSampler.take_mark), which reads the
plugin while the drive's event loop waits: no request is sent during that read, so no step
of a held-out request can be in the fitted part. The skew is the other way only: steps
completed between the plugin's answer and the send (the read's return trip: 3 ms in the
e2e test, 78 ms on a loaded host) fall in neither part's fit, and every request due during
the read is sent that much late (the pause is measured: `mark_pause_s`).

Hit-rate agreement stays over all requests (it needs no clock). With --cost-model FILE
nothing is fitted here and every request is judged; without a fitted or given clock (the
roofline) likewise. Pure, except `SendMark` calling its hook.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from kvctl.errors import InputError

DEFAULT_FIT_SHARE = 0.5


def check_fit_share(share: float) -> float:
    """`share` if 0 < share < 1; else InputError naming --fit-share (one line)."""
    if not (isinstance(share, (int, float)) and 0.0 < share < 1.0):
        raise InputError(f"--fit-share must be between 0 and 1 (exclusive): the share of the "
                         f"drive's requests whose steps fit the clock, got {share}")
    return float(share)


def first_held_out(requests: int, share: float) -> int | None:
    """k, 1-based: the first request (in send order) whose steps are not fitted and whose
    TTFT is judged; ceil(share x requests) requests come before it, at least 1, and at
    least one request is held out. None when fewer than 2 requests (nothing to hold out)."""
    if requests < 2:
        return None
    return min(requests, max(2, math.ceil(share * requests) + 1))


class SendMark:
    """The drive's `on_send(line)` hook: keeps the lines in the order they were sent and
    calls `at_split()` synchronously just before the k-th is sent (module docstring)."""

    def __init__(self, k: int, at_split: Callable[[], None]) -> None:
        self.k, self._at_split = k, at_split
        self.order: list[int] = []

    def __call__(self, line: int) -> None:
        self.order.append(line)
        if len(self.order) == self.k:
            self._at_split()

    @property
    def held_out(self) -> frozenset[int]:
        """The lines sent k-th or later (empty before the k-th send)."""
        return frozenset(self.order[self.k - 1:])


@dataclass(frozen=True, kw_only=True)
class Judged:
    """The requests the TTFT agreement is judged on. `lines` None: all of them."""

    lines: frozenset[int] | None
    on: str  # the document's `agreement.ttft_judged_on`, one line
    out_of_sample: bool


def held_out(mark: SendMark, requests: int, fitted_steps: int) -> Judged:
    """Requests k..N, the clock fitted on the steps before request k was sent."""
    return Judged(lines=mark.held_out, out_of_sample=True,
                  on=f"held-out requests {mark.k:,}-{requests:,} of {requests:,} in send order "
                     f"(clock fitted on the {fitted_steps:,} steps completed before request "
                     f"{mark.k:,} was sent)")


def every_request(source: str, *, clock_name: str = "", steps: int = 0) -> Judged:
    """All requests: the clock is a file (`clock_name`, another run), the roofline, or
    fitted on all `steps` of this drive because nothing could be held out (in sample)."""
    if source == "file":
        return Judged(lines=None, out_of_sample=True,
                      on=f"all requests (clock from {clock_name}, another run)")
    if source == "fitted":
        return Judged(lines=None, out_of_sample=False,
                      on=f"all requests, IN SAMPLE (clock fitted on all {steps:,} steps of "
                         "this drive: fewer than 2 requests, nothing to hold out)")
    return Judged(lines=None, out_of_sample=True,
                  on="all requests (roofline clock: nothing fitted)")
