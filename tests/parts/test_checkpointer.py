"""The checkpoint thread (diskcache_core/_store/checkpointer.py): WAL checkpoints and free-page
trimming off the writers' path, and the defaults that go with it."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sqlite3
import threading
import time

import pytest
from store_helpers import value_files

import diskcache_core as dc
from diskcache_core._store import checkpointer as _checkpointer

VALUE = b'v' * 10_000  # inline (below disk_min_file_size): three pages of the database each
POLLS = 1000  # bounded waits for the background thread: at most POLLS * 10 ms


def database(cache: dc.Cache) -> str:
    return os.path.join(cache.directory, 'cache.db')


def pragma(cache: dc.Cache, name: str) -> int:
    con = sqlite3.connect(database(cache))  # SQLite's own open: its locks stay consistent
    try:
        return int(con.execute(f'PRAGMA {name}').fetchone()[0])
    finally:
        con.close()


def wait_for(condition) -> bool:
    for _ in range(POLLS):
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_a_new_cache_reuses_free_pages_and_does_not_overwrite_deleted_values(tmp_path):
    cache = dc.Cache(str(tmp_path / 'c'))
    assert cache.sqlite_auto_vacuum == 2
    assert cache.sqlite_secure_delete == 0
    assert cache._store.read('PRAGMA auto_vacuum') == [(2,)]
    assert cache._store.read('PRAGMA secure_delete') == [(0,)]
    cache.close()
    cache = dc.Cache(str(tmp_path / 'c'), sqlite_secure_delete=1)
    assert cache._store.read('PRAGMA secure_delete') == [(1,)]
    cache.close()
    with dc.Cache(str(tmp_path / 'c')) as reopened:
        assert reopened.sqlite_secure_delete == 1  # stored, as any setting


def test_an_existing_full_vacuum_database_keeps_its_mode(tmp_path):
    cache = dc.Cache(str(tmp_path / 'c'), sqlite_auto_vacuum=1)
    cache.close()
    cache = dc.Cache(str(tmp_path / 'c'))
    assert cache.sqlite_auto_vacuum == 1
    assert cache._store.read('PRAGMA auto_vacuum') == [(1,)]
    cache.reset('sqlite_auto_vacuum', 2)  # SQLite switches between full and incremental
    assert pragma(cache, 'auto_vacuum') == 2
    cache.close()


def test_the_thread_copies_the_wal_into_the_database_file(tmp_path):
    # 3 MB of writes: fewer WAL pages than a writer's own checkpoint needs (SQLite's 1000,
    # our 2000), so only the thread can have copied them into the database file (from 1 MB
    # on: the last megabyte may wait in the WAL for more writes).
    cache = dc.Cache(str(tmp_path / 'c'))
    before = _checkpointer.rounds()
    for number in range(300):
        cache.set(number, VALUE)
    assert wait_for(lambda: os.path.getsize(database(cache)) > 1_000_000)
    assert wait_for(lambda: _checkpointer.rounds() > before)  # counted once the round ends
    assert os.path.getsize(database(cache) + '-wal') > 0  # the WAL is still in use
    assert all(cache[number] == VALUE for number in range(300))
    cache.close()


def test_the_wal_stays_bounded_under_a_stream_of_writes(tmp_path):
    cache = dc.Cache(str(tmp_path / 'c'), size_limit=10 * 2**20)
    for number in range(3000):  # 30 MB through a 10 MB cache: culls at every check
        cache.set(number, VALUE)
    # About the writers' backstop (2000 pages): a writer's checkpoint that finds the thread's
    # running is skipped and tried at the next commit, so a few commits' pages more; never the
    # 40 MB of pages the writes add up to.
    wal_bound = 2 * _checkpointer.BACKSTOP_PAGES * (4096 + 24)
    assert os.path.getsize(database(cache) + '-wal') <= wal_bound
    assert cache.volume() <= 10 * 2**20 + cache._store.budget.every
    cache.close()
    assert not os.path.exists(database(cache) + '-wal')  # the last close still removes it


def test_free_pages_are_returned_in_the_background(tmp_path):
    cache = dc.Cache(str(tmp_path / 'c'))
    for number in range(500):
        cache.set(number, VALUE)
    for number in range(450):  # single deletes: each frees pages into the free list
        del cache[number]
    for number in range(1000, 1200):  # later writes reuse some and note the cache again
        cache.set(number, b'x')

    def trimmed() -> bool:
        pages = pragma(cache, 'page_count')
        return pragma(cache, 'freelist_count') <= max(_checkpointer.TRIM_MIN_PAGES, pages // 8)

    assert wait_for(trimmed)
    assert pragma(cache, 'page_count') < 500 * 3 // 2  # well below the 1500 pages of 500 values
    assert sorted(cache) == list(range(450, 500)) + list(range(1000, 1200))
    cache.close()


def test_a_trim_that_finds_the_lock_busy_is_tried_again_with_no_write_after(tmp_path):
    """The thread's one try for the write lock fails (Timeout, as Store raises it when another
    connection writes); the cache is not written again, so no commit notes it anew: the thread
    itself must come back to the pages it knows are free."""
    cache = dc.Cache(str(tmp_path / 'c'))
    store = cache._store
    real_return = store.return_free_pages
    written = threading.Event()
    busy_after = []

    def busy_until_twice_after_the_writes(pages, timeout=None, counted=True):
        if timeout == 0.0:  # the thread's one try (the evictor waits)
            if not written.is_set():
                raise dc.Timeout('database is locked')
            if len(busy_after) < 2:
                busy_after.append(pages)
                raise dc.Timeout('database is locked')
        real_return(pages, timeout, counted)

    store.return_free_pages = busy_until_twice_after_the_writes
    for number in range(500):
        cache.set(number, VALUE)
    for number in range(450):
        del cache[number]  # the last write: the free pages stay until the thread returns them
    written.set()

    def trimmed() -> bool:
        pages = pragma(cache, 'page_count')
        return pragma(cache, 'freelist_count') <= max(_checkpointer.TRIM_MIN_PAGES, pages // 8)

    assert wait_for(trimmed)
    assert len(busy_after) == 2
    cache.close()


def test_one_call_returns_as_many_free_pages_as_asked(tmp_path):
    """SQLite's incremental_vacuum(N) returns one page per step and Python's sqlite3 steps a
    statement once per execute: Store.return_free_pages must still return N, not 1."""
    cache = dc.Cache(str(tmp_path / 'c'))
    with cache.transact():
        for number in range(100):
            cache.set(number, VALUE)
    with cache.transact():
        for number in range(60):
            del cache[number]
    free = pragma(cache, 'freelist_count')
    assert 100 < free <= _checkpointer.TRIM_MIN_PAGES  # the thread leaves this many alone
    cache._store.return_free_pages(100)
    assert pragma(cache, 'freelist_count') == free - 100
    cache._store.return_free_pages(10_000)  # no more than there are
    assert pragma(cache, 'freelist_count') == 0
    assert sorted(cache) == list(range(60, 100))
    cache.close()


@pytest.mark.parametrize('removal', ['clear', 'evict', 'expire', 'cull'])
def test_bulk_removals_return_every_free_page(tmp_path, removal):
    cache = dc.Cache(str(tmp_path / 'c'), size_limit=2**20)
    with cache.transact():  # no size check in between: the cache goes far over its limit
        for number in range(400):
            cache.set(number, VALUE, expire=0.01 if removal == 'expire' else None, tag='t')
    time.sleep(0.02)
    {'clear': cache.clear, 'evict': lambda: cache.evict('t'), 'expire': cache.expire,
     'cull': cache.cull}[removal]()
    assert pragma(cache, 'freelist_count') == 0
    assert pragma(cache, 'page_count') * 4096 <= 2**20 + 64 * 1024
    cache.close()


def test_a_failing_round_does_not_stop_the_thread(tmp_path, monkeypatch):
    real_round = _checkpointer._round
    failures = []

    def failing_once(store, go_on):
        if not failures:
            failures.append(store)
            raise RuntimeError('injected')
        return real_round(store, go_on)

    monkeypatch.setattr(_checkpointer, '_round', failing_once)
    cache = dc.Cache(str(tmp_path / 'c'))
    for number in range(150):
        cache.set(number, VALUE)
    assert wait_for(lambda: bool(failures))
    for number in range(150, 300):
        cache.set(number, VALUE)
    assert wait_for(lambda: os.path.getsize(database(cache)) > 1_000_000)
    cache.close()


def test_a_round_that_took_a_cache_before_it_closed_skips_it(tmp_path, monkeypatch):
    # The thread takes the caches to work on, then a close() comes before it starts on this
    # one. Working on it then would open a connection after the close: the cache's files (the
    # WAL, the database file at that connection's checkpoint) would change after close().
    took = threading.Event()
    closed = threading.Event()
    worked = []
    real_work_on = _checkpointer._checkpointer._work_on
    real_round = _checkpointer._round

    def late_work_on(store):
        took.set()
        closed.wait(30)
        real_work_on(store)

    def recording_round(store, go_on):
        worked.append(store)
        return real_round(store, go_on)

    monkeypatch.setattr(_checkpointer._checkpointer, '_work_on', late_work_on)
    monkeypatch.setattr(_checkpointer, '_round', recording_round)
    cache = dc.Cache(str(tmp_path / 'c'))
    for number in range(300):
        cache.set(number, VALUE)
    assert took.wait(30)
    cache.close()
    assert not os.path.exists(database(cache) + '-wal')  # the last close removed it
    rounds = _checkpointer.rounds()  # the held round counts once it ends
    closed.set()
    assert wait_for(lambda: _checkpointer.rounds() > rounds)
    assert cache._store not in worked
    assert not os.path.exists(database(cache) + '-wal')


def _rounds_around_writes(directory: str, small: int, results) -> None:
    """In a fresh process: the thread's rounds after `small` small writes, then whether a
    round comes once a megabyte more is written."""
    cache = dc.Cache(directory)
    for number in range(small):
        cache.set(number, b'x')
        time.sleep(0.001)  # the writes span many of the thread's intervals
    time.sleep(5 * _checkpointer.INTERVAL)
    results.put(_checkpointer.rounds())
    for number in range(150):
        cache.set(number, VALUE)
    results.put(wait_for(lambda: _checkpointer.rounds() > 0))
    # With no round due for IDLE_EXIT, the thread exits (a later fork finds no thread to copy).
    results.put(wait_for(lambda: 'diskcache_core-checkpoint' not in {
        thread.name for thread in threading.enumerate()
    }))
    cache.close()


def test_the_thread_wakes_only_when_a_round_has_work(tmp_path):
    # A few commits (far below PASS_BYTES of WAL between them) give the thread nothing to do:
    # it is not woken for them, every interval, as it was; 1.5 MB more gives it a round; idle,
    # it exits.
    spawn = multiprocessing.get_context('spawn')
    results = spawn.Queue()
    worker = spawn.Process(target=_rounds_around_writes, args=(str(tmp_path / 'c'), 100, results))
    worker.start()
    try:
        assert results.get(timeout=300) == 0
        assert results.get(timeout=300) is True
        assert results.get(timeout=300) is True
    finally:
        worker.join(60)
    assert worker.exitcode == 0


@pytest.mark.skipif(not hasattr(os, 'fork'), reason='needs fork()')
def test_forks_while_the_thread_works_leave_every_process_whole(tmp_path):
    cache = dc.Cache(str(tmp_path / 'c'))
    for round_number in range(5):
        for number in range(100):  # 1 MB: the thread has a round to do
            cache.set((round_number, number), VALUE)
        pid = os.fork()
        if pid == 0:  # the child writes through the inherited Cache object, then checks
            status = 1
            try:
                for number in range(150):
                    cache.set(('child', round_number, number), VALUE)
                if all(cache[('child', round_number, n)] == VALUE for n in range(150)):
                    status = 0
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert len(cache) == 5 * 100 + 5 * 150
    assert cache.check() == []
    cache.close()


def truncate_checkpoint_busy(cache: dc.Cache) -> int:
    """Try to checkpoint the whole WAL and start it over, not waiting: 1 while a reader's
    snapshot holds frames back."""
    con = sqlite3.connect(database(cache), timeout=0)
    try:
        return int(con.execute('PRAGMA wal_checkpoint(TRUNCATE)').fetchone()[0])
    finally:
        con.close()


@pytest.mark.parametrize('memory_size_limit', [0, 2**22])
def test_reads_leave_no_snapshot_open_between_calls(tmp_path, memory_size_limit):
    # Reads reuse one cursor per connection: a statement left unfinished there would keep this
    # thread's read transaction, its snapshot, open after the call, and no checkpoint could
    # then start the WAL over until the next read on that cursor.
    cache = dc.Cache(str(tmp_path / 'c'), memory_size_limit=memory_size_limit)
    writer = dc.Cache(cache.directory)  # another object: `cache`'s memory tier holds none of it
    for index in range(20):
        writer.set(f'k{index}', index)
    # The check sees a held snapshot: a statement left with rows to go on the read cursor.
    pending = cache._store.state().read('SELECT key FROM Cache')
    assert pending.fetchone() is not None
    writer.set('later', 0)
    assert truncate_checkpoint_busy(cache) == 1
    pending.fetchall()
    reads = (lambda: len(cache) == 21, lambda: 'k2' in cache, lambda: cache.get('k1') == 1,
             lambda: sorted(cache)[:2] == ['k0', 'k1'])  # iteration: pages of many rows
    for read in reads:
        assert read()  # each found what it reads in the database
        writer.set('later', 1)  # frames past the snapshot that read may have kept
        assert truncate_checkpoint_busy(cache) == 0
    writer.close()
    cache.close()


@pytest.mark.parametrize('in_transaction', [False, True])
def test_only_values_stored_inline_count_as_written_to_the_wal(tmp_path, in_transaction):
    # A value file's bytes never enter the WAL: counting them woke a checkpoint round (two
    # fsyncs, a connection opened) for every large set, and copied nothing.
    cache = dc.Cache(str(tmp_path / 'c'), disk_min_file_size=2**16)
    store = cache._store
    store.wal_noted = True  # (no round is noted meanwhile: the count is left as written)
    with cache.transact() if in_transaction else contextlib.nullcontext():
        cache.set('warm', b'')  # the connection opened, the schema read
    cache.push(b'')
    before = store.wal_bytes
    with cache.transact() if in_transaction else contextlib.nullcontext():
        for number in range(20):
            cache.set(number, b'f' * 2**20)  # a value file each
            cache.push(b'q' * 2**20)  # in a value file too
    in_files = store.wal_bytes - before
    assert len(value_files(cache.directory)) == 40
    before = store.wal_bytes
    with cache.transact() if in_transaction else contextlib.nullcontext():
        for number in range(20):
            cache.set(number, b'i' * 60_000)  # inline
    inline = store.wal_bytes - before
    assert inline >= 20 * 60_000
    assert in_files < 20 * 2**20 / 16  # a commit page or so each, not the 40 MB
    cache.close()


def _wal_restarts(cache: dc.Cache) -> int:
    """The WAL header's checkpoint sequence number: SQLite adds one each time a writer starts
    the WAL over (read from the file: SQLite holds no lock on the WAL file that closing this
    descriptor could drop)."""
    with open(database(cache) + '-wal', 'rb') as wal:
        return int.from_bytes(wal.read(16)[12:16], 'big')


class _WriterAfterEachCheckpoint:
    """Stands for the checkpointer module's ``sqlite3``: after each checkpoint of the round's
    connection another writer commits one item (when the write lock is free), as a stream of
    writes from other processes does while a checkpoint waits for its fsyncs. The first such
    commit comes while a reader that began before the checkpoint still reads (`reader`), so
    that commit cannot start the WAL over and leaves it with a page no checkpoint copied."""

    def __init__(self, writer: dc.Cache, reader: sqlite3.Connection) -> None:
        self.writer = writer
        self.reader = reader
        self.commits = 0
        self.refused = 0

    def __getattr__(self, name: str):
        return getattr(sqlite3, name)

    def connect(self, *args, **kwargs):
        return _CheckpointThenWrite(sqlite3.connect(*args, **kwargs), self)

    def after_checkpoint(self) -> None:
        try:
            self.writer.set(('stream', self.commits), b'x')
            self.commits += 1
        except dc.Timeout:  # the round holds the write lock
            self.refused += 1
        if self.reader.in_transaction:
            self.reader.execute('COMMIT')


class _CheckpointThenWrite:
    """A round's connection whose checkpoints are each followed by the stream's write."""

    def __init__(self, con: sqlite3.Connection, stream: _WriterAfterEachCheckpoint) -> None:
        self.con = con
        self.stream = stream

    def execute(self, statement: str, *args):
        cursor = self.con.execute(statement, *args)
        if 'wal_checkpoint' not in statement:
            return cursor
        result = cursor.fetchone()
        self.stream.after_checkpoint()
        return _Row(result)

    def close(self) -> None:
        self.con.close()


class _Row:
    def __init__(self, row) -> None:
        self.row = row

    def fetchone(self):
        return self.row


def _long_wal_under_a_stream(tmp_path, monkeypatch):
    """A cache whose WAL is past CLOSE_PAGES and that no writer checkpoints, a second Cache
    object on it whose writes stand for the stream, and the WAL's restarts so far; rounds run
    only when the test calls them."""
    from diskcache_core._store import store as _store_module

    monkeypatch.setattr(_store_module, 'note_commit', lambda store: None)
    directory = str(tmp_path / 'c')
    cache = dc.Cache(directory, sqlite_wal_autocheckpoint=100_000)  # no writer checkpoints
    writer = dc.Cache(directory, timeout=0)
    cache.set(0, VALUE)
    number = 1
    while os.path.getsize(database(cache) + '-wal') < (_checkpointer.CLOSE_PAGES + 100) * 4120:
        cache.set(number, VALUE)
        number += 1
    return cache, writer, number, _wal_restarts(cache)


def _round_under_a_stream(cache, writer, number, monkeypatch) -> _WriterAfterEachCheckpoint:
    """One round on `cache` while `writer` commits after each of its checkpoints; the first
    of those commits comes while a reader that began before still reads."""
    reader = sqlite3.connect(database(cache), isolation_level=None)  # SQLite's own open
    reader.execute('BEGIN')
    assert reader.execute('SELECT COUNT(*) FROM Cache').fetchone() == (number,)
    stream = _WriterAfterEachCheckpoint(writer, reader)
    with monkeypatch.context() as patch:
        patch.setattr(_checkpointer, 'sqlite3', stream)
        _checkpointer._round(cache._store, lambda: True)
    reader.close()
    assert stream.commits >= 1
    return stream


def test_a_round_closes_the_wal_that_writers_keep_adding_to(tmp_path, monkeypatch):
    """Under a stream of writes no checkpoint alone reaches the WAL's end, so no writer could
    start the WAL over: it grew to the writers' backstop, and each commit past that ran a
    checkpoint of its own (fsyncs inside a set). A round that finds a long WAL all but copied
    copies the rest with the write lock held for that moment, and starts the WAL over itself."""
    monkeypatch.setattr(_checkpointer, '_CLOSE_PASS_LIMIT', 60.0)  # however loaded the machine
    cache, writer, number, restarts = _long_wal_under_a_stream(tmp_path, monkeypatch)
    stream = _round_under_a_stream(cache, writer, number, monkeypatch)
    assert stream.refused >= 1  # the closing checkpoint ran with the write lock held
    # The round started the WAL over itself: no writer's set waits for that fsync.
    assert _wal_restarts(cache) == restarts + 1
    assert pragma(cache, 'user_version') == 0
    cache.set('after', b'x')
    assert _wal_restarts(cache) == restarts + 1
    assert cache['after'] == b'x' and writer[('stream', 0)] == b'x'
    assert all(cache[key] == VALUE for key in range(number))
    writer.close()
    cache.close()


def test_a_round_leaves_the_wal_open_while_checkpoints_are_slow(tmp_path, monkeypatch):
    """Closing the WAL holds the write lock for a checkpoint's two fsyncs: while a short
    checkpoint takes longer than _CLOSE_PASS_LIMIT (a device busy writing back), the round
    does not, and writers never wait for it."""
    monkeypatch.setattr(_checkpointer, '_CLOSE_PASS_LIMIT', 0.0)
    cache, writer, number, _ = _long_wal_under_a_stream(tmp_path, monkeypatch)
    stream = _round_under_a_stream(cache, writer, number, monkeypatch)
    assert stream.refused == 0  # the write lock was never taken: no writer waited
    assert stream.commits >= 2
    assert all(cache[key] == VALUE for key in range(number))
    writer.close()
    cache.close()


def test_the_threads_tries_for_the_lock_are_not_the_applications_waits(tmp_path):
    """Closing the WAL and returning free pages try for the write lock without waiting; a try
    that finds it held is no write of the application that waited or gave up (Cache.metrics,
    whose give-ups one would alert on). The application's own tries still count."""
    cache = dc.Cache(str(tmp_path / 'c'))
    for number in range(500):
        cache.set(number, VALUE)
    for number in range(450):
        del cache[number]
    before = cache.metrics().writes
    holder = sqlite3.connect(database(cache), isolation_level=None)  # SQLite's own open
    con = sqlite3.connect(database(cache), isolation_level=None)
    try:
        holder.execute('BEGIN IMMEDIATE')  # holds the write lock
        _checkpointer._close_wal(cache._store, con)
        with pytest.raises(dc.Timeout):
            cache._store.return_free_pages(10, timeout=0.0, counted=False)
        assert cache.metrics().writes == before
        with pytest.raises(dc.Timeout):
            cache._store.return_free_pages(10, timeout=0.0)
    finally:
        con.close()
        holder.execute('ROLLBACK')
        holder.close()
    after = cache.metrics().writes
    assert (after.lock_waits, after.give_ups) == (before.lock_waits + 1, before.give_ups + 1)
    cache.close()


def test_a_round_that_copies_all_of_a_quiet_wal_starts_it_over(tmp_path, monkeypatch):
    """Writes stop (the end of a burst): the round's checkpoint copies the whole WAL, and the
    next writer would start the WAL over, waiting in its set for the fsync of the new header
    (milliseconds: python-diskcache's next set, its WAL not checkpointed, waits for none). The
    round starts it over itself."""
    from diskcache_core._store import store as _store_module

    monkeypatch.setattr(_store_module, 'note_commit', lambda store: None)  # rounds run here
    cache = dc.Cache(str(tmp_path / 'c'))
    for number in range(100):  # past PASS_BYTES, below CLOSE_PAGES: not a long WAL to close
        cache.set(number, VALUE)
    assert cache._store.wal_bytes >= _checkpointer.PASS_BYTES
    assert os.path.getsize(database(cache) + '-wal') < _checkpointer.CLOSE_PAGES * 4120
    restarts = _wal_restarts(cache)
    # On a thread of its own, as the checkpoint thread's: this thread's connection stays open.
    round_thread = threading.Thread(target=_checkpointer._round, args=(cache._store, lambda: True))
    round_thread.start()
    round_thread.join(60)
    assert not round_thread.is_alive()
    assert _wal_restarts(cache) == restarts + 1
    cache.set('after', b'x')
    assert _wal_restarts(cache) == restarts + 1  # this set appended to the new WAL
    assert cache['after'] == b'x'
    assert all(cache[number] == VALUE for number in range(100))
    assert pragma(cache, 'user_version') == 0
    cache.close()
