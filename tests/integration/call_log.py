"""Test support: record every tree, allocator and row-pool call an engine makes.

`CallLog.attach(engine)` wraps, on the engine's own SGLang instances, the methods that
change cache state (and the eviction entry points), so that a replay leaves a list of
(object, method, normalized arguments, normalized result). Normalized: tensors become
their values, radix keys a digest of their (limit-capped) token ids plus extra key and
salt, parameter dataclasses their fields, `Req`s their rid. Two runs made the same calls
in the same order with the same arguments exactly when their lists are equal.

`attach` also records SGLang's scheduling classes as the engine drives them (owner
"sched"): every `SchedulePolicy.calc_priority` (the waiting rids before and after, the
new_token_ratio-free queue order), every `PrefillAdder` built (its new_token_ratio and
budgets) and each `add_chunked_req` / `add_one_req` (rid, verdict, prefix and extend end).

`tree_view()` keeps the tree's calls only, with page ids (tensor values) replaced by their
count: what a decode jump must leave unchanged (it merges allocator calls, and so hands
page ids to requests in another order, but must make the same tree calls).
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

TREE = ("match_prefix", "touch_prefix", "insert", "evict", "evict_for_alloc", "inc_lock_ref",
        "dec_lock_ref")
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
        self._wrap_scheduling(engine.prefill.admission)
        return self

    def _wrap_scheduling(self, admission) -> None:
        """Record the calls into SchedulePolicy and PrefillAdder (see module docstring):
        the policy instance's calc_priority is wrapped, and the engine's adder class (its
        `get_prefill_adder_class`) replaced by a recording subclass."""
        calls = self.calls
        policy = admission.policy
        calc = policy.calc_priority

        def calc_priority(queue, running_batch=None, processed_tokens=0):
            before = tuple(r.rid for r in queue)
            calc(queue, running_batch, processed_tokens=processed_tokens)
            calls.append(["sched", "calc_priority", before, processed_tokens,
                          tuple(r.rid for r in queue)])

        policy.calc_priority = calc_priority
        base = admission.adder_class

        class RecordingAdder(base):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                calls.append(["sched", "PrefillAdder", normalize(args[4:7]),
                              tuple(r.rid for r in args[3].reqs), None])

            def add_chunked_req(self, req):
                result = super().add_chunked_req(req)
                calls.append(["sched", "add_chunked_req", req.rid, result is not None,
                              (req.prefix_len, req.extend_end)])
                return result

            def add_one_req(self, req, has_chunked_req, truncation_align_size):
                verdict = super().add_one_req(req, has_chunked_req, truncation_align_size)
                calls.append(["sched", "add_one_req", req.rid, str(verdict),
                              (req.prefix_len, req.extend_end)])
                return verdict

        admission.adder_class = RecordingAdder

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


def scheduling(calls: list[tuple]) -> list[tuple]:
    """The scheduling-class calls only (owner "sched")."""
    return [c for c in calls if c[0] == "sched"]
