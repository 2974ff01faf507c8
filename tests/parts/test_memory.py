"""The memory tier (``_memory/tier.py``): hits from memory, exact invalidation by every kind of write
(in this process and from another one), expiry, transactions, bounds, settings, fork, read-only
media and the version file.

Cross-process writes run in a long-lived helper process that executes Cache calls sent over a
pipe, so each case costs one round trip, not one process start.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import multiprocessing
import os
import shutil
import sqlite3
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

import diskcache_core as dc
from diskcache_core._store import versionfile as _versionfile
from diskcache_core._store import versions as _versions

KIB = 1024
VERSIONS = 'cache.db-versions'
# Helper processes: forked where possible (fast); their targets are module-level, so 'spawn'
# works too.
_context = multiprocessing.get_context('fork' if hasattr(os, 'fork') else 'spawn')


def hits(cache: dc.Cache) -> int:
    return cache.memory_stats().hits


def assert_cached(cache: dc.Cache, key: Any, value: Any) -> None:
    """`key` is answered from memory with `value`."""
    before = hits(cache)
    assert cache.get(key) == value
    assert hits(cache) == before + 1, f'{key!r} was not answered from memory'


def warm(cache: dc.Cache, key: Any, value: Any) -> None:
    """Read `key` until memory answers it: a key read for the first time is only noted, the
    second read keeps it (writes keep their value at once while the tier has room)."""
    for _ in range(2):
        assert cache.get(key) == value
    assert_cached(cache, key, value)


def assert_from_sqlite(cache: dc.Cache, key: Any, value: Any, default: Any = None) -> None:
    """`key` is not answered from memory, and SQLite gives `value`."""
    before = hits(cache)
    assert cache.get(key, default) == value
    assert hits(cache) == before


# --- the helper process ---------------------------------------------------------------------------


def _helper(directory: str, settings: dict, conn: Any) -> None:
    cache = dc.Cache(directory, **settings)
    while True:
        request = conn.recv()
        if request is None:
            cache.close()
            conn.send('closed')
            return
        name, args, kwargs = request
        try:
            if name == 'transact-set':
                with cache.transact():
                    for key, value in args[0]:
                        cache.set(key, value)
                result: Any = True
            elif name == 'transact-rollback':
                try:
                    with cache.transact():
                        cache.set(*args)
                        raise KeyError('roll back')
                except KeyError:
                    result = 'rolled back'
            elif name == 'remove-value-file':
                con = sqlite3.connect(os.path.join(directory, 'cache.db'))
                ((filename,),) = con.execute('SELECT filename FROM Cache WHERE key = ?', args)
                con.close()
                os.remove(os.path.join(directory, filename))
                result = filename
            else:
                result = getattr(cache, name)(*args, **kwargs)
            if name in ('get', 'pop', 'pull') and isinstance(result, io.IOBase):
                result = result.read()
            conn.send(('ok', result))
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            conn.send(('error', repr(exc)))


class Helper:
    """Another process with its own Cache on the same directory."""

    def __init__(self, directory: str, **settings: Any) -> None:
        self.conn, child = _context.Pipe()
        self.process = _context.Process(target=_helper, args=(directory, settings, child), daemon=True)
        self.process.start()

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.conn.send((name, args, kwargs))
        if not self.conn.poll(60):
            raise AssertionError(f'helper process did not answer {name}')
        status, result = self.conn.recv()
        if status == 'error':
            raise AssertionError(f'helper {name} failed: {result}')
        return result

    def close(self) -> None:
        if self.process.is_alive():
            self.conn.send(None)
            self.conn.poll(30)
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


@pytest.fixture
def helper(cache_dir: str) -> Iterator[Helper]:
    dc.Cache(cache_dir).close()  # created before the helper opens it
    other = Helper(cache_dir)
    yield other
    other.close()


# --- hits ---------------------------------------------------------------------------------------


def test_reads_and_writes_are_answered_from_memory(store):
    store.set('bytes', b'v' * 100)
    store.set('text', 'hello')
    store.set(7, 1.5)
    store.set(b'raw', 12)
    for key, value in (('bytes', b'v' * 100), ('text', 'hello'), (7, 1.5), (7.0, 1.5), (b'raw', 12)):
        assert_cached(store, key, value)
    assert 'text' in store and 7 in store
    stats = store.memory_stats()
    assert stats.items == 4 and stats.misses == 0
    assert stats.size_limit == dc.Cache(store.directory).memory_size_limit == 4 * 2**20
    assert stats.item_limit == 10_000


def test_the_second_read_fills_memory(store, make_store):
    store.set('key', 'value')
    other = make_store()  # another object: its memory is empty
    assert_from_sqlite(other, 'key', 'value')  # noted
    assert other.memory_stats() == (0, 1, 0, 0, 4 * 2**20, 10_000)
    assert_from_sqlite(other, 'key', 'value')  # kept
    assert other.memory_stats().items == 1
    assert_cached(other, 'key', 'value')
    assert other.memory_stats().misses == 2


def test_misses_are_kept_too(store, make_store):
    reader = make_store()
    for _ in range(2):
        assert reader.get('absent', 'default') == 'default'
    before = hits(reader)
    assert reader.get('absent', 'default') == 'default'
    assert 'absent' not in reader
    assert hits(reader) == before + 2
    store.set('absent', 'present')  # an insert invalidates the other object's entry
    assert reader.get('absent') == 'present'
    assert 'absent' in reader
    store.delete('absent')
    assert reader.get('absent') is None
    assert 'absent' not in store
    assert_cached(store, 'absent', None)  # the delete kept "absent" in the writer's memory


def test_a_scan_larger_than_memory_does_not_flush_it(make_store):
    cache = make_store(memory_size_limit=64 * KIB)
    cache.set('hot', b'h' * 1000)
    for number in range(1000):
        cache.set(number, b'v' * 1000)  # written while there is room, then no longer kept
    assert cache.memory_stats().size <= 64 * KIB
    warm(cache, 'hot', b'h' * 1000)
    for _ in range(3):
        for number in range(1000):
            cache.get(number)
        assert_cached(cache, 'hot', b'h' * 1000)
    assert cache.memory_stats().hits > 3 * 40  # the keys that fitted at first stay


def test_a_cycle_a_little_larger_than_memory_keeps_what_fits(make_store):
    # Each key comes back after 120 gets, more than the map holds: none is worth a fill (it
    # would evict a key that comes back sooner), and the keys kept at first keep answering.
    cache = make_store(memory_item_limit=50)
    for number in range(120):
        cache.set(number, number)  # kept while the map has room
    for _ in range(3):
        for number in range(120):
            assert cache.get(number) == number
    before = hits(cache)
    for _ in range(5):
        for number in range(120):
            assert cache.get(number) == number
    assert hits(cache) - before >= 5 * 40


def test_keys_noted_by_writes_alone_stay_bounded(make_store):
    cache = make_store(memory_item_limit=50)
    for number in range(5_000):  # no gets: writes note the keys they do not keep
        cache.set(number, number)
    assert len(cache._memory.admission.recent) <= 2 * 50  # bounded by the map's items, not the writes
    assert cache.memory_stats().items <= 50


def test_keys_of_every_kind(store, make_store):
    keys = ['s', b'b', 1, 2.5, 2**70, -0.0, (1, 'tuple'), True, frozenset({1})]
    for number, key in enumerate(keys):
        store.set(key, number)
    reader = make_store()
    for number, key in enumerate(keys):
        warm(reader, key, number)
    # Keys Python calls equal but the database does not are kept apart.
    assert reader.get(1) == 2 and reader.get(True) == 7 and reader.get(1.0) == 2
    store.set(True, 'bool')
    assert reader.get(True) == 'bool' and reader.get(1) == 2
    store.set(1.0, 'one')  # the same row as 1
    assert reader.get(1) == 'one' == reader.get(1.0)
    with pytest.raises(ValueError, match='NaN'):  # SQLite stores NaN as NULL: never found
        store.get(float('nan'))


def test_mutable_values_come_back_as_fresh_objects(store):
    store.set('list', [1, 2, {'a': 3}])
    first = store.get('list')
    first.append('changed')
    first[2]['a'] = 'changed'
    second = store.get('list')
    assert second == [1, 2, {'a': 3}]
    assert second is not first
    assert_cached(store, 'list', [1, 2, {'a': 3}])


@pytest.mark.parametrize(
    'settings',
    [{'disk': dc.JSONDisk}, {'disk': dc.SafeDisk}, {'disk_compress': 'zlib'}],
    ids=['JSONDisk', 'SafeDisk', 'zlib'],
)
def test_other_disks(make_store, settings):
    writer = make_store(**settings)
    reader = make_store(**settings)
    value = {'list': [1, 2], 'text': 'x' * 3000}
    writer.set('k', value)
    writer.set(('tuple', 1), 'compressible ' * 300)
    warm(reader, 'k', value)
    first = reader.get('k')
    first['list'].append(3)
    assert_cached(reader, 'k', value)  # a fresh object each time
    warm(reader, ('tuple', 1), 'compressible ' * 300)
    assert_cached(writer, 'k', value)  # written through
    writer.set('k', {'new': True})
    assert reader.get('k') == {'new': True}
    writer.delete(('tuple', 1))
    assert reader.get(('tuple', 1)) is None


def test_memory_hits_count_as_hits_and_reach_the_access_log(make_store):
    cache = make_store(statistics=True, eviction_policy='least-recently-used')
    for number in range(30):
        cache.set(number, os.urandom(1000))
    time.sleep(0.01)
    for _ in range(3):
        for number in range(5):  # the oldest five, read from memory
            cache.get(number)
    assert cache.memory_stats().hits == 15
    assert cache.stats() == (15, 0)
    cache.get('missing')
    assert cache.stats() == (15, 1)
    cache.flush_access_log()
    con = sqlite3.connect(os.path.join(cache.directory, 'cache.db'))
    times = dict(con.execute('SELECT key, access_time FROM Cache'))
    con.close()
    # Least-recently-used eviction would now remove 5..29 before the five keys read from memory.
    assert min(times[number] for number in range(5)) > max(times[number] for number in range(5, 30))


def test_read_and_metadata_gets_bypass_memory(store):
    store.set('key', b'value', expire=100, tag='t')
    assert_cached(store, 'key', b'value')
    before = hits(store)
    assert store.get('key', read=True).read() == b'value'
    value, expire_time, tag = store.get('key', expire_time=True, tag=True)
    assert (value, tag) == (b'value', 't') and expire_time > time.time()
    assert hits(store) == before


# --- invalidation in this process -----------------------------------------------------------------


def test_every_write_in_this_process_is_seen(store, make_store):
    reader = make_store()  # a second object: only the version words tell it about changes

    store.set('k', 1)
    warm(reader, 'k', 1)
    store.set('k', 2)
    assert reader.get('k') == 2
    warm(reader, 'k', 2)
    store.incr('k', 5)
    assert reader.get('k') == 7
    warm(reader, 'k', 7)
    store.decr('k', 2)
    assert reader.get('k') == 5
    warm(reader, 'k', 5)
    store.touch('k', expire=-1)  # expired now
    assert reader.get('k') is None
    store.set('k', 'x')
    warm(reader, 'k', 'x')
    assert store.add('k', 'y') is False
    assert_cached(reader, 'k', 'x')  # a refused add changes nothing
    store.delete('k')
    assert reader.get('k') is None
    store.set('k', 'z')
    warm(reader, 'k', 'z')
    assert store.pop('k') == 'z'
    assert reader.get('k') is None
    store['k'] = 'w'
    warm(reader, 'k', 'w')
    del store['k']
    assert reader.get('k') is None


def test_incr_past_64_bits_and_custom_numbers(store, make_store):
    reader = make_store()
    store.set('n', 2**62)
    warm(reader, 'n', 2**62)
    store.incr('n', 2**62)  # overflows SQLite's integers: the Python path in a transaction
    assert reader.get('n') == 2**63
    assert_cached(reader, 'n', 2**63)


def test_expiry_is_honoured_from_memory(store):
    store.set('short', 'value', expire=0.5)
    assert_cached(store, 'short', 'value')
    time.sleep(0.55)
    assert store.get('short') is None
    assert 'short' not in store
    store.set('long', 'value', expire=60)
    assert_cached(store, 'long', 'value')


def test_writes_inside_a_transaction(store, make_store):
    reader = make_store()
    store.set('a', 1)
    store.set('b', 1)
    reader.get('a'), reader.get('b')
    with store.transact():
        store.set('a', 2)
        assert store.get('a') == 2  # the transaction sees its own write
        assert reader.get('b') == 1
        store.set('b', 2)
    assert reader.get('a') == 2 and reader.get('b') == 2
    warm(reader, 'a', 2)
    store.get('a')  # writes inside a transaction are not written through: filled on a read
    assert_cached(store, 'a', 2)


def test_a_rolled_back_transaction_leaves_memory_right(store, make_store):
    reader = make_store()
    store.set('a', 'before')
    reader.get('a')
    store.get('a')
    with pytest.raises(KeyError):
        with store.transact():
            store.set('a', 'inside')
            assert store.get('a') == 'inside'
            raise KeyError('roll back')
    assert store.get('a') == 'before'
    assert reader.get('a') == 'before'
    warm(store, 'a', 'before')  # the bucket is clean again after the rollback


@pytest.mark.parametrize('operation', ['clear', 'evict', 'expire', 'cull', 'size-limit'])
def test_bulk_removals_are_seen(make_store, operation):
    writer = make_store(size_limit=2**30)
    reader = make_store()
    # Items that expire in a minute, removed by expire() "as of" two minutes from now: the
    # reader's copies are still unexpired by its own clock, so only the removal being seen
    # keeps them from being served, and no sleep has to outlast the reads above it.
    for number in range(300):
        writer.set(number, b'v' * 500, tag='t', expire=(60 if operation == 'expire' else None))
    for _ in range(2):
        for number in range(300):
            reader.get(number)
    assert hits(reader) == 0 and reader.memory_stats().items == 300
    assert_cached(reader, 0, b'v' * 500)
    if operation == 'clear':
        assert writer.clear() == 300
    elif operation == 'evict':
        assert writer.evict('t') == 300
    elif operation == 'expire':
        assert writer.expire(now=time.time() + 120) == 300
    elif operation == 'cull':
        writer.reset('size_limit', 0)
        assert writer.cull() > 0
    else:  # the write path's own check evicts the oldest items
        writer.reset('size_limit', 64 * KIB)
        for number in range(300, 600):
            writer.set(number, b'w' * 500)
    survivors = [number for number in range(300) if number in writer]
    assert len(survivors) < 300
    for number in range(300):
        expected = b'v' * 500 if number in survivors else None
        assert reader.get(number) == expected


def test_check_fix_is_seen(make_store):
    writer = make_store()
    reader = make_store()
    writer.set('file', b'f' * 40 * KIB)  # a value file
    warm(reader, 'file', b'f' * 40 * KIB)
    ((filename,),) = sqlite3.connect(os.path.join(writer.directory, 'cache.db')).execute(
        'SELECT filename FROM Cache'
    )
    os.remove(os.path.join(writer.directory, filename))
    assert writer.check(fix=True)
    assert reader.get('file') is None


def test_queue_pull_is_seen(store, make_store):
    reader = make_store()
    key = store.push('first')
    warm(reader, key, 'first')
    assert store.pull() == (key, 'first')
    assert reader.get(key) is None


# --- invalidation by another process --------------------------------------------------------------


def test_writes_of_another_process_are_seen(cache_dir, helper):
    cache = dc.Cache(cache_dir)
    helper('set', 'k', 'one')
    warm(cache, 'k', 'one')
    cases = [
        (('set', 'k', 'two'), 'two'),
        (('incr', 'n', 1), None),
        (('touch', 'k', -1), None),
        (('add', 'k', 'added'), 'added'),  # replaces the expired item
        (('delete', 'k'), None),
        (('set', 'k', [1, 2]), [1, 2]),
        (('pop', 'k'), None),
        (('set', 'k', b'x' * 40 * KIB), b'x' * 40 * KIB),  # a value file
        (('set', 'k', 'small'), 'small'),
        (('transact-set', [('k', 'in-transaction'), ('other', 1)]), 'in-transaction'),
        (('transact-rollback', 'k', 'rolled-back'), 'in-transaction'),
        (('clear',), None),
    ]
    for (name, *args), expected in cases:
        if name == 'incr':
            helper('set', 'n', 41)
            warm(cache, 'n', 41)
            helper('incr', 'n', 1)
            assert cache.get('n') == 42
            helper('decr', 'n', 2)
            assert cache.get('n') == 40
            continue
        helper(name, *args)
        assert cache.get('k') == expected, (name, args)
        if expected is not None:
            warm(cache, 'k', expected)
    cache.close()


@pytest.mark.parametrize('operation', ['expire', 'evict', 'cull', 'size-limit', 'check', 'pull'])
def test_bulk_writes_of_another_process_are_seen(cache_dir, helper, operation):
    cache = dc.Cache(cache_dir)
    expire = 60 if operation == 'expire' else None  # removed "as of" later: see above
    for number in range(50):
        helper('set', number, b'v' * 200, expire, False, 'tag')
    key = helper('push', 'queued', 'q')
    for number in range(50):
        warm(cache, number, b'v' * 200)
    warm(cache, key, 'queued')
    if operation == 'expire':
        assert helper('expire', now=time.time() + 120) == 50
    elif operation == 'evict':
        assert helper('evict', 'tag') == 50
    elif operation == 'cull':
        helper('reset', 'size_limit', 0)
        assert helper('cull') > 0
    elif operation == 'size-limit':
        helper('reset', 'size_limit', 32 * KIB)
        for number in range(100, 400):
            helper('set', number, b'w' * 500)
    elif operation == 'check':
        helper('set', 'file', b'f' * 40 * KIB)
        warm(cache, 'file', b'f' * 40 * KIB)
        helper('remove-value-file', 'file')
        assert helper('check', True)
        assert cache.get('file') is None
    else:
        assert helper('pull', 'q') == (key, 'queued')
        assert cache.get(key) is None
        return
    present = [number for number in range(50) if number in dc.Cache(cache_dir, memory_size_limit=0)]
    if operation != 'check':
        assert len(present) < 50
    for number in range(50):
        assert cache.get(number) == (b'v' * 200 if number in present else None)
    cache.close()


def test_every_process_sees_writes_made_through_the_fanout(tmp_path):
    # FanoutCache is shards of Cache: the tier works under it unchanged.
    fanout_class = getattr(dc, 'FanoutCache', None)
    if fanout_class is None:
        pytest.skip('no FanoutCache yet')
    directory = str(tmp_path / 'fanout')
    cache = fanout_class(directory, shards=4)
    cache.set('k', 1)
    cache.get('k')
    context = _context
    process = context.Process(target=_fanout_writer, args=(directory,))
    process.start()
    process.join(60)
    assert process.exitcode == 0
    assert cache.get('k') == 2
    cache.close()


def _fanout_writer(directory: str) -> None:
    cache = dc.FanoutCache(directory, shards=4)
    cache.set('k', 2)
    cache.close()


# --- a writer that dies after its commit, before publishing ------------------------------------------


def _words(directory: str) -> memoryview:
    """The version file as documented in docs/memory.rst: a 64-byte header, then two 64-bit
    words per bucket."""
    with open(os.path.join(directory, VERSIONS), 'r+b') as file:
        return memoryview(mmap.mmap(file.fileno(), 0)).cast('Q')


def _died_after_commit(directory: str, key: str, value: str) -> None:
    """What a writer killed between its commit and its publish leaves: ``pre`` bumped, the row
    changed, ``post`` not stored."""
    words = _words(directory)
    index = _versions.pre_index(key)
    words[index] = int.from_bytes(os.urandom(8), 'little') | 1
    con = sqlite3.connect(os.path.join(directory, 'cache.db'), isolation_level=None)
    con.execute('UPDATE Cache SET value = ? WHERE key = ?', (value, key))
    con.close()


def test_a_writer_dead_before_publishing_leaves_nothing_stale(store, make_store):
    reader = make_store()
    store.set('k', 'old')
    warm(reader, 'k', 'old')
    context = _context
    process = context.Process(target=_died_after_commit, args=(store.directory, 'k', 'new'))
    process.start()
    process.join(60)
    assert process.exitcode == 0
    for _ in range(3):  # and the bucket is not filled again while pre != post
        assert_from_sqlite(reader, 'k', 'new')
    store.set('k', 'newer')  # the next write to the bucket makes it clean again
    warm(reader, 'k', 'newer')


def test_a_writer_that_ignores_the_protocol_is_not_seen(store, make_store):
    """The limit, shown: a program writing the database without the triggers (python-diskcache,
    the sqlite3 shell) does not invalidate the memory tier. This is also the proof that these
    tests can fail."""
    reader = make_store()
    store.set('k', 'old')
    warm(reader, 'k', 'old')
    con = sqlite3.connect(os.path.join(store.directory, 'cache.db'), isolation_level=None)
    con.execute("UPDATE Cache SET value = 'new' WHERE key = 'k'")
    con.close()
    assert reader.get('k') == 'old'  # stale: the memory tier was not told
    assert make_store(memory_size_limit=0).get('k') == 'new'


# --- bounds, the off switch, settings ------------------------------------------------------------


def test_byte_and_item_bounds(make_store):
    cache = make_store(memory_size_limit=64 * KIB, memory_item_limit=1000)
    values = [os.urandom(3000) for _ in range(100)]
    for number, value in enumerate(values):
        cache.set(number, value)
        assert cache.memory_stats().size <= 64 * KIB
    for number in range(100):
        for _ in range(2):  # the second read keeps it
            cache.get(number)
            stats = cache.memory_stats()
            assert stats.size <= 64 * KIB
    assert 15 <= stats.items <= 21  # about 64 KiB / 3 KiB
    cache.memory_item_limit = 5
    assert cache.memory_stats().items == 5
    for number in range(95, 100):  # the most recently used are kept
        assert_cached(cache, number, values[number])
    many = make_store(directory=cache.directory + '-many', memory_item_limit=50)
    for number in range(200):
        many.set(number, number)
        assert many.memory_stats().items <= 50


def test_a_value_larger_than_an_eighth_of_the_bound_is_not_kept(make_store):
    cache = make_store(memory_size_limit=64 * KIB)
    cache.set('big', b'b' * 20 * KIB)
    cache.set('small', b's' * 1 * KIB)
    cache.get('big'), cache.get('small')
    assert_from_sqlite(cache, 'big', b'b' * 20 * KIB)
    assert_cached(cache, 'small', b's' * KIB)


def test_large_values_keep_the_bound(make_store):
    limit = 256 * KIB
    cache = make_store(memory_size_limit=limit)
    sizes = [KIB, 10 * KIB, 30 * KIB, 40 * KIB, 100 * KIB]  # inline and value files
    for number in range(200):
        cache.set(number, os.urandom(sizes[number % len(sizes)]))
    for number in list(range(200)) + list(range(190, 200)) * 3:
        cache.get(number)
        assert cache.memory_stats().size <= limit
    assert cache.memory_stats().hits > 0


def test_the_tier_can_be_turned_off(make_store):
    cache = make_store(memory_size_limit=0)
    cache.set('k', 'v')
    for _ in range(3):
        assert cache.get('k') == 'v'
        assert 'k' in cache
    assert cache.memory_stats() == (0, 0, 0, 0, 0, 0)
    cache.memory_size_limit = 2**20
    warm(cache, 'k', 'v')
    cache.memory_item_limit = 0
    assert cache.memory_stats().items == 0
    assert cache.get('k') == 'v'
    # Writers with the tier off still invalidate the others.
    reader = make_store()
    warm(reader, 'k', 'v')
    cache.set('k', 'w')
    assert reader.get('k') == 'w'


@pytest.mark.parametrize('name', ['memory_size_limit', 'memory_item_limit'])
def test_settings_are_checked_and_never_stored(make_store, name):
    with pytest.raises(TypeError):
        make_store(**{name: 1.5})
    with pytest.raises(TypeError):
        make_store(**{name: True})
    with pytest.raises(TypeError):
        make_store(**{name: '10'})
    with pytest.raises(ValueError):
        make_store(**{name: -1})
    cache = make_store(**{name: 123})
    assert getattr(cache, name) == 123
    with pytest.raises(ValueError):
        cache.reset(name, 5)
    with pytest.raises(ValueError):
        setattr(cache, name, -5)
    with pytest.raises(TypeError):
        setattr(cache, name, None)
    assert getattr(cache, name) == 123
    rows = sqlite3.connect(os.path.join(cache.directory, 'cache.db')).execute(
        'SELECT key FROM Settings WHERE key LIKE ?', ('memory%',)
    )
    assert rows.fetchall() == []
    assert getattr(make_store(), name) != 123  # another object: the default
    clone = __import__('pickle').loads(__import__('pickle').dumps(cache))
    assert getattr(clone, name) == 123
    clone.close()


def test_threads_never_read_an_older_value(store):
    """Writers and readers in threads for at least a second, and on until the readers have
    made 300 rounds and memory has answered some of them (bounded: fails after 60 s)."""
    keys = ['a', 'b', 'c']
    returned = {key: -1 for key in keys}  # the newest value whose set has returned, per key
    for key in keys:
        store.set(key, -1)
    stop = threading.Event()
    errors: list[str] = []
    rounds = [0, 0, 0]

    def writer(key: str) -> None:
        number = 0
        while not stop.is_set():
            store.set(key, number)
            returned[key] = number
            number += 1

    def reader(index: int) -> None:
        while not stop.is_set() and not errors:
            for key in keys:
                floor = returned[key]
                value = store.get(key)
                if value < floor:
                    errors.append(f'{key}: read {value} after {floor} was written')
            rounds[index] += 1

    threads = [threading.Thread(target=writer, args=(key,)) for key in keys]
    threads += [threading.Thread(target=reader, args=(index,)) for index in range(3)]
    for thread in threads:
        thread.start()
    began = time.monotonic()
    try:
        while not errors and (
            time.monotonic() - began < 1.0 or sum(rounds) < 300 or store.memory_stats().hits == 0
        ):
            assert time.monotonic() - began < 60, (
                f'after 60 s: {sum(rounds)} rounds, {store.memory_stats().hits} memory hits'
            )
            time.sleep(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert errors == []
    assert store.memory_stats().hits > 0


# --- fork ------------------------------------------------------------------------------------------


def _fork_and_run(child) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if child() else 3
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError('forked child hung')


@pytest.mark.skipif(not hasattr(os, 'fork'), reason='needs os.fork')
def test_fork(store):
    store.set('parent', 'p')
    store.set('shared', 1)
    warm(store, 'shared', 1)
    parent_nonce = _versions._random.getrandbits(64)
    read, write = os.pipe()

    def child() -> bool:
        os.close(read)
        ok = store.get('shared') == 1  # inherited entries stay valid
        ok = ok and store.memory_stats().hits >= 2
        store.set('shared', 2)  # the parent must see this
        ok = ok and store.get('parent') == 'p'
        os.write(write, _versions._random.getrandbits(64).to_bytes(8, 'little'))
        return ok

    assert _fork_and_run(child) == 0
    os.close(write)
    child_nonce = int.from_bytes(os.read(read, 8), 'little')
    os.close(read)
    assert child_nonce != parent_nonce  # reseeded: the child draws its own nonces
    assert store.get('shared') == 2
    store.set('shared', 3)
    warm(store, 'shared', 3)


# --- the version file ---------------------------------------------------------------------------


def test_version_file(store):
    path = os.path.join(store.directory, VERSIONS)
    info = os.stat(path)
    assert stat.S_IMODE(info.st_mode) & 0o077 == 0
    assert info.st_size == 64 + 16 * _versionfile.BUCKETS
    assert store.check() == []  # not an unknown file
    store.check(fix=True)
    assert os.path.exists(path)


def test_reopening_writes_nothing(cache_dir):
    dc.Cache(cache_dir).close()
    path = os.path.join(cache_dir, VERSIONS)
    before = os.stat(path).st_mtime_ns
    time.sleep(0.01)
    dc.Cache(cache_dir).close()
    assert os.stat(path).st_mtime_ns == before


def test_a_damaged_version_file_is_repaired_in_place(cache_dir):
    dc.Cache(cache_dir).close()
    path = os.path.join(cache_dir, VERSIONS)
    inode = os.stat(path).st_ino
    with open(path, 'r+b') as file:
        file.truncate(100)
        file.write(b'garbage')
    cache = dc.Cache(cache_dir)
    assert os.stat(path).st_ino == inode and os.path.getsize(path) == 64 + 16 * _versionfile.BUCKETS
    cache.set('k', 'v')
    warm(cache, 'k', 'v')
    cache.close()


def test_a_version_file_of_another_layout_is_refused(cache_dir):
    dc.Cache(cache_dir).close()
    path = os.path.join(cache_dir, VERSIONS)
    with open(path, 'r+b') as file:
        file.seek(8)
        file.write((1024).to_bytes(8, 'little'))
    with pytest.raises(dc.DatabaseError, match='different version'):
        dc.Cache(cache_dir)


def test_the_version_file_is_made_once_by_racing_openers(tmp_path):
    directory = str(tmp_path / 'race')
    dc.Cache(directory).close()
    os.remove(os.path.join(directory, VERSIONS))
    context = _context
    barrier = context.Barrier(6)
    processes = [context.Process(target=_open_and_write, args=(directory, barrier, number))
                 for number in range(6)]  # fmt: skip
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    cache = dc.Cache(directory)
    for number in range(6):
        assert cache.get(number) == number
        warm(cache, number, number)
        # every opener mapped the same file: a write by any of them invalidates this reader
    helper = Helper(directory)
    try:
        for number in range(6):
            helper('set', number, -number)
            assert cache.get(number) == -number
    finally:
        helper.close()
    cache.close()


def _open_and_write(directory: str, barrier: Any, number: int) -> None:
    barrier.wait(30)
    cache = dc.Cache(directory)
    cache.set(number, number)
    cache.get(number)
    cache.close()


def test_a_symlinked_version_file_is_refused(cache_dir, tmp_path):
    dc.Cache(cache_dir).close()
    path = os.path.join(cache_dir, VERSIONS)
    target = tmp_path / 'elsewhere'
    target.write_bytes(b'precious')
    os.remove(path)
    os.symlink(target, path)
    with pytest.raises(dc.DatabaseError):
        dc.Cache(cache_dir)
    assert target.read_bytes() == b'precious'


# --- read-only media -------------------------------------------------------------------------------


@contextlib.contextmanager
def read_only_mount(source: Path, target: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip('read-only bind mounts need root')
    target.mkdir()
    try:
        subprocess.run(['mount', '--bind', str(source), str(target)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip('bind mounts are not allowed here')
    try:
        subprocess.run(['mount', '-o', 'remount,bind,ro', str(target)], check=True, capture_output=True)
        yield target
    finally:
        subprocess.run(['umount', str(target)], check=False)


def test_read_only_mount_keeps_the_tier_off_and_sees_later_writes(tmp_path):
    # A read-only mount is no promise that nothing changes: the source can still be written.
    source = tmp_path / 'cache'
    with dc.Cache(source) as cache:
        cache.set('k', 'v')
        cache.set('list', [1])
    with read_only_mount(source, tmp_path / 'mounted') as target:
        with pytest.warns(dc.ReadOnlyCacheWarning):
            cache = dc.Cache(target)
        try:
            assert cache.get('k') == 'v' and cache.get('k') == 'v'
            assert cache.memory_stats().hits == 0
            assert cache.get('list') == [1]
            with dc.Cache(source) as writer:
                writer.set('k', 'new')
                assert cache.get('k') == 'new'
            assert cache.get('k') == 'new'
        finally:
            cache.close()  # before the mount goes


def test_read_only_view_of_a_live_database_keeps_the_tier_off(tmp_path):
    source = tmp_path / 'cache'
    writer = dc.Cache(source)  # stays open: its -wal and -shm files exist
    writer.set('k', 'v')
    reader = None
    try:
        with read_only_mount(source, tmp_path / 'mounted') as target:
            try:
                try:
                    reader = dc.Cache(target)
                except dc.DatabaseError:
                    pytest.skip('SQLite cannot read a live WAL database through a read-only mount')
                assert reader.get('k') == 'v'
                assert reader.get('k') == 'v'
                assert reader.memory_stats() == (0, 0, 0, 0, 0, 0)
                writer.set('k', 'w')
                assert reader.get('k') == 'w'
            finally:
                # SQLite keeps an inode's files open until its last connection in the process
                # closes: close both before the mount goes.
                if reader is not None:
                    reader.close()
                writer.close()
    finally:
        writer.close()


def test_lookup_is_the_rule_get_inlines(make_store):
    # Cache.get inlines MemoryTier.lookup for speed: both must answer alike.
    writer, reader = make_store(), make_store()
    writer.set('key', 'one')
    assert reader.get('key') == 'one'  # read once: noted, not kept ...
    assert reader._memory.lookup('key') is None
    assert reader.get('key') == 'one'  # ... and kept on the second read
    entry = reader._memory.lookup('key')
    assert entry is not None and entry.stored == 'one' == reader.get('key')
    writer.set('key', 'two')  # another object's write invalidates the entry
    assert reader._memory.lookup('key') is None and reader._memory.lookup('key', touch=False) is None
    assert reader.get('key') == 'two'


def test_an_object_that_outlives_its_directory_follows_the_one_made_anew(tmp_path):
    # The directory is removed and made anew (by another Cache, or another process) while an
    # object opened on it is closed: that object reconnects to the new database on next use,
    # and its memory tier must follow the new version file with it, or each side keeps
    # answering from memory what the other has since overwritten.
    directory = tmp_path / 'cache'
    old = dc.Cache(directory)
    old.set('k', 'old')
    assert old.get('k') == 'old' and old.get('k') == 'old'
    old.close()
    shutil.rmtree(directory)
    new = dc.Cache(directory)
    new.set('k', 'new')
    assert [old.get('k') for _ in range(3)] == ['new'] * 3
    new.set('k', 'new2')
    assert [old.get('k') for _ in range(3)] == ['new2'] * 3
    seen = []
    thread = threading.Thread(target=lambda: seen.append(old.get('k')))
    thread.start()
    thread.join()
    assert seen == ['new2']
    old.set('k', 'from-old')
    assert [new.get('k') for _ in range(3)] == ['from-old'] * 3
    assert old.memory_stats().hits > 0  # the tier is on and answering, from the new file
    old.close()
    new.close()


@pytest.mark.parametrize("asked", ["get", "in", "get-with-expiry"])
def test_an_item_expired_only_while_the_clock_was_ahead_is_read_again_once_it_is_back(
    cache_dir, monkeypatch, asked
):
    # A clock stepped back (NTP, or a test patching time.time forward and back): the row lives
    # again, as SQL and python-diskcache see it; the memory tier must not have kept it as absent.
    cache = dc.Cache(cache_dir)
    cache.set("k", "v", expire=60)
    cache.set("gone", "v", expire=60)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 120)
    for _ in range(3):
        assert cache.get("k") is None
        assert cache.get("k", expire_time=True) == (None, None)
        assert "k" not in cache
    monkeypatch.setattr(time, "time", real)
    if asked == "get":
        assert [cache.get("k") for _ in range(3)] == ["v"] * 3
    elif asked == "in":
        assert "k" in cache
    else:
        assert cache.get("k", expire_time=True)[0] == "v"
    assert cache.add("k", "other") is False
    assert cache.delete("gone") is True
    assert [cache.get("gone") for _ in range(3)] == [None] * 3  # a removed row: still absent
    cache.close()


def test_the_byte_bound_counts_big_ints_and_wide_text_at_their_real_size(cache_dir):
    # An int was charged 16 bytes and a str one byte per character: a tier of memoized big
    # numbers (or non-Latin-1 text) held many times its memory_size_limit.
    import sys

    cache = dc.Cache(cache_dir, memory_size_limit=2**20)
    for number in range(300):
        value = 10**3000 + number  # ~1.3 KB each
        cache.set(number, value)
        cache.set(f"text{number}", "\U0001f600" * 300 + str(number))  # ~1.2 KB each
    entries = cache._memory.entries.values()
    real = sum(sys.getsizeof(entry.stored) + sys.getsizeof(entry.db_key) for entry in entries)
    stats = cache.memory_stats()
    assert real <= stats.size <= stats.size_limit
    cache.close()


def test_the_tier_builds_the_hit_path_gets_take(make_store):
    """`MemoryTier.hit`, the one function that answers a plain get from memory (Cache.get and
    the remote tier's get both call it): the value, `default` for a key known absent, or MISS
    (read the store, keep nothing) or FILL (read the store, and ask to keep what it finds)."""
    from diskcache_core._memory.tier import FILL, MISS

    cache = make_store()
    writer = make_store()
    tier = cache._memory
    cache.set('kept', 'value')
    assert tier.hit('kept', 'default') == 'value'
    assert tier.hit('new', 'default') is MISS  # not seen lately: noted, not filled
    assert tier.hit('new', 'default') is FILL  # seen lately: the read may fill
    assert cache.get('new', 'default') == 'default'  # ... and it does
    assert tier.hit('new', 'default') == 'default'  # absent, from memory
    writer.set('kept', 'changed')
    assert tier.hit('kept', 'default') is FILL  # invalidated: refilled by the next read
    assert cache.get('kept') == 'changed' and tier.hit('kept', None) == 'changed'
    stats = cache.memory_stats()
    assert (stats.hits, stats.misses) == (3, 3)  # (FILL counts its miss in the read that fills)


def test_a_dropped_cache_is_freed_without_the_garbage_collector(cache_dir):
    """The hit path the tier builds holds no reference back to the tier (only a weak one): a
    dropped cache is freed by reference counting alone, its version file unmapped at once."""
    import gc
    import weakref

    cache = dc.Cache(cache_dir)
    cache.set('key', 'value')
    assert cache.get('key') == 'value'
    tier = weakref.ref(cache._memory)
    cache.close()
    gc.disable()
    try:
        del cache
        assert tier() is None
    finally:
        gc.enable()


def test_a_set_keeps_its_value_by_the_bucket_its_statement_bumped(make_store, monkeypatch):
    # A set's own statement reports the one bucket it bumped: the tier keeps the value under it
    # without hashing the key a second time (a text or bytes key: the hash is the trigger's).
    cache = make_store()

    def no_second_hash(db_key: Any) -> Any:
        raise AssertionError(f'{db_key!r} hashed again after its write')

    monkeypatch.setattr('diskcache_core._memory.tier.pre_index', no_second_hash)
    cache.set('text', 'value')
    cache.set(b'bytes', 1)
    assert_cached(cache, 'text', 'value')
    assert_cached(cache, b'bytes', 1)
    cache.set('text', 'other')  # an overwrite: the entry's bucket, the same one
    assert_cached(cache, 'text', 'other')
    monkeypatch.undo()
    cache.set(12, 'number')  # other keys: hashed as before
    assert_cached(cache, 12, 'number')


def test_a_new_entry_leaves_the_admission_window_alone_while_the_map_has_room(
    make_store, monkeypatch
):
    cache = make_store(memory_item_limit=100)
    memory = cache._memory
    calls = []
    changed = memory.admission.map_changed
    monkeypatch.setattr(
        memory.admission, 'map_changed', lambda *args: calls.append(args) or changed(*args)
    )
    for number in range(80):  # below the room to spare (7/8 of 100 items)
        cache.set(f'key-{number}', number)
    assert calls == []  # with room to spare, the window stays as long as the limit
    assert memory.admission.forget_after == 100
    for number in range(80, 120):  # past it: the window follows the map's fill
        cache.set(f'key-{number}', number)
    assert calls and memory.admission.forget_after < 100
    assert all(cache.get(f'key-{number}') == number for number in range(120))


def test_hits_are_noted_for_a_policy_chosen_after_the_tier_was_made(make_store):
    # The hit path binds whether gets are noted; choosing a policy that orders by reads (or
    # turning statistics on) rebuilds it.
    cache = make_store(eviction_policy='least-recently-stored')
    cache.set('key', 'value')
    assert_cached(cache, 'key', 'value')
    cache.reset('eviction_policy', 'least-recently-used')
    assert_cached(cache, 'key', 'value')
    assert cache._evictor.access.pending  # the hit was noted for its access time
    cache.reset('eviction_policy', 'least-recently-stored')
    cache.stats(enable=True)
    assert_cached(cache, 'key', 'value')
    cache.flush_access_log()
    assert cache.stats() == (1, 0)  # the memory hit counted by the statistics
