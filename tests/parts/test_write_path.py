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
