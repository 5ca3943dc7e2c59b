"""A compact set of 64-bit integers in numpy, for the content oracle's page hashes.

Contract:

    s = HashSet()
    s.add(values)        -> int             how many of `values` were new (duplicates, also
                                            within the batch, count once)
    value in s           -> bool             one value (a scalar probe in Python)
    len(s), s.nbytes, s.to_array()          (members in no particular order)

`values` is anything `np.asarray(..., dtype=np.uint64)` takes; every uint64 is a valid member,
0 included. `add` is vectorized: a batch costs a few dozen numpy calls (about
20 us here whatever its size, plus one cache line per value), not one Python step per value;
`in` costs about 1 us (the right tool for a binary search's few lookups). There is no removal
(the oracle's sets only grow).

Layout: open addressing with linear probing over buckets of 8 slots (one 64-byte cache line),
in one (buckets, 8) uint64 array, about 8 / load bytes per member (16 at the maximum load).

    member v -> z = mix(v) = v * C mod 2^64  (C odd: a bijection; z's high bits depend on
                                              every bit of v, so values that agree in their
                                              low or high bits still spread)
             -> home bucket (z_hi32 * buckets) >> 32, then home + 1, + 2, ... (wrapping)

    bucket:  [ z z z z z 0 0 0 ]   slots fill left to right; 0 = empty (the reserved value)

The table stores z. z == 0 only for v == 0, which is kept in a flag instead. A bucket's slots
fill from the left and nothing is removed, so a probe for z stops at the first bucket that
holds it (present) or has an empty slot (absent). `add` dedupes the batch (sorted by z, so
equal values are adjacent and, the home bucket being monotone in z, so are equal buckets),
then probes in rounds, each one gather of the pending values' buckets: a value found is
done; one absent from a bucket with room takes its next free slot, ranked among the batch's
values for that bucket; the rest step to the next bucket. Below the maximum load of 0.5
the first round settles nearly every value (a few in full buckets take one or two more); the
table grows by 1.5x (load 1/3 after) before a batch could pass it, rehashing in chunks of old
buckets (runs of ascending z already).
"""

from __future__ import annotations

import math

import numpy as np

_U64 = np.uint64
WIDTH = 8  # slots per bucket: 8 x 8 B = one cache line
MAX_LOAD = 0.5  # members per slot before the table grows
GROWTH = 1.5  # capacity factor of a rehash (load 1/3 right after)
_REHASH_ROWS = 8192  # old buckets reinserted per round of a rehash (bounds its scratch memory)

_MUL = 0x9E3779B97F4A7C15  # odd: 2^64 / golden ratio (Fibonacci hashing)
_MASK = 2**64 - 1
_C, _C_INV = _U64(_MUL), _U64(pow(_MUL, -1, 2**64))
_S32 = _U64(32)


def mix(values: np.ndarray) -> np.ndarray:
    """v * C mod 2^64 (a new array): a bijection with mix(0) == 0 whose high bits depend on
    every bit of v (values that agree in their low bits, or differ only there, spread)."""
    return values * _C


def unmix(z: np.ndarray) -> np.ndarray:
    """The inverse of `mix`: z * C^-1 mod 2^64."""
    return z * _C_INV


class HashSet:
    """A set of uint64, vectorized; see the module docstring for the contract and layout."""

    __slots__ = ("_table", "_buckets", "_count", "_zero")

    def __init__(self, capacity: int = 0) -> None:
        """capacity: members it holds before its first growth."""
        self._resize(max(1, math.ceil(capacity / (WIDTH * MAX_LOAD))))
        self._count = 0  # nonzero members (in the table)
        self._zero = False  # whether 0 is a member

    def __len__(self) -> int:
        return self._count + self._zero

    @property
    def nbytes(self) -> int:
        """Bytes of the table (the object's own few dozen bytes aside)."""
        return self._table.nbytes

    def add(self, values) -> int:
        """Insert `values`; the number that were not members before."""
        z = mix(_as_u64(values))
        if not z.size:
            return 0
        z.sort()  # equal values adjacent (and 0 first), home buckets ascending
        if len(z) > 1:
            step = z[1:] != z[:-1]
            if not step.all():
                z = z[np.concatenate(([True], step))]
        added = 0
        if z[0] == 0:
            added = int(not self._zero)
            self._zero = True
            z = z[1:]
        if z.size:
            self._reserve(self._count + len(z))
            placed = self._insert(z, probe=True)
            self._count += placed
            added += placed
        return added

    def __contains__(self, value: int) -> bool:
        """Membership of one value: a scalar probe (about 1 us)."""
        z = (int(value) * _MUL) & _MASK
        if z == 0:
            return self._zero
        table, buckets = self._table, self._buckets
        b = ((z >> 32) * buckets) >> 32  # _home, in Python ints
        while True:
            row = table[b].tolist()
            if z in row:
                return True
            if row[-1] == 0:
                return False
            b = b + 1 if b + 1 < buckets else 0

    def to_array(self) -> np.ndarray:
        """Every member (uint64), in no particular order."""
        members = unmix(self._table[self._table != 0])
        return np.append(members, _U64(0)) if self._zero else members

    def _resize(self, buckets: int) -> None:
        self._buckets = buckets
        self._table = np.zeros((buckets, WIDTH), dtype=_U64)

    def _home(self, z: np.ndarray) -> np.ndarray:
        """Home bucket of each z: its high 32 bits scaled to [0, buckets), exactly in
        integers (monotone in z; buckets < 2^32)."""
        return (((z >> _S32) * _U64(self._buckets)) >> _S32).astype(np.intp)

    def _step(self, b: np.ndarray) -> np.ndarray:
        """The next bucket of each (linear probing, wrapping), in place."""
        b += 1
        b[b == self._buckets] = 0
        return b

    def _insert(self, z: np.ndarray, probe: bool) -> int:
        """Store distinct nonzero z, sorted (the table has room for all); how many were
        absent. probe=False: none is in the table (a rehash), so skip looking for them.
        Each round gathers the pending values' buckets once: found values are done; the
        absent ones of a bucket with room are ranked (0, 1, ... in bucket order) and rank r
        takes its r-th free slot; those past its last slot, and those whose bucket is full,
        step to the next bucket for another round."""
        table = self._table
        flat = table.reshape(-1)
        b = self._home(z)
        ordered = True  # b ascending: z sorted, none stepped yet
        placed = 0
        while z.size:
            if not ordered:
                order = np.argsort(b, kind="stable")
                z, b = z[order], b[order]
            rows = table.take(b, axis=0)
            used = np.bitwise_count((rows != 0).view(_U64).reshape(-1)).astype(np.intp)
            if probe:
                used[_holds(rows, z)] = WIDTH + 1  # found: never placed, never stepped
            room = used < WIDTH
            if room.all():
                slot = used + _ranks(b)
                fits = slot < WIDTH
                flat[(b * WIDTH + slot)[fits]] = z[fits]
                going = ~fits
            else:  # rank only the values that may take a slot (no gap in a bucket)
                index = np.flatnonzero(room)
                slot = used[index] + _ranks(b[index])
                fits = slot < WIDTH
                flat[(b[index] * WIDTH + slot)[fits]] = z[index[fits]]
                going = used == WIDTH  # absent from a full bucket
                going[index[~fits]] = True
            placed += int(np.count_nonzero(fits))
            if not going.any():
                return placed
            z, b = z[going], self._step(b[going])
            ordered = False
        return placed

    def _reserve(self, members: int) -> None:
        """Grow (rehash) so that `members` nonzero members stay within MAX_LOAD."""
        if members <= MAX_LOAD * WIDTH * self._buckets:
            return
        old = self._table
        self._resize(math.ceil(members * GROWTH / (MAX_LOAD * WIDTH)))
        for start in range(0, len(old), _REHASH_ROWS):
            rows = old[start : start + _REHASH_ROWS]
            z = rows[rows != 0]
            z.sort(kind="stable")  # runs already: old buckets ascend in z (timsort: linear)
            self._insert(z, probe=False)


def _holds(rows: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Whether row i of a (n, 8) uint64 array holds z[i]: the 8 bools of a row read as one
    uint64 (8 bytes), nonzero where any is True."""
    return (rows == z[:, None]).view(_U64).reshape(-1) != 0


def _ranks(b: np.ndarray) -> np.ndarray:
    """For ascending b: how many earlier entries equal each (0, 1, ...); 0 (a scalar) when
    all differ."""
    n = len(b)
    if n < 2:
        return 0
    change = b[1:] != b[:-1]
    if change.all():
        return 0
    pos = np.arange(n)
    first = np.concatenate(([True], change))
    return pos - np.maximum.accumulate(np.where(first, pos, 0))


def _as_u64(values) -> np.ndarray:
    """A 1-D uint64 view or copy of `values`."""
    return np.asarray(values, dtype=_U64).reshape(-1)
