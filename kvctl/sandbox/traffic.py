"""A built-in shared-prefix workload for the sandbox (`kvctl sandbox --traffic`).

Shaped like chat traffic on one model: a few long system prompts that many requests share,
each followed by a user turn of its own, then a short reply::

    prompt = system[k] (prefix_tokens, shared)  +  turn (turn_min..turn_max tokens, unique)
    reply  = reply_min..reply_max new tokens

`workers` threads each send one request at a time, so up to `workers` requests hold KV at
once (protected prefix + private turn and reply). The unique turns fill the radix cache until
SGLang evicts, so free, evictable, protected and private all move. Token ids stay below the
tiny model's vocabulary (files.VOCAB). Deterministic for a seed; nothing is logged.

`text=True` sends each prompt as text, one character per id (tokenizer.py `render`), for a
server started with the sandbox's tokenizer; a fleet's traffic goes through SGLang's router
that way, whose cache-aware policy routes on the text.
"""

from __future__ import annotations

import json
import random
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass

from kvctl.sandbox.files import VOCAB
from kvctl.sandbox.tokenizer import render


@dataclass(frozen=True, kw_only=True)
class TrafficShape:
    prefixes: int = 4
    prefix_tokens: int = 256
    turn_min: int = 16
    turn_max: int = 96
    reply_min: int = 8
    reply_max: int = 48
    workers: int = 3
    seed: int = 0

    def prompt(self, rng: random.Random, systems: list[list[int]]) -> tuple[list[int], int]:
        """(input_ids, max_new_tokens) of the next request."""
        turn = [rng.randrange(1, VOCAB) for _ in range(rng.randint(self.turn_min, self.turn_max))]
        return rng.choice(systems) + turn, rng.randint(self.reply_min, self.reply_max)

    def systems(self) -> list[list[int]]:
        rng = random.Random(self.seed)
        return [[rng.randrange(1, VOCAB) for _ in range(self.prefix_tokens)]
                for _ in range(self.prefixes)]


class Traffic:
    """Background senders to `url`/generate until `stop()`; counts sent and failed."""

    def __init__(self, url: str, shape: TrafficShape | None = None, *,
                 text: bool = False) -> None:
        self.url = url.rstrip("/")
        self.shape = shape or TrafficShape()
        self.text = text
        self.sent = 0
        self.failed = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(worker,), daemon=True,
                                          name=f"kvctl-sandbox-traffic-{worker}")
                         for worker in range(self.shape.workers)]

    def start(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout_s)

    def __enter__(self) -> Traffic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, worker: int) -> None:
        rng = random.Random(self.shape.seed * 1000 + worker + 1)
        systems = self.shape.systems()
        while not self._stop.is_set():
            ids, reply = self.shape.prompt(rng, systems)
            body = {"sampling_params": {"max_new_tokens": reply, "temperature": 0,
                                        "ignore_eos": True},
                    **({"text": render(ids)} if self.text else {"input_ids": ids})}
            request = urllib.request.Request(
                f"{self.url}/generate", data=json.dumps(body).encode(), method="POST",
                headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=120) as answer:
                    answer.read()
                with self._lock:
                    self.sent += 1
            except (OSError, urllib.error.HTTPError) as exc:
                with self._lock:
                    self.failed += 1
                    self.last_error = f"{type(exc).__name__}: {exc}"
                self._stop.wait(1.0)  # a server that is going away: do not spin
