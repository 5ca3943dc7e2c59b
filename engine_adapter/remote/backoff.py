"""Exponential reconnect backoff for a remote attach (no sleeping: callers ask `ready`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Backoff:
    """After n consecutive failures the next attempt waits min(cap, initial * factor**(n-1)).

    Mutates itself on `failed` / `succeeded`; `now` is any monotonic clock in seconds.
    """

    initial_s: float = 0.5
    factor: float = 2.0
    cap_s: float = 30.0
    failures: int = 0
    next_attempt_s: float = 0.0

    def ready(self, now: float) -> bool:
        return now >= self.next_attempt_s

    def retry_in(self, now: float) -> float:
        return max(0.0, self.next_attempt_s - now)

    def failed(self, now: float) -> float:
        """Record a failure at `now`; returns the delay before the next attempt."""
        delay = min(self.cap_s, self.initial_s * self.factor**self.failures)
        self.failures += 1
        self.next_attempt_s = now + delay
        return delay

    def succeeded(self) -> None:
        self.failures = 0
        self.next_attempt_s = 0.0
