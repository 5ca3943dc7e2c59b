"""The content oracle's set of page hashes (engine_adapter/embedded/hash_set.py) behaves as a
Python set of uint64: same membership, same size, same `add` counts, whatever the values
(duplicates within and across batches, the reserved empty value 0, 2^64 - 1, values that
agree in their low or high bits, long probe chains, wrap-around), across many resizes.
Hypothesis runs derandomized (the same cases on every run), without a deadline."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_adapter.embedded.hash_set import MAX_LOAD, WIDTH, HashSet, mix, unmix

pytestmark = pytest.mark.unit

U64_MAX = 2**64 - 1


def found(s: HashSet, values) -> list[bool]:
    """`in` for each of `values` (any uint64 array-like)."""
    return [v in s for v in np.asarray(values, dtype=np.uint64).tolist()]


def check_equal(s: HashSet, ref: set[int], probes: list[int]) -> None:
    """Same members, same size, same answers of `in` on `probes` (members and not)."""
    assert len(s) == len(ref)
    assert sorted(s.to_array().tolist()) == sorted(ref)
    assert found(s, probes) == [p in ref for p in probes]


# A batch: values from one of a few families, the ones that stress a hash table.
values = st.one_of(
    st.integers(0, U64_MAX),  # anything
    st.integers(0, 40),  # small: 0 (the reserved value) and neighbours
    st.integers(0, 2**12 - 1).map(lambda x: x << 52),  # equal low 52 bits
    st.integers(0, 2**12 - 1).map(lambda x: (0xDEADBEEF << 32) | x),  # equal high 52 bits
    st.sampled_from([U64_MAX, U64_MAX - 1, 2**63, 2**63 - 1, 1]),
)
batches = st.lists(st.lists(values, max_size=120), min_size=1, max_size=25)


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(batches, st.lists(values, max_size=60))
def test_random_batches_equal_a_python_set(batch_list, extra_probes):
    """Each batch (duplicated in part, so some values repeat within it): `add` returns the
    number of new values; after it, membership of every value seen plus unseen probes, and
    the size, equal a Python set's."""
    s, ref = HashSet(), set()
    seen: list[int] = []
    for batch in batch_list:
        batch = batch + batch[: len(batch) // 3]
        before = len(ref)
        ref.update(batch)
        assert s.add(np.array(batch, dtype=np.uint64)) == len(ref) - before
        seen.extend(batch)
        check_equal(s, ref, seen + extra_probes)


def test_growth_across_many_resizes():
    """200,000 values in batches of 1 to 64 + size / 8 from an empty set: the table resizes
    many times, never passes MAX_LOAD, and keeps every member and no other value."""
    rng = np.random.default_rng(11)
    s, ref = HashSet(), set()
    sizes = []
    members = rng.integers(0, 2**64, size=200_000, dtype=np.uint64)
    start = 0
    while start < len(members):
        step = int(rng.integers(1, 64 + len(ref) // 8))
        batch = members[start : start + step]
        ref.update(batch.tolist())
        s.add(batch)
        start += step
        assert len(s) <= MAX_LOAD * WIDTH * s._buckets
        sizes.append(s._buckets)
    assert len(set(sizes)) >= 15  # resized at least 14 times
    assert len(s) == len(ref)
    assert all(found(s, members))
    others = rng.integers(0, 2**64, size=50_000, dtype=np.uint64)
    assert found(s, others) == [int(v) in ref for v in others.tolist()]


def test_bytes_per_member_stay_between_16_and_24():
    """At most half full, grown by 1.5: 16 to 24 B per member."""
    s = HashSet()
    rng = np.random.default_rng(3)
    for _ in range(100):
        s.add(rng.integers(0, 2**64, size=1_000, dtype=np.uint64))
        assert 16 <= s.nbytes / len(s) <= 24.1


def test_the_reserved_value_is_a_member_like_any_other():
    """0 (the table's empty slot) is absent until added, counted once, and never makes an
    empty slot read as a member."""
    s = HashSet()
    assert found(s, [0, 5]) == [False, False]
    assert s.add([5]) == 1
    assert found(s, [0, 5]) == [False, True]
    assert s.add([0, 0, 5]) == 1
    assert s.add([0]) == 0
    assert len(s) == 2
    assert found(s, [0, 5, 6]) == [True, True, False]
    assert [0 in s, 5 in s, 6 in s] == [True, True, False]
    assert sorted(s.to_array().tolist()) == [0, 5]


def test_one_home_bucket_overflows_into_a_probe_chain():
    """200 values sharing one home bucket fill it and spill over the following buckets;
    every one is found, and absent values homed there are not (their probe walks the
    whole chain to its first non-full bucket)."""
    s = HashSet(capacity=100_000)
    z = np.arange(1, 401, dtype=np.uint64) + np.uint64(2**63)  # adjacent z: one home
    homes = s._home(z)
    assert len(set(homes.tolist())) == 1
    members, absent = unmix(z[::2]), unmix(z[1::2])
    assert s.add(members) == 200
    assert all(found(s, members))
    assert not any(found(s, absent))
    assert all(int(v) in s for v in members) and not any(int(v) in s for v in absent)
    assert (s._table[homes[0] : homes[0] + 200 // WIDTH] != 0).all()  # 25 full buckets


def test_probe_chains_wrap_from_the_last_bucket_to_the_first():
    """The largest z have the last home bucket; 50 of them spill into buckets 0, 1, ..."""
    s = HashSet(capacity=1_000)
    z = np.uint64(U64_MAX) - np.arange(0, 100, dtype=np.uint64)
    assert set(s._home(z).tolist()) == {s._buckets - 1}
    members = unmix(z[::2])
    assert s.add(members) == 50
    assert (s._table[0] != 0).all()  # wrapped into bucket 0
    assert all(found(s, members))
    assert not any(found(s, unmix(z[1::2])))
    assert all(int(v) in s for v in members) and not any(int(v) in s for v in unmix(z[1::2]))


def test_mix_is_a_bijection_fixing_zero():
    """unmix(mix(v)) == v for any v, and mix(0) == 0 (only 0 maps onto the empty slot)."""
    v = np.random.default_rng(5).integers(0, 2**64, size=10_000, dtype=np.uint64)
    v[:3] = [0, 1, U64_MAX]
    assert (unmix(mix(v)) == v).all()
    assert mix(v)[0] == 0 and (mix(v)[1:] != 0).all()


def test_empty_inputs():
    """An empty batch adds nothing."""
    s = HashSet()
    assert s.add(np.empty(0, dtype=np.uint64)) == 0
    assert len(s) == 0 and not s
