"""transact(), Timeout and retry: atomicity, isolation, rollback, and when value files go
(Invariant 2: a file is deleted only after the transaction that stopped naming it committed;
a rolled-back transaction deletes nothing)."""

from __future__ import annotations

import os
import threading
import time

import pytest
from store_helpers import (
    WriteLockHolder,
    connect,
    db_filenames,
    files_settle_to,
    item_table,
    value_files,
)

import diskcache_core as dc

BIG = 300_000


def _path_of(cache, key) -> str:
    """Full path of the value file that `key`'s row names (read with raw sqlite3)."""
    con = connect(cache.directory)
    try:
        table = item_table(con)
        rows = con.execute('SELECT key, filename FROM "%s" WHERE filename IS NOT NULL' % table).fetchall()
    finally:
        con.close()
    matches = [filename for db_key, filename in rows if db_key == key]
    assert len(matches) == 1, rows
    return os.path.join(cache.directory, matches[0])


# --------------------------------------------------------------------------------------------
# Atomicity and isolation
# --------------------------------------------------------------------------------------------


def test_transact_commits_all_writes(cache):
    with cache.transact():
        cache.set('a', 1)
        cache.incr('total', 10)
        cache.incr('count')
        assert cache.get('a') == 1  # reads see the transaction's own writes
    assert (cache['a'], cache['total'], cache['count']) == (1, 10, 1)


def test_transact_exception_rolls_back(cache):
    cache.set('kept', 'old')
    with pytest.raises(RuntimeError, match='boom'), cache.transact():
        cache.set('kept', 'new')
        cache.set('added', 1)
        cache.incr('counter', 5)
        cache.delete('kept')
        raise RuntimeError('boom')
    assert cache['kept'] == 'old'
    assert 'added' not in cache
    assert 'counter' not in cache
    assert len(cache) == 1


def test_transact_rollback_of_queue_and_pop(store):
    cache = store
    cache.push('first')
    cache.set('x', 1)
    with pytest.raises(KeyError), cache.transact():
        assert cache.pull() == (500000000000000, 'first')
        assert cache.pop('x') == 1
        raise KeyError('abort')
    assert cache.peek() == (500000000000000, 'first')
    assert cache['x'] == 1


def test_nested_transact(cache):
    with cache.transact():
        cache.set('outer', 1)
        with cache.transact():
            cache.set('inner', 2)
        cache.set('after', 3)
    assert (cache['outer'], cache['inner'], cache['after']) == (1, 2, 3)


def test_nested_transact_exception_rolls_back_everything(cache):
    with pytest.raises(ValueError), cache.transact():
        cache.set('outer', 1)
        with cache.transact():
            cache.set('inner', 2)
            raise ValueError
    assert 'outer' not in cache and 'inner' not in cache


def test_uncommitted_writes_invisible_to_other_connections(make_cache):
    writer = make_cache()
    reader = make_cache()
    writer.set('key', 'before')
    with writer.transact():
        writer.set('key', 'during')
        writer.set('new', 1)
        assert reader.get('key') == 'before'
        assert 'new' not in reader
    assert reader['key'] == 'during'
    assert reader['new'] == 1


def test_uncommitted_writes_invisible_to_other_threads(cache):
    cache.set('key', 'before')
    seen = []
    with cache.transact():
        cache.set('key', 'during')
        thread = threading.Thread(target=lambda: seen.append(cache.get('key')))
        thread.start()
        thread.join(30)
    assert seen == ['before']
    assert cache['key'] == 'during'


def test_transaction_blocks_writers_in_other_threads(cache):
    order = []

    def writer():
        cache.set('key', 'thread', retry=True)
        order.append('thread-wrote')

    with cache.transact():
        cache.set('key', 'transaction')
        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(0.3)
        order.append('transaction-ends')
    thread.join(30)
    assert order == ['transaction-ends', 'thread-wrote']
    assert cache['key'] == 'thread'


def test_transact_average_example(cache):
    with cache.transact():
        cache.incr('total', 123.4)
        cache.incr('count', 1)
    with cache.transact():
        average = cache['total'] / cache['count']
    assert average == 123.4


# --------------------------------------------------------------------------------------------
# Value files and transactions (Invariant 2)
# --------------------------------------------------------------------------------------------


def test_old_value_file_kept_until_transaction_commits(store):
    store.set('key', b'old' * BIG)
    store.set('gone', b'gone' * BIG)
    old_path = _path_of(store, 'key')
    gone_path = _path_of(store, 'gone')
    with store.transact():
        store.set('key', b'new' * BIG)
        store.delete('gone')
        store.set('key', b'newer' * BIG)
        assert os.path.exists(old_path), 'old value file deleted before the commit'
        assert os.path.exists(gone_path), 'deleted item file removed before the commit'
        assert store['key'] == b'newer' * BIG
    assert store['key'] == b'newer' * BIG
    names = db_filenames(store.directory)
    assert len(names) == 1
    assert files_settle_to(store.directory, names) == names


def test_rollback_deletes_nothing_and_leaves_no_new_files(store):
    store.set('a', b'a' * BIG)
    store.set('b', b'b' * BIG)
    store.set('small', b's')
    before = value_files(store.directory)
    paths = [_path_of(store, 'a'), _path_of(store, 'b')]
    with pytest.raises(RuntimeError), store.transact():
        store.set('a', b'A' * BIG)
        store.set('c', b'c' * BIG)
        store.set('d', os.urandom(BIG))
        store.delete('b')
        store.push(b'q' * BIG)
        store.set('small', b'S' * BIG)
        raise RuntimeError
    assert all(os.path.exists(path) for path in paths)
    assert store['a'] == b'a' * BIG
    assert store['b'] == b'b' * BIG
    assert store['small'] == b's'
    assert 'c' not in store and 'd' not in store
    assert files_settle_to(store.directory, before) == before
    assert store.check() == []


def test_rollback_after_file_write_in_nested_transaction(store):
    store.set('a', b'a' * BIG)
    before = value_files(store.directory)
    with pytest.raises(ZeroDivisionError), store.transact():
        with store.transact():
            store.set('a', b'x' * BIG)
        1 / 0
    assert store['a'] == b'a' * BIG
    assert files_settle_to(store.directory, before) == before


# --------------------------------------------------------------------------------------------
# Timeout and retry
# --------------------------------------------------------------------------------------------

WRITES = {
    'set': lambda c: c.set('new', 'value'),
    'set-file': lambda c: c.set('new', b'f' * BIG),
    'add': lambda c: c.add('new', 'value'),
    'incr': lambda c: c.incr('counter'),
    'decr': lambda c: c.decr('counter'),
    'touch': lambda c: c.touch('existing', 10),
    'delete': lambda c: c.delete('existing'),
    'pop': lambda c: c.pop('existing'),
    'push': lambda c: c.push('value'),
    'pull': lambda c: c.pull(),
    'clear': lambda c: c.clear(),
    'evict': lambda c: c.evict('tag'),
    'expire': lambda c: c.expire(now=time.time() + 100_000),
    'transact': lambda c: c.transact().__enter__(),
}


@pytest.mark.parametrize('operation', sorted(WRITES))
def test_write_raises_timeout_when_lock_held(make_store, operation):
    cache = make_store(timeout=0.05)
    cache.set('existing', 'value', tag='tag', expire=1000)
    cache.push('queued')
    before = value_files(cache.directory)
    with WriteLockHolder(cache.directory):
        started = time.monotonic()
        with pytest.raises(dc.Timeout):
            WRITES[operation](cache)
        # It gave up after its 50 ms timeout rather than waiting for the holder (60 s): a
        # bound generous enough for a loaded machine.
        assert time.monotonic() - started < 30
    assert cache['existing'] == 'value'
    assert 'new' not in cache
    assert 'counter' not in cache
    assert len(cache) == 2
    assert files_settle_to(cache.directory, before) == before


def test_timeout_is_a_diskcache_error(make_store):
    cache = make_store(timeout=0.05)
    with WriteLockHolder(cache.directory), pytest.raises(dc.DiskCacheError):
        cache.set('k', 'v')


def test_bulk_timeout_reports_count_removed(make_store):
    cache = make_store(timeout=0.05)
    cache.set('a', 1)
    with WriteLockHolder(cache.directory), pytest.raises(dc.Timeout) as info:
        cache.clear()
    assert info.value.args[0] == 0
    assert cache['a'] == 1


@pytest.mark.parametrize(
    'operation',
    [
        pytest.param(lambda c: c.set('k', 'v', retry=True), id='set'),
        pytest.param(lambda c: c.set('k', b'f' * BIG, retry=True), id='set-file'),
        pytest.param(lambda c: c.add('k', 'v', retry=True), id='add'),
        pytest.param(lambda c: c.incr('k', retry=True), id='incr'),
        pytest.param(lambda c: c.push('v', retry=True), id='push'),
        pytest.param(lambda c: c.__setitem__('k', 'v'), id='setitem'),
    ],
)
def test_retry_waits_for_the_lock(make_store, operation):
    cache = make_store(timeout=0.05)
    with WriteLockHolder(cache.directory) as holder:
        holder.release_after(0.4)
        started = time.monotonic()
        operation(cache)
        waited = time.monotonic() - started
    assert waited >= 0.3
    assert len(cache) == 1


def test_transact_retry_waits_for_the_lock(make_store):
    cache = make_store(timeout=0.05)
    with WriteLockHolder(cache.directory) as holder:
        holder.release_after(0.4)
        started = time.monotonic()
        with cache.transact(retry=True):
            cache.set('k', 'v')
        assert time.monotonic() - started >= 0.3
    assert cache['k'] == 'v'


def test_reads_do_not_time_out_while_lock_held(make_store):
    cache = make_store(timeout=0.05)
    cache.set('k', 'v')
    cache.set('f', b'f' * BIG)
    cache.push('q')
    with WriteLockHolder(cache.directory):
        assert cache.get('k') == 'v'
        assert cache['f'] == b'f' * BIG
        assert 'k' in cache
        assert len(cache) == 3
        assert sorted(map(str, cache)) == sorted(['k', 'f', '500000000000000'])
        assert cache.volume() > 0
        assert cache.get('missing') is None


def test_lock_released_after_timeout(make_store):
    cache = make_store(timeout=0.05)
    with WriteLockHolder(cache.directory), pytest.raises(dc.Timeout):
        cache.set('k', 'v')
    # The failed attempt left no transaction open on the cache's connection.
    cache.set('k', 'v')
    other = make_store(timeout=1)
    other.set('other', 1)
    assert cache['other'] == 1


# --- interrupts (a signal handler raising) at the edges of a transaction ----------------------


def test_an_interrupt_as_begin_returns_leaves_no_transaction_open(store, make_store, monkeypatch):
    from diskcache_core._store.store import Store

    begin = Store._begin

    def interrupted(self, *args, **kwargs):
        begin(self, *args, **kwargs)
        raise KeyboardInterrupt  # as a SIGINT handler would, the moment BEGIN returned

    monkeypatch.setattr(Store, "_begin", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with store.transact():
            pass
    monkeypatch.setattr(Store, "_begin", begin)
    other = make_store(timeout=0.5)
    assert other.set("from another connection", 1)  # the write lock was let go
    with store.transact():
        store.set("again", 2)
    assert other.get("again") == 2


def test_an_interrupt_just_after_commit_keeps_the_committed_value_file(store):
    state = store._store.state()
    execute = state.execute

    def interrupted(statement, *args):
        cursor = execute(statement, *args)
        if statement == "COMMIT":
            state.execute = execute
            raise KeyboardInterrupt  # the commit has run
        return cursor

    state.execute = interrupted
    with pytest.raises(KeyboardInterrupt):
        with store.transact():
            store.set("big", b"x" * 100_000)  # a value file
    with pytest.raises(ZeroDivisionError):
        with store.transact():  # a later transaction that rolls back
            store.set("other", 1)
            1 / 0
    assert store.get("big") == b"x" * 100_000
    assert store.check() == []


@pytest.mark.parametrize("where", ["before-commit", "after-commit"])
def test_an_interrupt_between_the_steps_of_a_transaction_leaves_none_open(cache_dir, where):
    # A KeyboardInterrupt (a signal handler's exception) can land between any two bytecodes:
    # after the block, before COMMIT; or after COMMIT, before its after-commit work. No
    # transaction may stay open on the connection, holding the write lock while later writes
    # "commit" into it; a committed one's released value files must still go.
    cache = dc.Cache(cache_dir)
    other = dc.Cache(cache_dir, timeout=0.2)
    cache.set("kept", b"k" * 100_000)
    cache.set("replaced", b"r" * 100_000)
    store = cache._store
    name = "_check_joinable" if where == "before-commit" else "_after_commit"
    original = getattr(store, name)

    def interrupted(state, *args):
        if state.txn.depth == 0:
            setattr(store, name, original)
            if where == "before-commit":
                original(state, *args)
            raise KeyboardInterrupt
        return original(state, *args)

    setattr(store, name, interrupted)
    with pytest.raises(KeyboardInterrupt):
        with cache.transact():
            cache.set("inside", 1)
            cache.set("replaced", b"n" * 100_000)
    assert not store.state().con.in_transaction
    assert other.set("probe", 1) is True  # the write lock is free
    committed = where == "after-commit"
    assert cache.get("inside") == other.get("inside") == (1 if committed else None)
    cache.set("after", 2)
    assert other.get("after") == 2  # committed, not joined to a stray transaction
    assert other.get("kept") == b"k" * 100_000
    assert other.get("replaced")[:1] == (b"n" if committed else b"r")
    cache.close()  # (waits for the file remover)
    other.close()
    with dc.Cache(cache_dir) as reopened:
        assert reopened.check() == []  # no value file left behind


def test_an_interrupt_inside_a_write_statements_sql_function_is_raised_as_itself(
    cache_dir, monkeypatch
):
    # The version trigger's Python function runs inside every write statement; a signal
    # handler's exception raised there reached the caller as sqlite3's "user-defined function
    # raised exception" (a DatabaseError), which `except Exception` swallows.
    from diskcache_core._store import versions as _memory

    index_of = _memory._stored_key_index

    def interrupting(db_key):
        if db_key == 12345:
            raise KeyboardInterrupt
        return index_of(db_key)

    monkeypatch.setattr(_memory, "_stored_key_index", interrupting)
    cache = dc.Cache(cache_dir)
    with pytest.raises(KeyboardInterrupt):
        cache.set(12345, "value")
    with pytest.raises(KeyboardInterrupt):
        with cache.transact():
            cache.set(1, "one")
            cache.set(12345, "value")
    monkeypatch.setattr(_memory, "_stored_key_index", index_of)
    assert 12345 not in cache and 1 not in cache
    assert cache.set(12345, "value") is True and cache[12345] == "value"
    cache.close()
