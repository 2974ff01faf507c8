"""Micro-benchmarks of single cache operations (see ``operations.py`` for names and targets).

Each benchmark opens a fresh cache, pre-populates what the operation needs, then times one call
per round; keys and values are handed to the call by an untimed setup, so the timed region is the
cache method alone. After timing, each benchmark checks the cache's answer, so a broken
implementation fails instead of looking fast.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Iterator
from typing import Any, Callable

from benchmarks.micro.implementations import CacheLike
from benchmarks.micro.measure import Measure, Setup

KEY_COUNT = 1_000
VALUE_100B = b"a" * 100
OTHER_100B = b"b" * 100
VALUE_1KB = b"f" * 1_000
VALUE_10KB = b"c" * 10_000
VALUE_1MB = b"d" * 1_000_000  # above the 32 KiB default disk_min_file_size: a value file
OTHER_1MB = b"e" * 1_000_000

OpenCache = Callable[..., CacheLike]
WARM_READS = 20_000
UNIFORM_ITEMS = 200_000  # more than the memory tier holds
QUICK_UNIFORM_ITEMS = 20_000  # (a smoke run: a tenth, the same code paths)


def names(prefix: str, count: int) -> list[str]:
    """Return ``count`` distinct str keys."""
    return [f"{prefix}-{index}" for index in range(count)]


def populate(cache: CacheLike, keys: Iterable[str], value: Any) -> None:
    for key in keys:
        cache.set(key, value)


def arguments(calls: Iterator[tuple[Any, ...]]) -> Setup:
    """Turn an iterator of argument tuples into a pedantic ``setup``."""
    return lambda: (next(calls), {})


def measure_get_hits(cache: CacheLike, measure: Measure, operation: str, value: bytes) -> None:
    keys = names("key", KEY_COUNT)
    populate(cache, keys, value)
    last = measure(operation, cache.get, arguments((key,) for key in itertools.cycle(keys)))
    assert last == value


def measure_new_keys(cache: CacheLike, measure: Measure, operation: str, value: bytes) -> None:
    populate(cache, names("key", KEY_COUNT), VALUE_100B)
    new_keys = (f"new-{index}" for index in itertools.count())
    assert measure(operation, cache.set, arguments((key, value) for key in new_keys)) is True
    assert cache.get("new-0") == value


def test_get_hit_100b(open_cache: OpenCache, measure: Measure) -> None:
    measure_get_hits(open_cache(), measure, "get_hit_100b", VALUE_100B)


def test_get_hit_10kb(open_cache: OpenCache, measure: Measure) -> None:
    measure_get_hits(open_cache(), measure, "get_hit_10kb", VALUE_10KB)


def test_get_miss(open_cache: OpenCache, measure: Measure) -> None:
    cache = open_cache()
    populate(cache, names("key", KEY_COUNT), VALUE_100B)
    missing = itertools.cycle(names("missing", KEY_COUNT))
    assert measure("get_miss", cache.get, arguments((key,) for key in missing)) is None


def test_get_cold_100b(open_cache: OpenCache, measure: Measure) -> None:
    cache = open_cache()
    keys = names("key", measure.calls("get_cold_100b"))  # every read is a key's first
    with cache.transact():
        populate(cache, keys, VALUE_100B)
    assert measure("get_cold_100b", cache.get, arguments((key,) for key in keys)) == VALUE_100B


def measure_get_other(
    open_cache: OpenCache, measure: Measure, operation: str, value: bytes
) -> None:
    """Reads, each of a key's first, of keys written through another Cache object on the same
    directory (closed before the reads): neither object's memory tier holds them."""
    writer = open_cache()
    keys = names("key", measure.calls(operation))
    with writer.transact():
        populate(writer, keys, value)
    writer.close()
    reader = open_cache(same_as=writer)
    len(reader)  # untimed: opens the connections (of every shard, in a FanoutCache)
    assert measure(operation, reader.get, arguments((key,) for key in keys)) == value


def test_get_other_100b(open_cache: OpenCache, measure: Measure) -> None:
    measure_get_other(open_cache, measure, "get_other_100b", VALUE_100B)


def test_get_other_10kb(open_cache: OpenCache, measure: Measure) -> None:
    measure_get_other(open_cache, measure, "get_other_10kb", VALUE_10KB)


def test_get_miss_new(open_cache: OpenCache, measure: Measure) -> None:
    cache = open_cache()
    populate(cache, names("key", KEY_COUNT), VALUE_100B)
    missing = (f"missing-{index}" for index in itertools.count())
    assert measure("get_miss_new", cache.get, arguments((key,) for key in missing)) is None


def test_get_uniform_1kb(open_cache: OpenCache, measure: Measure) -> None:
    cache = open_cache()
    count = QUICK_UNIFORM_ITEMS if measure.quick else UNIFORM_ITEMS
    with cache.transact():
        populate(cache, names("key", count), VALUE_1KB)
    draw = random.Random(0)
    keys = (f"key-{draw.randrange(count)}" for _ in itertools.count())
    # The steady state of a long-running reader, not the first reads of a fresh one: as many
    # untimed reads first as the timed ones of all repeats (both libraries alike).
    for key in itertools.islice(keys, WARM_READS // 10 if measure.quick else WARM_READS):
        cache.get(key)
    assert measure("get_uniform_1kb", cache.get, arguments((key,) for key in keys)) == VALUE_1KB


def test_set_new_100b(open_cache: OpenCache, measure: Measure) -> None:
    measure_new_keys(open_cache(), measure, "set_new_100b", VALUE_100B)


def test_set_overwrite_100b(open_cache: OpenCache, measure: Measure) -> None:
    cache = open_cache()
    keys = names("key", KEY_COUNT)
    populate(cache, keys, VALUE_100B)
    # Every call changes the stored bytes (the two values alternate, pass by pass): SQLite writes
    # no page for a row updated to what it already holds, which would flatter the library that
    # leaves the rest of the row alone (ours keeps store_time; python-diskcache rewrites it).
    values = itertools.cycle([OTHER_100B] * KEY_COUNT + [VALUE_100B] * KEY_COUNT)
    calls = zip(itertools.cycle(keys), values)
    assert measure("set_overwrite_100b", cache.set, arguments(calls)) is True
    assert cache.get(keys[0]) in (VALUE_100B, OTHER_100B)


def test_set_10kb(open_cache: OpenCache, measure: Measure) -> None:
    measure_new_keys(open_cache(), measure, "set_10kb", VALUE_10KB)


def test_set_1mb(open_cache: OpenCache, measure: Measure) -> None:
    # Overwrites of a few keys: each call writes one value file and removes the one it replaces,
    # so memory and disk stay bounded; with new keys, hundreds of MB of dirty pages would pile up
    # and whichever side ran later would hit kernel writeback stalls.
    cache = open_cache()
    keys = names("big", 8)
    populate(cache, keys, VALUE_1MB)
    calls = ((key, OTHER_1MB) for key in itertools.cycle(keys))
    assert measure("set_1mb", cache.set, arguments(calls)) is True
    assert cache.get(keys[0]) == OTHER_1MB


def test_delete(open_cache: OpenCache, measure: Measure) -> None:
    cache = open_cache()
    keys = names("key", measure.calls("delete"))  # one existing key per call
    populate(cache, keys, VALUE_100B)
    assert measure("delete", cache.delete, arguments((key,) for key in keys)) is True
    assert cache.get(keys[0]) is None


def test_incr(open_cache: OpenCache, measure: Measure) -> None:
    cache = open_cache()
    counters = names("counter", 100)
    populate(cache, counters, 0)
    measure("incr", cache.incr, arguments((key,) for key in itertools.cycle(counters)))
    assert sum(cache.get(key) for key in counters) == measure.calls("incr")


def test_get_lru(open_cache: OpenCache, measure: Measure) -> None:
    cache = open_cache(eviction_policy="least-recently-used")
    measure_get_hits(cache, measure, "get_lru", VALUE_100B)
