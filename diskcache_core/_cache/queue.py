"""Queue operations on a cache: push, pull and peek at either end, and peekitem (the `Queues`
part, and `QueueMethods`, Cache's methods that hand each call to it).

Queues live among the cache's items under integer keys from 500000000000000 (or
``'prefix-500000000000000'`` strings), in key order; python-diskcache's layout and results.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Callable

from .._store import schema as sql
from .._arguments import QUEUE_START, check_bindable, check_side, check_tag, expire_at, key_range, shape
from .._disk.disk import Disk
from .._store.rows import raise_decode_error, reads_as_miss
from .._store.store import MIN_WRITE_CHARGE, Store

__all__ = ["GONE", "QueueMethods", "Queues", "UnreadableEntry"]


class UnreadableEntry(Exception):
    """`Queues.fetch_row` under ``on_error='miss'``: the row's value cannot be read back, and
    the item goes as a miss, as one whose value file is lost does."""


#: What `Queues.fetch_row` raises for an item read as gone: its value file is missing, or it
#: is unreadable under ``on_error='miss'``.
GONE = (FileNotFoundError, UnreadableEntry)


class Queues:
    """push/pull/peek/peekitem over one cache's Store (Cache's queue methods call these)."""

    def __init__(
        self, store: Store, disk: Disk, sized_files: bool,
        serialize: Callable[..., tuple[int, int, str | None, Any]] | None = None,
    ) -> None:
        """`serialize`: the cache's write-path serializer (`serializer`; None: ``disk.store``)."""
        self._store = store
        self._disk = disk
        self._serialize = disk.store if serialize is None else serialize
        self._sized_files = sized_files  # a value file must be as long as its row says

    def fetch_row(
        self, rowid: int, key: Any, mode: int, filename: str | None, db_value: Any, size: int
    ) -> Any:
        """The value of row `rowid` of `key` (FileNotFoundError when its value file is gone or
        cut short; UnreadableEntry when it cannot be read back and the Disk's ``on_error`` is
        ``'miss'``; DatabaseError naming the row when it is damaged); also Cache.pop's, which
        selects the same columns."""
        checked = size if filename is not None and self._sized_files else db_value
        try:
            return self._disk.fetch(mode, filename, checked, False)
        except FileNotFoundError:
            raise
        except Exception as exc:
            if reads_as_miss(self._store, self._disk, exc):
                raise UnreadableEntry(str(exc)) from exc
            raise_decode_error(
                exc, self._disk, mode, filename, checked, rowid, key, self._store.pool.path
            )

    def push(
        self,
        value: Any,
        prefix: str | None = None,
        side: str = "back",
        expire: float | None = None,
        read: bool = False,
        tag: Any = None,
        retry: bool = False,
    ) -> Any:
        """Push `value` onto the `side` of the queue named `prefix`; return its key.

        Keys are integers from 500000000000000 (or ``'prefix-500000000000000'`` strings).
        """
        check_side(side, ("back", "front"))
        low, high = key_range(prefix)
        now = time.time()
        expires = None if expire is None else expire_at(now, expire)
        if tag is not None:
            tag = check_tag(tag)
        size, mode, filename, db_value = self._serialize(value, read)
        with self._store.transaction(retry, new_file=filename) as state:
            row = state.execute(sql.QUEUE_END[side], (low, high)).fetchone()
            if row is None:
                number = QUEUE_START
            else:
                last = row[0]
                number = last if prefix is None else int(last[last.rfind("-") + 1:])
                number += 1 if side == "back" else -1
            db_key = number if prefix is None else low[:-15] + f"{number:015d}"  # (prefix + "-")
            try:
                state.execute(sql.INSERT, (db_key, 1, now, expires, tag, size, mode, filename, db_value))
            except (UnicodeEncodeError, OverflowError):  # SQLite cannot bind the value
                check_bindable("value", db_value)  # (the transaction removes the value file)
                raise
            except sqlite3.IntegrityError:  # an item set under the key the queue needs next
                raise ValueError(
                    f"cannot push to the {side} of queue {prefix!r}: its next key, {db_key!r},"
                    " is an item's key (set directly, outside the queue's range)"
                ) from None
            charge = max(size, MIN_WRITE_CHARGE)  # counted when the transaction commits
            state.txn.charge += charge
            if filename is None:
                state.txn.logged += charge  # (a value file's bytes are not written to the WAL)
        return db_key

    def pull(
        self,
        prefix: str | None = None,
        default: Any = (None, None),
        side: str = "front",
        expire_time: bool = False,
        tag: bool = False,
        retry: bool = False,
    ) -> Any:
        """Remove and return ``(key, value)`` from the `side` of the queue; `default` if empty.

        The value is read first and the row then deleted only if it is still that end's item,
        unchanged: a value the Disk refuses (SafeDisk's UnsafePickleError) stays queued, unless
        the Disk's ``on_error`` is ``'miss'``: then it goes, and the next item is pulled.
        """
        check_side(side, ("front", "back"))
        low, high = key_range(prefix)
        delete_unchanged_end = sql.QUEUE_DELETE_UNCHANGED_END[side]
        while True:  # each pass removes a row or sees another writer's change
            now = time.time()
            rows = self._store.read(sql.QUEUE_PEEK[side], (low, high))
            if not rows:
                return shape(default, None, None, expire_time, tag)
            rowid, db_key, _, db_expire, db_tag, mode, filename, db_value, size = rows[0]
            expiry = sql.expiry_of(db_expire)  # db_expire itself names the row below
            live = expiry is None or expiry >= now
            if live:
                try:
                    value = self.fetch_row(rowid, db_key, mode, filename, db_value, size)
                except GONE:
                    live = False  # a missing value file: the item goes, as if expired
            params = (low, high, rowid, db_key, db_expire, db_tag, mode, filename, db_value)
            removed, _ = self._store.write(delete_unchanged_end, params, retry)
            if removed and live:
                return shape((db_key, value), db_expire, db_tag, expire_time, tag)

    def peek(
        self,
        prefix: str | None = None,
        default: Any = (None, None),
        side: str = "front",
        expire_time: bool = False,
        tag: bool = False,
        retry: bool = False,
    ) -> Any:
        """Return ``(key, value)`` at the `side` of the queue without removing it."""
        check_side(side, ("front", "back"))
        found = self._first_live(sql.QUEUE_PEEK[side], key_range(prefix), retry)
        if found is None:
            return shape(default, None, None, expire_time, tag)
        db_key, _, value, db_expire, db_tag = found
        return shape((db_key, value), db_expire, db_tag, expire_time, tag)

    def peekitem(
        self, last: bool = True, expire_time: bool = False, tag: bool = False, retry: bool = False
    ) -> Any:
        """Return the newest (or, with ``last=False``, oldest) ``(key, value)``; KeyError if empty."""
        found = self._first_live(sql.PEEK_LAST if last else sql.PEEK_FIRST, (), retry)
        if found is None:
            raise KeyError("dictionary is empty")
        db_key, raw, value, db_expire, db_tag = found
        return shape((self._disk.get(db_key, raw), value), db_expire, db_tag, expire_time, tag)

    def item_at(self, index: int, retry: bool = False) -> tuple[Any, Any] | None:
        """``(key, value)`` of the item at `index` in key order (negative: from the end), or
        None when out of range: read in one statement, so in one snapshot (a Deque's ``d[i]``)."""
        end, offset = ("front", index) if index >= 0 else ("back", -1 - index)
        found = self._first_live(sql.ROW_AT[end], (offset,), retry)
        if found is None:
            return None
        db_key, raw, value, _, _ = found
        return self._disk.get(db_key, raw), value

    def _first_live(self, statement: str, params: tuple[Any, ...], retry: bool) -> tuple[Any, ...] | None:
        """``(db_key, raw, value, expire_time, tag)`` of the first row `statement` selects that
        has not expired, or None. Expired rows met on the way are deleted, and so are rows
        whose value file is missing or, under ``on_error='miss'``, that cannot be read back; a
        read-only cache passes over them instead (the statement is read again with an OFFSET of
        the rows passed)."""
        read_only = self._store.pool.read_only
        passed = 0
        while True:
            now = time.time()
            if passed:
                rows = self._store.read(*_past(statement, params, passed))
            else:
                rows = self._store.read(statement, params)
            if not rows:
                return None
            rowid, db_key, raw, db_expire, db_tag, mode, filename, db_value, size = rows[0]
            expiry = sql.expiry_of(db_expire)  # db_expire itself names the row below
            if expiry is not None and expiry < now:
                if read_only:
                    passed += 1
                else:
                    self._store.write(sql.DELETE_EXPIRED_ROWID, (rowid, now), retry)
                continue
            try:
                value = self.fetch_row(rowid, db_key, mode, filename, db_value, size)
            except GONE:
                if read_only:
                    passed += 1
                    continue
                # Replaced meanwhile, or lost for good: the row goes if it is still the one
                # read (as pull removes it), and either way we look again.
                unchanged = (rowid, db_key, raw, db_expire, db_tag, mode, filename, db_value)
                self._store.write(sql.DELETE_UNCHANGED, unchanged, retry)
                continue
            return db_key, raw, value, db_expire, db_tag


def _past(statement: str, params: tuple[Any, ...], passed: int) -> tuple[str, tuple[Any, ...]]:
    """`statement` (a ``LIMIT 1`` query, perhaps with an ``OFFSET ?`` last) and `params`, moved
    `passed` rows further on."""
    if statement.endswith("OFFSET ?"):
        return statement, (*params[:-1], params[-1] + passed)
    return statement + " OFFSET ?", (*params, passed)


class QueueMethods:
    """Cache's queue methods, each the `Queues` part's: a base class of CacheBase (a cache with
    a remote has none: `RemoteItems`)."""

    _queues: Queues

    def push(
        self,
        value: Any,
        prefix: str | None = None,
        side: str = "back",
        expire: float | None = None,
        read: bool = False,
        tag: Any = None,
        retry: bool = False,
    ) -> Any:
        """Push `value` onto the `side` of the queue named `prefix`; return its key.

        Keys are integers from 500000000000000 (or ``'prefix-500000000000000'`` strings).
        """
        return self._queues.push(value, prefix, side, expire, read, tag, retry)

    def pull(
        self,
        prefix: str | None = None,
        default: Any = (None, None),
        side: str = "front",
        expire_time: bool = False,
        tag: bool = False,
        retry: bool = False,
    ) -> Any:
        """Remove and return ``(key, value)`` from the `side` of the queue; `default` if empty."""
        return self._queues.pull(prefix, default, side, expire_time, tag, retry)

    def peek(
        self,
        prefix: str | None = None,
        default: Any = (None, None),
        side: str = "front",
        expire_time: bool = False,
        tag: bool = False,
        retry: bool = False,
    ) -> Any:
        """Return ``(key, value)`` at the `side` of the queue without removing it."""
        return self._queues.peek(prefix, default, side, expire_time, tag, retry)

    def peekitem(
        self, last: bool = True, expire_time: bool = False, tag: bool = False, retry: bool = False
    ) -> Any:
        """Return the newest (or, with ``last=False``, oldest) ``(key, value)``; KeyError if empty."""
        return self._queues.peekitem(last, expire_time, tag, retry)
