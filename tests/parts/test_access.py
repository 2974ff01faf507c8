"""Access bookkeeping (LRU access times, LFU counts) and statistics are batched: a get never
opens a write transaction, yet stats() is exact and close() leaves the bookkeeping in the
database."""

from __future__ import annotations

import contextlib
import time

import pytest
from store_helpers import WriteLockHolder, connect, item_rows, wait_until

import diskcache_core as dc

BOOKKEEPING = [
    pytest.param({'eviction_policy': 'least-recently-used'}, id='lru'),
    pytest.param({'eviction_policy': 'least-frequently-used'}, id='lfu'),
    pytest.param({'statistics': True}, id='statistics'),
    pytest.param({'statistics': True, 'eviction_policy': 'least-frequently-used'}, id='lfu+statistics'),
]


@pytest.mark.parametrize('settings', BOOKKEEPING)
def test_get_does_not_need_the_write_lock(make_store, settings):
    # A get that needed the write lock would wait for it the whole busy timeout (and then
    # give up): far longer than any scheduling delay makes five gets take.
    timeout = 10
    cache = make_store(timeout=timeout, **settings)
    cache.set('hit', 'value')
    cache.set('file', b'f' * 300_000)
    gets = 0
    with WriteLockHolder(cache.directory):
        # Reads for 1.5 s (past a background flush of the bookkeeping, which finds the lock
        # taken) or 3000 rounds, and at least 10 rounds however slow the machine.
        deadline = time.monotonic() + 1.5
        while gets < 10 or (time.monotonic() < deadline and gets < 3000):
            started = time.monotonic()
            assert cache.get('hit') == 'value'
            assert cache.get('miss') is None
            assert cache.get('hit', expire_time=True, tag=True) == ('value', None, None)
            assert cache['hit'] == 'value'
            assert 'hit' in cache
            elapsed = time.monotonic() - started
            assert elapsed < timeout, 'a get waited %.2fs for the write lock' % elapsed
            gets += 1
        assert cache.get('file') == b'f' * 300_000
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
    timeout = 10  # what a get or stats() that needed the write lock would wait (and then fail)
    cache = make_store(statistics=True, timeout=timeout)
    cache.set('a', 1)
    with WriteLockHolder(cache.directory):
        started = time.monotonic()
        for _ in range(50):
            cache.get('a')
        cache.get('missing')
        assert cache.stats() == (50, 1)
        assert time.monotonic() - started < timeout
    cache.close()


def test_a_stats_reset_that_times_out_loses_no_count(make_store):
    cache = make_store(statistics=True, timeout=0.05, eviction_policy='least-frequently-used')
    cache.set('a', 1)
    for _ in range(10):
        cache.get('a')
        cache.get('missing')
    with WriteLockHolder(cache.directory):
        with pytest.raises(dc.Timeout):
            cache.stats(reset=True)
    for _ in range(3):
        cache.get('a')
        cache.get('missing')
    assert cache.stats(reset=True) == (13, 13)
    assert cache.stats() == (0, 0)
    cache.close()
    ((count,),) = item_rows(cache.directory, 'access_count')
    assert count == 13  # the reads the failed reset had taken out were written after all


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
    from diskcache_core._eviction import access as _access

    cache = make_store(eviction_policy='least-recently-used')
    cache.set('k', 1)
    cache.close()
    ((stored_time,),) = item_rows(cache.directory, 'access_time')
    assert cache.get('missing') is None
    # The writer thread (if the miss started one) runs, finds nothing and goes idle: wait for
    # that rather than for a fixed time, which a loaded machine may not be done in.
    assert wait_until(lambda: _access._flusher.thread is None, timeout=60), 'the writer never went idle'
    time.sleep(0.01)  # a hit time clearly after the stored one
    assert cache.get('k') == 1
    # Written within FLUSH_INTERVAL on an idle machine; a loaded one is given far longer.
    assert wait_until(
        lambda: item_rows(cache.directory, 'access_time')[0][0] > stored_time, timeout=60
    ), 'the hit was never written in the background'


def test_a_large_batch_is_written_in_parts_and_a_failed_part_is_kept(make_store, monkeypatch):
    """The access log is written `_FLUSH_BATCH` keys per transaction (the write lock is never
    held for the whole batch); a part that fails goes back to the log, with every part after
    it, and is written by the next flush; the parts before it are not written twice."""
    from diskcache_core._eviction import evictor as _eviction

    monkeypatch.setattr(_eviction, '_FLUSH_BATCH', 40)
    cache = make_store(eviction_policy='least-frequently-used', statistics=True)
    keys = [f'k{number}' for number in range(100)]
    with cache.transact():
        for key in keys:
            cache.set(key, key)
    evictor = cache._evictor
    evictor.flush_access_log()  # nothing pending yet from this process's reads
    for key in keys:
        assert cache.get(key) == key
    cache.get('missing')
    store = evictor.store
    real_transaction = store.transaction
    transactions = []

    def failing_third(*args, **kwargs):
        transactions.append(len(transactions))
        if len(transactions) == 3:
            raise RuntimeError('injected')
        return real_transaction(*args, **kwargs)

    monkeypatch.setattr(store, 'transaction', failing_third)
    with pytest.raises(RuntimeError):
        evictor.flush_access_log()
    assert len(transactions) == 3  # 40 + 40 written, the last 20 given back
    assert sorted(evictor.access.pending) == sorted((key, 1) for key in keys[80:])
    counts = dict(item_rows(cache.directory, 'key, access_count'))
    assert [counts[key] for key in keys] == [1] * 80 + [0] * 20
    monkeypatch.setattr(store, 'transaction', real_transaction)
    evictor.flush_access_log()
    counts = dict(item_rows(cache.directory, 'key, access_count'))
    assert all(counts[key] == 1 for key in keys)
    assert cache.stats() == (100, 1)  # the hits and misses went with the first part, once


def test_flush_access_log_waits_for_a_batch_the_background_flusher_took(tmp_path):
    import threading

    reader = dc.Cache(tmp_path, statistics=True, memory_size_limit=0)
    other = dc.Cache(tmp_path, memory_size_limit=0)
    for _ in range(5):
        reader.get('missing')
    access = reader._evictor.access
    seen = []
    started = threading.Event()

    def flush_then_look():
        started.set()
        reader.flush_access_log()
        seen.append(other.stats(enable=True))

    # Stand in for the background flusher between taking the batch and writing it.
    with access.flushing:
        batch = access.take()
        thread = threading.Thread(target=flush_then_look)
        thread.start()
        started.wait(10)
        time.sleep(0.05)  # (only lets the old code return early: no bound is asserted)
        with reader._store.transaction() as state:
            access.write(state.con, batch)
    thread.join(30)
    assert seen == [(0, 5)]
    reader.close()
    other.close()


@pytest.mark.parametrize('policy', ['least-recently-stored', 'least-recently-used'])
def test_a_write_that_inserts_leaves_no_refresh_and_an_overwrite_does(make_store, policy):
    """A set, add or incr that makes a new row stores its time in the row: nothing is left for
    the flusher (whose UPDATE would change nothing, a seventh of a set's instructions). An
    overwrite, which leaves the row's time alone, leaves its refresh, which orders the item as
    the newest."""
    cache = make_store(eviction_policy=policy)
    access = cache._evictor.access
    cache.set('a', 1)
    cache.add('b', 2)
    cache.incr('c')
    with cache.transact():
        cache.set('d', 4)
    cache.set('big', b'x' * 100_000)  # a value file: the same
    assert access.pending == {}
    cache.set('a', 5)  # overwrites
    cache.incr('c')
    assert len(access.pending) == 2
    cache.close()
    times = dict(item_rows(cache.directory, f"key, {access.column}"))
    assert max(times, key=times.get) in ('a', 'c')
    assert min(times['a'], times['c']) > max(times['b'], times['d'], times['big'])


# --- what waits is bounded (issue 35, item 8) ------------------------------------------------

_FILL = (
    "WITH RECURSIVE number(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM number WHERE n < ?)"
    " INSERT INTO Cache(key, raw, store_time, expire_time, access_time, access_count, tag, size,"
    " mode, filename, value) SELECT 'k' || n, 1, 0.0, NULL, 0.0, 0, NULL, 0, 1, NULL, n FROM number"
)


def _fill(cache, count):
    """Items 'k0', 'k1', ... holding 0, 1, ..., stored at time 0, never read: one statement in the
    library's own transaction (a set per key would take most of the test's time)."""
    with cache._store.transaction() as state:
        state.execute(_FILL, (count - 1,))
    assert len(cache) == count


def _read_all(cache, count):
    """Get 'k0' ... in order, once each; the most keys that waited after any get."""
    access = cache._evictor.access
    get = cache.get
    most = 0
    for number in range(count):
        assert get(f'k{number}') == number
        waiting = len(access.pending)
        if waiting > most:
            most = waiting
    return most


def _keys_read(directory, column):
    """The keys whose row holds a read (the fill left access_time and access_count at 0)."""
    with contextlib.closing(connect(directory)) as con:
        return {key for (key,) in con.execute(f'SELECT key FROM Cache WHERE {column} > 0')}


def _stored_counter(directory, name):
    with contextlib.closing(connect(directory)) as con:
        return con.execute('SELECT value FROM Settings WHERE key = ?', (name,)).fetchone()[0]


@pytest.mark.slow
@pytest.mark.parametrize('settings, column', [
    pytest.param({'eviction_policy': 'least-recently-used'}, 'access_time', id='lru'),
    pytest.param(
        {'eviction_policy': 'least-frequently-used', 'statistics': True}, 'access_count',
        id='lfu+statistics',
    ),
])
def test_a_million_distinct_reads_keep_what_waits_within_the_bound(make_store, settings, column):
    """One thread reading distinct keys without pause outruns the background writer (it holds
    the GIL that writer needs for every row): the old log kept them all, a million keys and
    hundreds of MiB. Now no more than MAX_PENDING keys wait, and every read is accounted for:
    written by close() at the latest, or counted as dropped."""
    from diskcache_core._eviction import access as _access

    reads = 1_000_000
    cache = make_store(memory_size_limit=0, **settings)
    _fill(cache, reads)
    most = _read_all(cache, reads)
    assert most <= _access.MAX_PENDING
    cache.close()  # (and with it any part the background writer had out: written or dropped)
    dropped = cache._evictor.access.dropped
    assert len(_keys_read(cache.directory, column)) + dropped == reads
    if settings.get('statistics'):
        counters = [_stored_counter(cache.directory, name) for name in ('hits', 'misses')]
        assert counters == [reads, 0]


@pytest.mark.parametrize('settings, column', [
    pytest.param({'eviction_policy': 'least-recently-used'}, 'access_time', id='lru'),
    pytest.param({'eviction_policy': 'least-frequently-used'}, 'access_count', id='lfu'),
])
def test_reads_while_another_connection_holds_the_write_lock_are_bounded(
    make_store, settings, column
):
    """Neither the background writer nor the reader can write: the reader drops the oldest keys
    at MAX_PENDING (the old log gave every failed batch back, and grew with each read)."""
    from diskcache_core._eviction import access as _access

    reads = 3 * _access.MAX_PENDING
    cache = make_store(memory_size_limit=0, **settings)
    _fill(cache, reads)
    with WriteLockHolder(cache.directory):
        most = _read_all(cache, reads)
    assert most <= _access.MAX_PENDING
    cache.close()  # (and with it any part the background writer had out: written or dropped)
    dropped = cache._evictor.access.dropped
    # Nothing was written while the lock was held: all but what waited at its release (and the
    # one part the background writer may have had out) was dropped.
    assert dropped >= reads - _access.MAX_PENDING - 256
    assert len(_keys_read(cache.directory, column)) + dropped == reads


@pytest.mark.parametrize('settings, column', [
    pytest.param({'eviction_policy': 'least-recently-used'}, 'access_time', id='lru'),
    pytest.param({'eviction_policy': 'least-frequently-used'}, 'access_count', id='lfu'),
])
def test_with_no_background_writer_the_reader_writes_the_oldest_keys_itself(
    make_store, monkeypatch, settings, column
):
    """The writer falls behind entirely (here: it never runs): at MAX_PENDING the reading
    thread writes the keys noted longest ago itself, so nothing is dropped and what the database
    holds is exactly the oldest reads."""
    from diskcache_core._eviction import access as _access
    from diskcache_core._eviction import evictor as _eviction

    monkeypatch.setattr(_eviction, 'schedule_flush', lambda cache: None)
    reads = 3 * _access.MAX_PENDING
    cache = make_store(**settings)  # (the memory tier on: its hits are noted the same way)
    _fill(cache, reads)
    most = _read_all(cache, reads)
    assert most <= _access.MAX_PENDING
    access = cache._evictor.access
    assert access.dropped == 0
    written = reads - len(access.pending)
    assert _keys_read(cache.directory, column) == {f'k{number}' for number in range(written)}
    cache.close()
    assert len(_keys_read(cache.directory, column)) == reads


@pytest.mark.parametrize('policy, column, use', [
    pytest.param(
        'least-recently-stored', 'store_time', lambda cache, key: cache.set(key, -1), id='overwrite'
    ),
    pytest.param(
        'least-frequently-used', 'access_count', lambda cache, key: cache.incr(key), id='incr'
    ),
])
def test_overwrites_and_incr_keep_what_waits_within_the_bound(
    make_store, monkeypatch, policy, column, use
):
    """The bound holds for every kind of note: an overwrite's store-time refresh and an incr's
    use (bounds lowered, so that writes one transaction each reach them quickly)."""
    from diskcache_core._eviction import access as _access
    from diskcache_core._eviction import evictor as _eviction

    monkeypatch.setattr(_access, 'FLUSH_SIZE', 100)
    monkeypatch.setattr(_access, 'MAX_PENDING', 300)
    monkeypatch.setattr(_eviction, 'MAX_PENDING', 300)
    monkeypatch.setattr(_eviction, 'schedule_flush', lambda cache: None)
    count = 1000
    cache = make_store(memory_size_limit=0, eviction_policy=policy)
    _fill(cache, count)
    access = cache._evictor.access
    most = 0
    for number in range(count):
        use(cache, f'k{number}')
        most = max(most, len(access.pending))
    assert most <= 300
    assert access.dropped == 0
    cache.close()
    assert len(_keys_read(cache.directory, column)) == count


def test_at_the_bound_inside_a_transaction_the_oldest_keys_are_dropped_not_written(
    make_store, monkeypatch
):
    """A write of the reader's own would join the caller's transaction (and a failure of it
    would undo the caller's block): inside one, the oldest keys are dropped instead."""
    from diskcache_core._eviction import access as _access
    from diskcache_core._eviction import evictor as _eviction

    monkeypatch.setattr(_access, 'FLUSH_SIZE', 100)
    monkeypatch.setattr(_access, 'MAX_PENDING', 300)
    monkeypatch.setattr(_eviction, 'MAX_PENDING', 300)
    monkeypatch.setattr(_eviction, 'schedule_flush', lambda cache: None)
    cache = make_store(memory_size_limit=0, eviction_policy='least-recently-used')
    _fill(cache, 1000)
    with cache.transact():
        most = _read_all(cache, 1000)
        cache.set('written', 'in the block')
    assert most <= 300
    access = cache._evictor.access
    assert access.dropped == 1000 - len(access.pending)
    assert _keys_read(cache.directory, 'access_time') == {'written'}  # its row's own time: no read
    assert cache.get('written') == 'in the block'
