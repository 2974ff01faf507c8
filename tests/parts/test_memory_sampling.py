"""Sampling of a memory tier that rarely answers (``_memory/tier.py``, "Sampling").

When fewer than one get in 32 is answered from memory, most gets skip the tier: a lookup that
cannot hit costs a few tenths of a microsecond of CPU cache misses. One get in eight still looks
it up, keeps and notes keys, so a hot set that appears is found and sampling ends. Skipped gets
read SQLite, so they are as exact as any read; they count as misses.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import Any

import diskcache_core as dc
from diskcache_core._memory import admission as _admission
from diskcache_core._memory import tier as _memory

ITEMS = 5_000


class CountingEntries(OrderedDict):  # type: ignore[type-arg]
    """The tier's map, counting the lookups of gets (the tier's hit path calls its ``get``)."""

    lookups = 0

    def get(self, key: Any, default: Any = None) -> Any:
        self.lookups += 1
        return super().get(key, default)


def count_lookups(cache: dc.Cache) -> CountingEntries:
    memory = cache._memory
    counting = CountingEntries(memory.entries)
    memory.entries = counting
    memory.build_hit_path()  # (the hit path binds the map's methods)
    return counting


def filled(make_store: Any) -> dc.Cache:
    """A reader over ITEMS items written by another Cache object (its tier keeps none)."""
    writer = make_store()
    with writer.transact():
        for number in range(ITEMS):
            writer.set(f'key-{number}', number)
    return make_store(memory_item_limit=100)


def uniform_gets(cache: dc.Cache, count: int, seed: int = 0) -> None:
    draw = random.Random(seed)
    for _ in range(count):
        number = draw.randrange(ITEMS)
        assert cache.get(f'key-{number}') == number


def test_a_tier_that_rarely_answers_is_skipped_by_most_gets(make_store):
    cache = filled(make_store)
    entries = count_lookups(cache)
    uniform_gets(cache, 200)
    assert entries.lookups >= 200  # a fresh tier is looked up by every get (and by fills)
    uniform_gets(cache, 20_000, seed=1)  # about 2 gets in 100 could hit
    before = entries.lookups
    uniform_gets(cache, 8_000, seed=2)
    sampled = entries.lookups - before
    assert 8_000 // (_admission.SAMPLE_GAP + 1) <= sampled < 8_000 // 4
    stats = cache.memory_stats()
    assert stats.hits + stats.misses == 28_200  # every get counted once


def test_sampling_ends_when_a_hot_set_appears(make_store):
    cache = filled(make_store)
    uniform_gets(cache, 20_000)
    entries = count_lookups(cache)
    before = entries.lookups
    uniform_gets(cache, 800, seed=1)
    assert entries.lookups - before < 400  # sampling
    hot = [f'key-{number}' for number in range(20)]
    for _ in range(300):
        for key in hot:
            cache.get(key)
    before_hits, before = cache.memory_stats().hits, entries.lookups
    for _ in range(50):
        for key in hot:
            cache.get(key)
    assert cache.memory_stats().hits - before_hits == 1_000  # every get answered from memory
    assert entries.lookups - before == 1_000


def test_sampled_gets_see_every_write_of_another_cache_object(make_store):
    cache = filled(make_store)
    writer = make_store()
    uniform_gets(cache, 20_000)
    draw = random.Random(3)
    current = {f'key-{number}': number for number in range(ITEMS)}
    keys = list(current)[:50]  # few keys: the tier holds some of them
    for step in range(6_000):
        key = draw.choice(keys)
        if step % 10 == 0:
            current[key] = ('new', step)
            writer.set(key, current[key])
        elif step % 97 == 0:
            writer.delete(key)
            current[key] = None
        assert cache.get(key) == current[key]


def test_statistics_reset_and_new_limits_while_sampling(make_store):
    cache = filled(make_store)
    uniform_gets(cache, 20_000)
    assert cache.memory_stats(reset=True).misses > 0
    uniform_gets(cache, 3_000, seed=1)
    stats = cache.memory_stats()
    assert stats.hits + stats.misses == 3_000
    cache.memory_item_limit = 50
    uniform_gets(cache, 3_000, seed=2)
    cache.memory_item_limit = 0  # off: gets read SQLite alone
    uniform_gets(cache, 500, seed=3)
    assert cache.memory_stats().items == 0
    cache.memory_item_limit = 100
    uniform_gets(cache, 500, seed=4)


def test_a_fanout_cache_samples_each_shard(tmp_path):
    writer = dc.FanoutCache(str(tmp_path), shards=4)
    for number in range(ITEMS):
        writer.set(f'key-{number}', number)
    cache = dc.FanoutCache(str(tmp_path), shards=4, memory_item_limit=80)  # 20 of 1,250 per shard
    try:
        uniform_gets(cache, 40_000)
        stats = cache.memory_stats()
        assert stats.hits + stats.misses == 40_000
        assert all(shard._memory.admission.gap for shard in cache._shards)
    finally:
        cache.close()
        writer.close()


def test_a_tier_turned_off_under_a_get_keeps_and_answers_nothing(make_store):
    cache = make_store()
    writer = make_store()
    cache.set('key', 1)
    tier = cache._memory
    assert len(tier.entries) == 1
    cache.memory_item_limit = 0
    # A get under way holds the old tier: it keeps and answers nothing any more.
    for value in range(2, 6):
        writer.set('key', value)
        assert cache.get('key') == value
        assert tier.hit('key', None) in (_memory.MISS, _memory.FILL)
        assert cache.get('key') == value
    assert len(tier.entries) == 0


def test_a_get_skipping_the_tier_makes_no_call_into_it(make_store):
    # A skipped get costs no call: Cache.get counts it down itself (the tier-on cost of a miss
    # of a key never read is what stays of a skipped get, ~0.15 us over the tier off).
    cache = filled(make_store)
    uniform_gets(cache, 20_000, seed=1)  # sampling: most gets skip the tier
    memory = cache._memory
    calls = []
    answer, skipping = memory._answer, memory._skipping

    def counted_skipping(key: Any, default: Any) -> Any:
        calls.append(key)
        return skipping(key, default)

    memory._skipping = counted_skipping  # what `hit` is while a gap lasts (for other callers)
    if memory.hit is skipping:
        memory.hit = counted_skipping
    before = cache.memory_stats()
    skipped = 0
    draw = random.Random(3)
    for _ in range(800):
        skipped += memory.answering is None
        number = draw.randrange(ITEMS)
        assert cache.get(f'key-{number}') == number
    assert skipped >= 800 * _admission.SAMPLE_GAP // (_admission.SAMPLE_GAP + 1) - 100
    assert calls == []  # the gap's gets were counted down without calling the tier
    after = cache.memory_stats()
    # Each get counted once, as a hit or a miss, the gap's misses as it began but only once made.
    assert (after.hits + after.misses) - (before.hits + before.misses) == 800
    assert memory.answering is None or memory.answering is answer


def test_a_known_absent_hit_counts_once_and_a_reset_restarts_the_counts(make_store):
    cache = make_store()
    for _ in range(3):  # read, seen lately, kept "absent"
        assert cache.get('gone') is None
    memory = cache._memory
    hits, absent, stats = memory.admission.hits, memory.admission.absent_hits, cache.memory_stats()
    for _ in range(5):
        assert cache.get('gone') is None  # answered "absent" from memory
    assert memory.admission.hits == hits  # one count per hit: in absent_hits only
    assert memory.admission.absent_hits == absent + 5
    assert cache.memory_stats().hits == stats.hits + 5
    assert cache.memory_stats().misses == stats.misses
    assert cache.metrics().gets.memory == 0 and cache.metrics().gets.misses >= 5
    assert cache.memory_stats(reset=True).hits == stats.hits + 5
    assert cache.memory_stats().hits == 0
    assert cache.get('gone') is None
    assert cache.memory_stats().hits == 1
    assert cache.metrics().gets.memory == 0  # an "absent" answer is a miss to the metrics
    cache.set('here', 1)
    assert cache.get('here') == 1  # a value from memory
    assert cache.metrics().gets.memory == 1
    cache.memory_stats(reset=True)
    assert cache.metrics().gets.memory == 1  # the metrics count since the object was made
