"""Access bookkeeping (LRU access times, LFU counts) and statistics are batched: a get never
opens a write transaction, yet stats() is exact and close() leaves the bookkeeping in the
database."""

from __future__ import annotations

import time

import pytest
from store_helpers import WriteLockHolder, item_rows

BOOKKEEPING = [
    pytest.param({'eviction_policy': 'least-recently-used'}, id='lru'),
    pytest.param({'eviction_policy': 'least-frequently-used'}, id='lfu'),
    pytest.param({'statistics': True}, id='statistics'),
    pytest.param({'statistics': True, 'eviction_policy': 'least-frequently-used'}, id='lfu+statistics'),
]


@pytest.mark.parametrize('settings', BOOKKEEPING)
def test_get_does_not_need_the_write_lock(make_store, settings):
    cache = make_store(timeout=3, **settings)
    cache.set('hit', 'value')
    cache.set('file', b'f' * 300_000)
    gets = 0
    with WriteLockHolder(cache.directory):
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline and gets < 3000:
            started = time.monotonic()
            assert cache.get('hit') == 'value'
            assert cache.get('miss') is None
            assert cache.get('hit', expire_time=True, tag=True) == ('value', None, None)
            assert cache['hit'] == 'value'
            assert 'hit' in cache
            elapsed = time.monotonic() - started
            assert elapsed < 1.0, 'a get waited %.2fs for the write lock' % elapsed
            gets += 1
        assert cache.get('file') == b'f' * 300_000
    assert gets >= 10
    # Once the lock is free the cache still works and nothing was lost.
    cache.set('after', 1)
    assert cache['hit'] == 'value'


def test_stats_counts_gets_exactly(make_cache):
    cache = make_cache(statistics=True)
    cache.set('a', 1)
    for _ in range(10):
        assert cache.get('a') == 1
    for _ in range(3):
        assert cache.get('missing') is None
    assert cache.stats() == (10, 3)
    assert cache.stats(reset=True) == (10, 3)
    assert cache.stats() == (0, 0)
    cache.get('a')
    assert cache.stats() == (1, 0)


def test_stats_counts_getitem_and_read(make_cache):
    cache = make_cache(statistics=True)
    cache.set('a', b'bytes')
    assert cache['a'] == b'bytes'
    cache.read('a').close()
    with pytest.raises(KeyError):
        cache['missing']
    assert cache.stats() == (2, 1)


def test_stats_enable_and_disable(make_cache):
    cache = make_cache()
    assert not cache.statistics
    cache.get('missing')
    assert cache.stats(enable=True) == (0, 0)
    assert cache.statistics
    cache.set('a', 1)
    cache.get('a')
    cache.get('missing')
    assert cache.stats(enable=False) == (1, 1)
    assert not cache.statistics
    cache.get('a')
    cache.get('missing')
    assert cache.stats(enable=False) == (1, 1)


def test_stats_persist_after_close(make_cache):
    cache = make_cache(statistics=True)
    cache.set('a', 1)
    for _ in range(4):
        cache.get('a')
    cache.get('missing')
    cache.close()
    reopened = make_cache()
    assert reopened.statistics
    assert reopened.stats() == (4, 1)


def test_stats_reset_is_not_undone_by_a_later_flush(make_cache):
    cache = make_cache(statistics=True)
    cache.set('a', 1)
    for _ in range(5):
        cache.get('a')
        cache.get('missing')
    assert cache.stats(reset=True) == (5, 5)
    cache.close()
    reopened = make_cache()
    assert reopened.stats() == (0, 0)


def test_stats_while_write_lock_held(make_store):
    cache = make_store(statistics=True, timeout=3)
    cache.set('a', 1)
    with WriteLockHolder(cache.directory):
        started = time.monotonic()
        for _ in range(50):
            cache.get('a')
        cache.get('missing')
        assert cache.stats() == (50, 1)
        assert time.monotonic() - started < 2.0
    cache.close()


def test_lfu_access_count_in_database_after_close(make_store):
    cache = make_store(eviction_policy='least-frequently-used')
    cache.set('only', 'value')
    for _ in range(5):
        assert cache.get('only') == 'value'
    cache.get('missing')
    cache.close()
    ((count,),) = item_rows(cache.directory, 'access_count')
    assert count == 5


def test_lru_access_time_in_database_after_close(make_store):
    cache = make_store(eviction_policy='least-recently-used')
    cache.set('only', 'value')
    ((stored_access,),) = item_rows(cache.directory, 'access_time')
    time.sleep(0.05)
    before_read = time.time()
    assert cache.get('only') == 'value'
    cache.close()
    ((access_time,),) = item_rows(cache.directory, 'access_time')
    assert access_time >= before_read - 0.01
    assert access_time > stored_access


def test_lru_bookkeeping_survives_lock_contention(make_store):
    """Reads made while another connection held the write lock still reach the database."""
    cache = make_store(eviction_policy='least-frequently-used', timeout=3)
    cache.set('only', 'value')
    with WriteLockHolder(cache.directory):
        for _ in range(7):
            cache.get('only')
    cache.close()
    ((count,),) = item_rows(cache.directory, 'access_count')
    assert count == 7


def test_bookkeeping_of_deleted_item_is_harmless(make_store):
    cache = make_store(eviction_policy='least-frequently-used', statistics=True)
    cache.set('gone', 1)
    cache.get('gone')
    cache.delete('gone')
    cache.set('gone', 2)  # a new row under the same key
    cache.close()
    ((count,),) = item_rows(cache.directory, 'access_count')
    assert count == 0
    assert make_store().get('gone') == 2


def test_reads_after_an_idle_miss_still_reach_the_database_without_close(make_store):
    # A miss records nothing under LRU without statistics; it must not leave the batch marked
    # as scheduled, or hits after the background writer went idle would never be written.
    from diskcache_core._access import FLUSH_INTERVAL

    cache = make_store(eviction_policy='least-recently-used')
    cache.set('k', 1)
    cache.close()
    ((stored_time,),) = item_rows(cache.directory, 'access_time')
    assert cache.get('missing') is None
    time.sleep(FLUSH_INTERVAL * 2 + 1.0)  # the writer thread runs, finds nothing, goes idle
    assert cache.get('k') == 1
    deadline = time.monotonic() + FLUSH_INTERVAL * 3
    while time.monotonic() < deadline:
        ((access_time,),) = item_rows(cache.directory, 'access_time')
        if access_time > stored_time:
            break
        time.sleep(0.1)
    assert access_time > stored_time, 'the hit was never written in the background'
