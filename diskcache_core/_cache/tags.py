"""Many tags per item on one cache database: the writes that store extra tags, the read of an
item with its tags, eviction by any of an item's tags, and the keys of a tag.

An item's first tag is in the Cache table's ``tag`` column; its other tags in the tag table
(SQL and triggers: ``_store.tags``). A write with extra tags is one transaction: the item's row
(whose update drops its old extra tags, by trigger) and the new extra tags commit together or
not at all, so no reader sees an item without the tags it was stored with, and ``evict_tags`` —
one transaction too — removes every item that carried a tag when it ran and nothing written
after it committed (SQLite serializes the two).
"""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from .._arguments import INT64_MAX, check_tag, put_key
from .._disk.disk import Disk
from .._errors import DatabaseError, Timeout
from .._store import schema as sql
from .._store import reaper as _reaper
from .._store import tags as tsql
from .._store.store import Store, Written

if TYPE_CHECKING:
    from .._eviction.evictor import Evictor

__all__ = ["FILE_RACE_RETRIES", "ItemTags", "TagOperations", "TaggedRow", "check_evict_tags"]

FILE_RACE_RETRIES = 10  # a value file replaced between our SELECT and open: read the row again

_BATCH = 100  # rows per statement of evict(tag)'s batched deletes (as Evictor's)
_PAGE = 100  # keys per page of iterkeys(tag=...)
_TAGGED_KEYS = sql.TAGGED_KEYS  # the first tags only (no tag table)

TaggedRow = tuple[int, str | None, Any, Any, Any, Any, frozenset[Any]]


class ItemTags:
    """The extra-tag operations of one cache database (a part `CacheBase` composes)."""

    def __init__(self, store: Store, disk: Disk) -> None:
        """`store` holds the database; `disk` turns stored keys back into keys."""
        self.store = store
        self.disk = disk
        self._table = False  # the tag table was seen (it stays, unless the directory goes)

    def table(self) -> bool:
        """Whether the tag table exists (read until it is first found, then known)."""
        if not self._table:
            self._table = bool(self.store.read(tsql.TAG_TABLE_EXISTS))
        return self._table

    def _read(self, pick: Callable[[bool], str], params: Any) -> list[Any]:
        """Rows of the statement `pick` chooses by whether the tag table exists; read again
        without it where it is gone since it was seen (the cache directory removed while open
        and made anew: an empty database)."""
        try:
            return self.store.read(pick(self.table()), params)
        except DatabaseError as exc:
            if not self._table or "no such table" not in str(exc):
                raise
            self._table = False
            return self.store.read(pick(self.table()), params)

    def write(
        self, statement: str, params: Any, retry: bool, new_file: str | None, charge: int,
        db_key: Any, raw: int, extras: tuple[Any, ...], spared: Any = None,
    ) -> Written:
        """Run the item's write `statement` and store its `extras` in one transaction (the table
        and triggers made in it, where this is the database's first extra tag); `spared` is the
        write context of `Store.write`.

        An overwrite keeping the item's tags is one statement (`_store.tags.keeping_same_tags`);
        one keeping its first tag leaves its tag entries alone and replaces only the extra tags
        that change (`_store.tags.keeping_first_tag`); any other write replaces them all (the
        retag trigger drops the old ones).
        """
        store = self.store
        tagged = (db_key, raw, *extras)
        same_tags = (*params, *extras)
        if self._table and new_file is None:  # an inline value: the usual refresh on its own
            refresh = tsql.refreshing_same_tags(statement, len(params) + 1, len(extras))
            count = self._write_if_table(refresh, same_tags, retry, charge, spared)
            if count == 1:
                return count, None
            charge = 0 if self._table else charge  # (counted by the statement that ran)
        # The transaction owns `new_file`: removed if BEGIN or any statement fails.
        with store.transaction(retry, new_file) as state:
            count = 0
            if self._table and new_file is not None:  # (the statement reads the tag table)
                same = tsql.keeping_same_tags(statement, len(params) + 1, len(extras))
                count = self._write_if_table(same, same_tags, retry, charge, spared)
                if count == 1:
                    if state.inserted:  # a new item: its entries
                        self._execute(state, tsql.insert_extra_tags(len(extras)), tagged)
                    return count, None
                charge = 0  # (counted by the statement that ran)
            count, _ = store.write(
                tsql.keeping_first_tag(statement), params, retry, None, charge, spared
            )
            if count != 1:  # another first tag (or add found a live item): the write's own
                count, _ = store.write(statement, params, retry, None, 0, spared)
                insert = count == 1
            elif state.inserted:
                insert = True
            else:  # an overwrite keeping its first tag: does it keep its extra tags too?
                old = self._execute(state, tsql.SELECT_EXTRA_TAGS, (db_key, raw))
                insert = _typed(tag for (tag,) in old) != _typed(extras)
                if insert:  # those not kept go; the missing are added next
                    self._execute(state, tsql.delete_other_tags(len(extras)), tagged)
            if insert:
                self._execute(state, tsql.insert_extra_tags(len(extras)), tagged)
        self._table = True
        return count, None

    def _write_if_table(
        self, statement: str, params: tuple[Any, ...], retry: bool, charge: int, spared: Any
    ) -> int:
        """`store.write` of a statement reading the tag table: its rowcount, or 0 where the
        table is gone since it was seen (see `_read`)."""
        try:
            count, _ = self.store.write(statement, params, retry, None, charge, spared)
        except DatabaseError as exc:
            if "no such table" not in str(exc):
                raise
            self._table = False
            return 0
        return count

    @staticmethod
    def _execute(state: Any, statement: str, params: tuple[Any, ...]) -> list[Any]:
        """Run a statement of the tag table in the write's transaction; where the table is
        missing (rarely: the database's first extra tag, or a database made anew since), make
        it and its triggers first, in the same transaction (no probe on every write)."""
        try:
            rows: list[Any] = state.execute(statement, params).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            for create in tsql.CREATE_TAG_SCHEMA:
                state.execute(create)
            rows = state.execute(statement, params).fetchall()
        return rows

    def read_item(self, db_key: Any, raw: int) -> TaggedRow | None:
        """The live item's row (mode, filename, value or size, expire time, first tag, store
        time) and all its tags, read in one statement; None when there is none."""
        rows = self._read(tsql.SELECT_ITEM_TAGS.__getitem__, (db_key, raw, time.time()))
        if not rows:
            return None
        (_, mode, filename, db_value, db_expire, first, stored), *extras = rows
        tags = frozenset(([] if first is None else [first]) + [row[5] for row in extras])
        return mode, filename, db_value, db_expire, first, stored, tags

    def evict_extra(self, tag: Any, retry: bool) -> int:
        """Remove the items carrying `tag` (checked) as an extra tag, a batch per transaction
        (as `evict` removes those whose first tag it is); Timeout carries the count so far."""
        if not self.table():
            return 0
        count = 0
        while True:
            try:
                removed, _ = self.store.write(tsql.DELETE_EXTRA_BATCH, (tag, _BATCH), retry)
            except Timeout:
                raise Timeout(count) from None
            except DatabaseError as exc:  # gone since seen (see `_read`): nothing to remove
                if "no such table" not in str(exc):
                    raise
                self._table = False
                return count
            if removed <= 0:
                _reaper.drain()
                return count
            count += removed

    def evict_tags(self, tags: tuple[Any, ...], retry: bool) -> int:
        """Remove every item carrying any of `tags` (checked), in one transaction; how many.

        Up to TAGS_PER_STATEMENT tags (the usual case) take one statement of their own, its own
        transaction (no statement journal: see `_store.tags.delete_tagged`); more take one
        transaction of a statement per TAGS_PER_STATEMENT."""
        if not tags:
            return 0
        size = tsql.TAGS_PER_STATEMENT
        if len(tags) <= size:
            try:
                count, _ = self.store.write(tsql.delete_tagged(len(tags), True), tags, retry)
            except DatabaseError as exc:  # no tag table: no item has extra tags
                if "no such table" not in str(exc):
                    raise
                self._table = False
                count, _ = self.store.write(tsql.delete_tagged(len(tags), False), tags, retry)
        else:
            count = 0
            with self.store.transaction(retry) as state:
                extra = bool(state.execute(tsql.TAG_TABLE_EXISTS).fetchall())  # (under the lock)
                for start in range(0, len(tags), size):
                    chunk = tags[start:start + size]
                    count += state.execute(tsql.delete_tagged(len(chunk), extra), chunk).rowcount
        _reaper.drain()  # the caller sees the files gone, not just the rows
        return count

    def keys(self, tag: Any, reverse: bool) -> Iterator[Any]:
        """The keys carrying `tag` (checked, not None) as first or extra tag, in insertion
        order, a page per statement."""
        last = INT64_MAX if reverse else 0
        while True:
            rows = self._read(
                lambda table: tsql.TAGGED_KEYS_ANY[reverse] if table else _TAGGED_KEYS[reverse],
                (tag, last, _PAGE),
            )
            for _, db_key, raw in rows:
                yield self.disk.get(db_key, raw)
            if len(rows) < _PAGE:
                return
            last = rows[-1][0]


def _typed(tags: Iterable[Any]) -> set[tuple[type, Any]]:
    """Tags compared as SQLite stores them: 1 and 1.0 are one tag to SQLite but not the same
    stored value."""
    return {(type(tag), tag) for tag in tags}


def check_evict_tags(tags: Any) -> tuple[Any, ...]:
    """`evict_tags`'s argument: an iterable of tags (not one str or bytes), each checked."""
    if isinstance(tags, (str, bytes, bytearray, memoryview)) or not hasattr(tags, "__iter__"):
        raise TypeError(f"tags must be an iterable of tags, not {type(tags).__name__}")
    checked: dict[Any, None] = {}
    for tag in tags:
        if tag is None:
            raise TypeError("tags must not contain None")
        checked[check_tag(tag, "tags")] = None
    return tuple(checked)


class TagOperations:
    """Cache's tag methods (a base class of Cache, as KeyIteration is): `evict`, `evict_tags`,
    and ``get(tags=True)``, over the parts CacheBase composes."""

    _store: Store
    _disk: Disk
    _tags: ItemTags
    _evictor: Evictor
    _sized_files: bool

    def evict(self, tag: Any, retry: bool = False) -> int:
        """Remove every item carrying `tag` among its tags; return how many. A batch per transaction, as python-diskcache does (`evict_tags`: one)."""
        count = self._evictor.evict(tag, retry)
        try:
            return count + self._tags.evict_extra(check_tag(tag), retry)
        except Timeout as exc:
            raise Timeout(count + (exc.args[0] if exc.args else 0)) from None

    def evict_tags(self, tags: Iterable[Any], retry: bool = False) -> int:
        """Remove every item carrying any of `tags`, in one transaction; return how many."""
        checked = check_evict_tags(tags)
        return self._tags.evict_tags(checked, retry)

    def _get_tagged(
        self, key: Any, default: Any, read: bool, expire_time: bool, tag: bool, retry: bool,
        store_time: bool,
    ) -> tuple[Any, ...]:
        """get(tags=True): the item and its tags from one statement, past the memory tier (which
        keeps no tags); the other flags' values before the tags, in get's order."""
        db_key, raw = put_key(self._disk, key)
        found = None
        for _ in range(FILE_RACE_RETRIES):
            row = self._tags.read_item(db_key, raw)
            if row is None:
                break
            mode, filename, db_value, db_expire, db_tag, db_stored, item_tags = row
            if filename is not None and not self._sized_files:
                db_value = None  # the row's size: its own Disk gets NULL (as get's read path)
            try:
                value = self._disk.fetch(mode, filename, db_value, read)
            except FileNotFoundError:  # replaced by another writer since the SELECT
                continue
            found = (value, db_expire, db_tag, db_stored, item_tags)
            break
        now = time.time()
        if self._evictor.tracks_reads:
            self._evictor.note_read(db_key, raw, found is not None, now)
        if found is None:
            result = [default] + [None] * (expire_time + tag + store_time) + [frozenset()]
            return tuple(result)
        value, db_expire, db_tag, db_stored, item_tags = found
        result = [value]
        if expire_time:
            result.append(db_expire)
        if tag:
            result.append(db_tag)
        if store_time:
            result.append(self._evictor.store_time(db_key, raw, db_stored))
        result.append(item_tags)
        return tuple(result)
