"""Test support: record every tree, allocator and row-pool call an engine makes.

`CallLog.attach(engine)` wraps, on the engine's own SGLang instances, the methods that
change cache state (and the eviction entry points), so that a replay leaves a list of
(object, method, normalized arguments, normalized result). Normalized: tensors become
their values, radix keys a digest of their (limit-capped) token ids plus extra key and
salt, parameter dataclasses their fields, `Req`s their rid. Two runs made the same calls
in the same order with the same arguments exactly when their lists are equal.

`tree_view()` keeps the tree's calls only, with page ids (tensor values) replaced by their
count: what a decode jump must leave unchanged (it merges allocator calls, and so hands
page ids to requests in another order, but must make the same tree calls).
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

TREE = ("match_prefix", "insert", "evict", "evict_for_alloc", "inc_lock_ref", "dec_lock_ref")
ALLOCATOR = ("alloc", "alloc_extend", "alloc_decode", "free", "free_page_ids",
             "merge_and_sort_free", "evict_to_free_tokens", "check_decode_capacity")
ROWS = ("alloc", "free")


class Tensor(tuple):
    """A tensor's values (a tuple subclass so that tree_view can tell them apart)."""


def normalize(value):
    import torch
    from sglang.srt.mem_cache.radix_cache import RadixKey

    if isinstance(value, torch.Tensor):
        return Tensor(value.reshape(-1).tolist())
    if isinstance(value, RadixKey):
        tokens = value.token_ids if value.limit is None else value.token_ids[: value.limit]
        digest = hashlib.sha1(np.asarray(tokens, dtype=np.int64).tobytes()).hexdigest()[:16]
        return ("key", len(tokens), digest, value.extra_key, value.cache_salt)
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(normalize(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), normalize(v)) for k, v in value.items()))
    if hasattr(value, "rid") and hasattr(value, "origin_input_ids"):
        return ("req", value.rid)
    if hasattr(value, "_asdict"):
        return (type(value).__name__, normalize(value._asdict()))
    if dataclasses.is_dataclass(value):
        return (type(value).__name__, tuple((f.name, normalize(getattr(value, f.name)))
                                            for f in dataclasses.fields(value)))
    if hasattr(value, "name") and hasattr(value, "value"):  # enums
        return str(value)
    return type(value).__name__


class CallLog:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.tokens_taken = 0  # allocator tokens (whole pages) the allocation calls took

    def attach(self, engine) -> CallLog:
        sg = engine.sglang_components()
        for owner, target, names in (("tree", sg.tree_cache, TREE), ("allocator", sg.allocator, ALLOCATOR),
                                     ("rows", sg.req_to_token_pool, ROWS)):
            for name in names:
                self._wrap(owner, target, name)
        return self

    def _wrap(self, owner: str, target, name: str) -> None:
        method = getattr(target, name)
        calls = self.calls

        log = self
        counts = owner == "allocator" and name in ("alloc", "alloc_extend", "alloc_decode")

        def recorded(*args, **kwargs):
            entry = [owner, name, normalize(args), normalize(kwargs), None]
            calls.append(entry)
            before = target.available_size() if counts else 0
            result = method(*args, **kwargs)
            if counts:
                log.tokens_taken += before - target.available_size()
            entry[4] = normalize(result)
            return result

        setattr(target, name, recorded)

    def full(self) -> list[tuple]:
        return [tuple(c) for c in self.calls]

    def tree_view(self) -> list[tuple]:
        return [tuple(_count_tensors(part) for part in c) for c in self.calls if c[0] == "tree"]


def _count_tensors(value):
    if isinstance(value, Tensor):
        return ("tensor", len(value))
    if isinstance(value, tuple):
        return tuple(_count_tensors(v) for v in value)
    return value


def collapse_refusals(calls: list[tuple]) -> list[tuple]:
    """Drop the repeats of a refused admission: a (match_prefix, inc_lock_ref, dec_lock_ref)
    triple for the same key as the previous such triple, with nothing but evictions since.

    That is a waiting head refused again in the next step, with only decoding in between.
    A decode jump over a blocked head matches it once instead of once per step; the
    engine allows it only under policies where that leaves eviction order unchanged: the
    repeats touch a path no other call touched since the first match (an eviction in
    between can only have shortened it), so the order of last accesses stays the same.
    """
    out: list[tuple] = []
    last_key = None
    i = 0
    while i < len(calls):
        names = [c[1] for c in calls[i : i + 3]]
        if names == ["match_prefix", "inc_lock_ref", "dec_lock_ref"]:
            key = calls[i][2]
            if key == last_key:
                i += 3
                continue
            last_key = key
            out.extend(calls[i : i + 3])
            i += 3
            continue
        if calls[i][1] not in ("evict_for_alloc", "evict"):
            last_key = None
        out.append(calls[i])
        i += 1
    return out
