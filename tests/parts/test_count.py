"""The item count len() reads (a Settings row kept by triggers): exact under concurrent writers,
rollbacks, SIGKILL of a writer, expiry, culling, clearing and eviction, python-diskcache writing
the same directory, and directories of an older schema (migrated, or opened read-only)."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sqlite3
import time

import pytest

import diskcache_core as dc
from diskcache_core._store import schema as _schema

SPAWN = multiprocessing.get_context('spawn')


def _stored_and_counted(directory: str) -> tuple[int, int]:
    """(the count row, COUNT(*)), read in one statement, so from one snapshot."""
    con = sqlite3.connect(os.path.join(directory, 'cache.db'))
    try:
        row = con.execute(
            "SELECT (SELECT value FROM Settings WHERE key = 'count'), (SELECT COUNT(*) FROM Cache)"
        ).fetchone()
        return row[0], row[1]
    finally:
        con.close()


def _exact(cache: dc.Cache) -> None:
    stored, counted = _stored_and_counted(cache.directory)
    assert stored == counted == len(cache)


def _churn(directory: str, worker: int, rounds: int, ready) -> None:
    """Insert, overwrite and delete keys of its own; leave `rounds` items (keys w<worker>-<i>)."""
    rng = random.Random(worker)
    with dc.Cache(directory) as cache:
        if ready is not None:
            ready.set()
        for i in range(rounds):
            cache.set(f'w{worker}-{i}', i)
            cache.set(f'w{worker}-{i}', b'x' * rng.choice((10, 5000)))  # overwrite, maybe a file
            cache.set(f'tmp{worker}-{i}', i)
            if i % 3 == 0:
                with cache.transact():
                    cache.delete(f'tmp{worker}-{i}')
                    cache.set(f'tmp{worker}-{i}', i)
            cache.delete(f'tmp{worker}-{i}')


def test_len_is_exact_under_concurrent_processes(tmp_path):
    directory = str(tmp_path / 'cache')
    rounds, workers = 150, 3
    with dc.Cache(directory) as cache:
        processes = [SPAWN.Process(target=_churn, args=(directory, w, rounds, None)) for w in range(workers)]
        for process in processes:
            process.start()
        while any(process.is_alive() for process in processes):
            stored, counted = _stored_and_counted(directory)
            assert stored == counted
            time.sleep(0.005)
        for process in processes:
            process.join()
            assert process.exitcode == 0
        assert len(cache) == rounds * workers
        _exact(cache)


def test_rolled_back_transaction_leaves_the_count(tmp_path):
    with dc.Cache(str(tmp_path)) as cache:
        cache.set('kept', 1)
        with pytest.raises(RuntimeError):
            with cache.transact():
                for i in range(10):
                    cache.set(i, i)
                cache.delete('kept')
                assert len(cache) == 10  # inside: its own writes
                raise RuntimeError('roll back')
        assert len(cache) == 1
        _exact(cache)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, 'SIGKILL'), reason='needs SIGKILL')
def test_sigkill_of_a_writer_leaves_the_count_exact(tmp_path):
    directory = str(tmp_path / 'cache')
    dc.Cache(directory).close()
    for attempt in range(6):
        ready = SPAWN.Event()
        process = SPAWN.Process(target=_churn, args=(directory, attempt, 10**6, ready))
        process.start()
        assert ready.wait(60)
        time.sleep(0.05 + 0.1 * random.random())
        os.kill(process.pid, signal.SIGKILL)
        process.join(30)
        assert process.exitcode == -signal.SIGKILL
        with dc.Cache(directory) as cache:
            _exact(cache)


def test_expiry_culling_clearing_and_eviction_keep_the_count(tmp_path):
    with dc.Cache(str(tmp_path), size_limit=0, cull_limit=0) as cache:
        for i in range(20):
            cache.set(('expiring', i), i, expire=0.01)
            cache.set(('tagged', i), b'x' * 5000, tag='t')
            cache.set(('plain', i), i)
        assert len(cache) == 60
        time.sleep(0.05)
        assert cache.expire() == 20
        assert len(cache) == 40
        _exact(cache)
        assert cache.evict('t') == 20
        assert len(cache) == 20
        assert cache.evict_items(5) == 5
        assert len(cache) == 15
        cache.reset('cull_limit', 10)
        cache.reset('size_limit', 1)
        cache.set('one more', b'y' * 5000)  # culls
        assert len(cache) < 16
        _exact(cache)
        assert cache.cull() >= 0
        _exact(cache)
        cache.clear()
        assert len(cache) == 0
        _exact(cache)
        cache.reset('size_limit', 2**30)
        cache.add('a', 1)
        cache.add('a', 2)  # no insert
        cache.incr('n')
        assert cache.pop('a') == 1
        cache.push('queued')
        assert cache.pull()[1] == 'queued'
        cache.touch('n', 10)
        assert len(cache) == 1
        _exact(cache)


def test_fanout_len_and_reset_count(tmp_path):
    with dc.FanoutCache(str(tmp_path), shards=3) as cache:
        for i in range(30):
            cache[i] = i
        del cache[0]
        assert len(cache) == 29
    with dc.Cache(str(tmp_path / 'one')) as cache:
        cache['a'] = 1
        assert cache.reset('count') == 1 == len(cache)


def _as_schema_2(directory: str) -> None:
    """Make a database look as schema 2 left it: no count triggers, no count row."""
    con = sqlite3.connect(os.path.join(directory, 'cache.db'))
    with con:
        con.execute('DROP TRIGGER Settings_count_insert')
        con.execute('DROP TRIGGER Settings_count_delete')
        con.execute("DELETE FROM Settings WHERE key = 'count'")
        con.execute("UPDATE Settings SET value = 2 WHERE key = 'schema_version'")
    con.close()


def test_a_schema_2_database_is_migrated_and_recounted(tmp_path):
    directory = str(tmp_path)
    with dc.Cache(directory) as cache:
        for i in range(7):
            cache[i] = i
    _as_schema_2(directory)
    with dc.Cache(directory, read_only=True) as reader:  # cannot migrate: counts
        assert len(reader) == 7
    with dc.Cache(directory) as cache:
        assert cache.reset('schema_version') == _schema.SCHEMA_VERSION
        assert len(cache) == 7 and cache.count == 7
        cache[7] = 7
        _exact(cache)
    with dc.Cache(directory, read_only=True) as reader:  # current schema: reads the row
        assert len(reader) == 8


def test_opening_a_current_database_writes_nothing_and_does_not_count(tmp_path):
    directory = str(tmp_path)
    with dc.Cache(directory) as cache:
        cache['a'] = 1
    path = os.path.join(directory, 'cache.db')
    before = os.stat(path).st_mtime_ns, os.path.getsize(path)
    with dc.Cache(directory) as cache:
        assert len(cache) == 1
    assert (os.stat(path).st_mtime_ns, os.path.getsize(path)) == before


diskcache = pytest.importorskip('diskcache')


def test_python_diskcache_counts_right_in_our_directory_and_adds_no_triggers(tmp_path):
    directory = str(tmp_path)
    with dc.Cache(directory) as ours:
        for i in range(5):
            ours[i] = i
    with diskcache.Cache(directory) as peer:
        assert len(peer) == 5  # it reads our count row: right from its first open
        peer[5] = 5
        del peer[0]
        peer.set('big', b'z' * 100_000)
        assert len(peer) == 6
    con = sqlite3.connect(os.path.join(directory, 'cache.db'))
    triggers = [name for (name,) in con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%count%'")]
    con.close()
    assert sorted(triggers) == ['Settings_count_delete', 'Settings_count_insert']
    with dc.Cache(directory) as ours:
        assert len(ours) == 6
        _exact(ours)
        assert ours.check() == []


def test_python_diskcache_directory_and_a_peer_touched_schema_2_one(tmp_path):
    peer_dir = str(tmp_path / 'peer')
    with diskcache.Cache(peer_dir) as peer:
        for i in range(4):
            peer[i] = i
    with dc.Cache(peer_dir) as ours:
        assert len(ours) == 4
        ours['x'] = 1
        _exact(ours)
    with diskcache.Cache(peer_dir) as peer:
        assert len(peer) == 5
    old_dir = str(tmp_path / 'old')
    with dc.Cache(old_dir) as ours:
        for i in range(3):
            ours[i] = i
    _as_schema_2(old_dir)
    with diskcache.Cache(old_dir) as peer:  # adds its triggers, counting from 0
        peer['p'] = 1
        assert len(peer) == 1
    with dc.Cache(old_dir) as ours:  # migrated: recounted
        assert len(ours) == 4
        _exact(ours)
    with diskcache.Cache(old_dir) as peer:
        assert len(peer) == 4


def test_check_reports_and_fixes_a_wrong_count(tmp_path):
    directory = str(tmp_path)
    with dc.Cache(directory) as cache:
        cache['a'] = 1
        cache['b'] = 2
    con = sqlite3.connect(os.path.join(directory, 'cache.db'))
    with con:
        con.execute("UPDATE Settings SET value = 7 WHERE key = 'count'")
    con.close()
    with dc.Cache(directory) as cache:
        found = cache.check()
        assert [str(w.message) for w in found] == ['Settings.count != COUNT(*); 7 != 2']
        assert len(cache.check(fix=True)) == 1
        assert cache.check() == []
        assert len(cache) == 2
