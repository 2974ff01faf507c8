"""The write path's fixed costs (docs/design.rst, "What a write pays for against diskcache-rs"):
what a set or delete runs besides its statement, counted (never timed)."""

from __future__ import annotations

import sqlite3
from typing import Any

import diskcache_core as dc


class _Counting:
    """Stands in for a connection's ``execute``: counts the calls, then runs them."""

    def __init__(self, execute: Any) -> None:
        self.execute = execute
        self.calls = 0

    def __call__(self, *args: Any) -> sqlite3.Cursor:
        self.calls += 1
        return self.execute(*args)


def test_writes_reuse_one_cursor_per_connection(tmp_path):
    """set, add, touch, incr and delete run their statement on the connection's write cursor:
    no new cursor (``Connection.execute``) per write."""
    with dc.Cache(str(tmp_path)) as cache:
        cache.set('warm', 1)  # this thread's connection is open from here on
        state = cache._store.state()
        counting = _Counting(state.execute)
        state.execute = counting
        assert cache.set('a', b'x' * 100) is True
        assert cache.set('a', b'y' * 100) is True
        assert cache.add('b', 1) is True
        assert cache.touch('a', 60) is True
        assert cache.incr('n') == 1
        assert cache.delete('a') is True
        assert cache.delete('a') is False
        assert counting.calls == 0
        assert cache.get('a') is None and cache.get('b') == 1 and len(cache) == 3


def test_a_write_from_inside_a_writing_statement_still_runs(tmp_path):
    """A write that runs while another statement of the same thread is still executing (a
    signal handler's, run inside that statement's trigger function) finds the write cursor busy:
    it runs on a cursor of its own, as every write did before the cursor was shared."""
    with dc.Cache(str(tmp_path)) as cache:
        cache.set('warm', 1)
        state = cache._store.state()
        nested: list[bool] = []
        state.con.create_function('hdel_nested', 1, lambda key: nested.append(
            cache.set('inner', 2)))
        state.con.execute(
            "CREATE TEMP TRIGGER hdel_nested_write AFTER INSERT ON main.Cache"
            " WHEN NEW.key = 'outer' BEGIN SELECT hdel_nested(NEW.key); END"
        )
        counting = _Counting(state.execute)
        state.execute = counting
        assert cache.set('outer', 1) is True
        assert nested == [True]
        assert counting.calls == 1  # the inner write's, on a cursor of its own
        assert cache.get('outer') == 1 and cache.get('inner') == 2


def _page_size(directory: str) -> int:
    con = sqlite3.connect(f'{directory}/cache.db')
    try:
        (size,) = con.execute('PRAGMA page_size').fetchone()
        return int(size)
    finally:
        con.close()


def test_sqlite_page_size_applies_to_a_new_database_and_is_kept(tmp_path):
    """``sqlite_page_size`` given when the cache is made sizes its pages (it used to be run only
    on later connections, where SQLite ignores it); a reopen, and python-diskcache, keep it."""
    import diskcache

    directory = str(tmp_path / 'c')
    with dc.Cache(directory, sqlite_page_size=2048) as cache:
        cache.set('a', b'x' * 100)
    assert _page_size(directory) == 2048
    with dc.Cache(directory) as cache:
        assert cache.get('a') == b'x' * 100
        cache.set('b', 2)
    peer = diskcache.Cache(directory)
    try:
        assert len(peer) == 2 and peer.get('b') == 2
    finally:
        peer.close()
    assert _page_size(directory) == 2048
    fanout = str(tmp_path / 'f')
    with dc.FanoutCache(fanout, shards=2, sqlite_page_size=2048) as cache:
        cache.set('a', 1)
    assert {_page_size(f'{fanout}/{shard:03d}') for shard in range(2)} == {2048}


def test_sqlite_page_size_leaves_an_existing_database_alone(tmp_path):
    """An existing database keeps its page size (changing it would need a VACUUM)."""
    directory = str(tmp_path / 'c')
    with dc.Cache(directory) as cache:
        cache.set('a', 1)
    before = _page_size(directory)
    with dc.Cache(directory, sqlite_page_size=before // 2) as cache:
        assert cache.get('a') == 1
        cache.set('b', 2)
    assert _page_size(directory) == before
