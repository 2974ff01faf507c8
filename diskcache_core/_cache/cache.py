"""Cache: the facade — argument checks, result shapes, and the one read path and the one write
path through the parts that `CacheBase` composes (Store, MemoryTier, Evictor, Disk).

Hot-path shape (see ARCHITECTURE.md, Speed principles):
- a get is one constant SELECT on this thread's connection — never a write, whatever the
  eviction policy or statistics (those are batched by the Evictor's access log);
- set, add, delete, pop, touch and most incr calls are one autocommit statement;
- a get the memory tier answers is a dict lookup and one shared-word comparison, in the one
  function the tier builds for it (`MemoryTier.hit`, used by the remote tier as well).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from typing import Any, Callable, Iterator, TypeVar

from .._store import schema as sql
from .._arguments import (
    check_bindable, check_key, check_tag, check_tags, expire_at, put_key, shape, shape_stored,
)
from .awaitable import AsyncCacheMixin
from .base import CacheBase
from .._disk.disk import DELETE, ENOVAL, KEEP, MODE_RAW, Disk
from .._errors import Timeout
from .._eviction.evictor import STORE_TIME_BATCHED
from .getforms import typed_get
from .counters import AtomicChanges
from .iteration import KeyIteration
from .metrics import Observed
from .tags import TagOperations
from .._recipes.memo import typed_memoize
from .._recipes.memo import memoize as _memoize
from .._memory.tier import FILL, MISS
from .queue import GONE
from .remote import RemoteItems, facade_class
from .._store.rows import raise_decode_error, reads_as_miss
from .._store.store import MIN_WRITE_CHARGE

__all__ = ["Cache", "RemoteCache"]

_C = TypeVar("_C", bound="Cache")
_FILE_RACE_RETRIES = 10  # a value file replaced between our SELECT and open: read the row again
_REREAD: Any = object()  # (`Cache._decoded`: read the row again)
_MISSED: Any = object()  # (`Cache._decoded`: a miss)
_SELECT_VALUE, _SELECT_VALUE_EXPIRY, _SELECT_ITEM, _SELECT_ITEM_STORED = (
    sql.SELECT_VALUE, sql.SELECT_VALUE_EXPIRY, sql.SELECT_ITEM, sql.SELECT_ITEM_STORED
)


def _dropped_unreadable(cache: Cache, exc: Exception, row: tuple[Any, ...]) -> bool:
    """Under ``on_error='miss'``, for an entry `exc` says is unreadable: delete `row` (key,
    raw, mode, filename, value) if it is still the one read (not on a read-only cache, nor when
    the lock is busy: a later read tries again), and return True: the caller reads a miss."""
    if not reads_as_miss(cache._store, cache.disk, exc):
        return False
    if not cache.read_only:
        try:
            cache._store.write(sql.DELETE_UNREADABLE, row, False)
        except Timeout:
            pass
    return True


class Cache(CacheBase, KeyIteration, AtomicChanges, TagOperations, AsyncCacheMixin, Observed):
    """Disk and file backed cache: one SQLite database and the value files beside it.

    With ``remote="redis://..."``, Redis holds the items and this directory is a near cache of
    them: the object made is then a `RemoteCache`, still a Cache, whose item methods are the
    remote tier's (:doc:`remote`).
    """

    def __new__(
        cls: type[_C],
        directory: str | os.PathLike[str] | None = None,
        timeout: float = 60,
        disk: type[Disk] | None = None,
        **settings: Any,
    ) -> _C:
        """A `cls` object; with ``remote=``, one of its remote-backed class (chosen here, once:
        the local item methods never ask whether there is a remote)."""
        remote = settings.get("remote") is not None and not issubclass(cls, RemoteItems)
        return object.__new__(remote_class(cls) if remote else cls)

    KEEP = KEEP  # what an `update` function returns to leave the item as it is
    DELETE = DELETE  # ... to remove it

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        if state[3].get("remote") is not None:  # a pickle of an earlier version of the library
            self.__class__ = remote_class(type(self))
            self.__setstate__(state)
            return
        super().__setstate__(state)

    @typed_memoize
    def memoize(
        self, name: str | Callable[..., Any] | None = None, typed: bool = False,
        expire: float | None = None, tag: Any = None, ignore: Any = (), *, key: Any = None,
        should_cache: Any = None, tags: Any = None,
    ) -> Any:
        """Decorator: remember the function's results in this cache, keyed by its arguments.

        Works on functions, methods and ``async def`` functions, with or without parentheses
        (``@cache.memoize``: the default options); ``expire=0`` looks results up but never
        stores them. One implementation for every cache type:
        all options are described in :doc:`memoize`.
        """
        return _memoize(
            self, name, typed, expire, tag, ignore, key=key, should_cache=should_cache, tags=tags
        )

    # --- reads ----------------------------------------------------------------------------------

    # Cache.get is one function of ~115 lines on purpose: the read path below the memory tier
    # runs inline (each call a get makes costs ~0.1 us of a miss, measured); the memory tier's
    # hit path is the tier's (`MemoryTier.hit`), a decode that needs the Disk `_decoded`.
    @typed_get
    def get(
        self,
        key: Any,
        default: Any = None,
        read: bool = False,
        expire_time: bool = False,
        tag: bool = False,
        retry: bool = False,
        store_time: bool = False,
        *,
        tags: bool = False,
    ) -> Any:
        """Return the value for `key`, or `default` when it is missing or expired.

        :param read: return bytes values as a binary file object
        :param expire_time: also return the expire time, as a tuple
        :param tag: also return the tag, as a tuple
        :param retry: keep retrying a read the database keeps busy (else Timeout after the
            cache's timeout; reads wait for writers only during WAL recovery)
        :param store_time: also return the time the item was stored (last in the tuple, after
            the expire time and tag asked for; None for a missing key), as diskcache-community
            does. Under eviction policies other than least-recently-stored an overwrite keeps
            the first store time (:doc:`migrating`).
        :param tags: also return the item's tags as a frozenset, last in the tuple (an empty
            one for a missing key); read with the value in one statement (:doc:`tags`)
        """
        if tags:
            return self._get_tagged(key, default, read, expire_time, tag, retry, store_time)
        memory = self._memory
        if memory is None:
            refill = False  # whether to ask MemoryTier.begin_fill
        elif not (read or expire_time or tag or store_time):
            answering = memory.answering  # the tier's hit path (built by the tier)
            if answering is None:  # a sampling gap: MemoryTier.hit's skipping, inline (no call
                admission = memory.admission  # per skipped get; counted as a miss already)
                left = admission.skip - 1
                admission.skip = left
                if left <= 0:
                    memory.end_gap()
                refill = False
            else:
                found = answering(key, default)
                if found is MISS:  # (tested first: the commoner of the two, a key not seen lately)
                    refill = False
                elif found is FILL:
                    refill = noted = True  # (the hit path found the key seen lately)
                else:
                    return found
        else:
            refill = not read and memory.fills_unanswered()
            noted = False
        # The one read path below the memory tier: one SELECT of the columns the caller needs;
        # what it finds fills the tier when `MemoryTier.begin_fill` allowed that before it.
        db_key: Any
        if (type(key) is str or type(key) is bytes) and self._plain_keys:
            db_key, raw = key, 1  # raw as an int: a bool parameter costs sqlite3 ~0.4 us
        else:
            db_key, raw = self._disk.put(key)
            raw = 1 if raw else 0
        fill = memory.begin_fill(db_key, raw, noted) if refill else None  # type: ignore[union-attr]
        if store_time:
            statement = _SELECT_ITEM_STORED
        elif expire_time or tag:
            statement = _SELECT_ITEM
        else:
            statement = _SELECT_VALUE if fill is None else _SELECT_VALUE_EXPIRY
        db_expire = db_tag = None
        races = 0
        while True:
            now = time.time()
            params = (db_key, raw, now)
            try:
                try:
                    execute = self._local.read  # Store.read, inline: the hot path
                except AttributeError:
                    execute = self._store.reader(retry).read
                rows = execute(statement, params).fetchall()
            except sqlite3.Error as exc:
                rows = self._store.retry_read(exc, statement, params, retry)
            except (UnicodeEncodeError, OverflowError):  # SQLite cannot bind the key
                check_key(db_key)
                raise
            if not rows:
                break
            row = rows[0]
            if statement is _SELECT_VALUE:
                mode, filename, db_value = row
            elif statement is _SELECT_VALUE_EXPIRY:
                mode, filename, db_value, db_expire, lapsed = row
                if lapsed:  # an expired row (this statement selects those too)
                    break
            elif statement is _SELECT_ITEM:
                mode, filename, db_value, db_expire, db_tag = row
            else:
                mode, filename, db_value, db_expire, db_tag, db_stored = row
            if mode == MODE_RAW and self._plain_fetch and not read:
                value = db_value
            else:
                if filename is not None and not self._sized_files:
                    db_value = None  # the row's size (SELECT_VALUE): its own Disk gets NULL
                value = self._decoded(key, (db_key, raw, mode, filename, db_value), read, races)
                if value is _REREAD:  # its value file was replaced since the SELECT
                    races += 1
                    continue
                if value is _MISSED:
                    if memory is not None:  # nothing kept
                        memory.forget_key(db_key, raw)
                    fill = None
                    break
            if fill is not None:
                memory.finish_fill(  # type: ignore[union-attr]
                    fill, value, db_value, mode, filename is not None, db_expire, db_key, raw
                )
            self._store.reads.found += 1
            if self._evictor.tracks_reads:
                self._evictor.note_read(db_key, raw, True, now)
            if store_time:
                stored = self._evictor.store_time(db_key, raw, db_stored)
                return shape_stored(value, db_expire, db_tag, stored, expire_time, tag)
            if expire_time or tag:
                return shape(value, db_expire, db_tag, expire_time, tag)
            return value
        if type(db_key) is float:
            check_key(db_key)  # NaN: a key no write accepts
        if fill is not None:  # absence is kept only where no row is, not even an expired one
            known = statement is _SELECT_VALUE_EXPIRY and not rows
            memory.finish_fill_absent(fill, db_key, raw, known)  # type: ignore[union-attr]
        self._store.reads.missed += 1
        if self._evictor.tracks_reads:
            self._evictor.note_read(db_key, raw, False, now)
        if store_time:
            return shape_stored(default, None, None, None, expire_time, tag)
        if expire_time or tag:
            return shape(default, None, None, expire_time, tag)
        return default

    def _decoded(self, key: Any, row: tuple[Any, ...], read: bool, races: int) -> Any:
        """The value of `row` (key, raw, mode, filename, value) as the Disk decodes it; or
        _REREAD: its value file was replaced by another writer since the SELECT (read the row
        again); or _MISSED: it reads as a miss (replaced again and again, or unreadable under
        ``on_error='miss'``, and then dropped). Other decode failures raise, judged here only
        (a row is judged when its decode failed)."""
        _, _, mode, filename, db_value = row
        try:
            return self._disk.fetch(mode, filename, db_value, read)
        except FileNotFoundError:
            return _REREAD if races + 1 < _FILE_RACE_RETRIES else _MISSED
        except Exception as exc:
            if not _dropped_unreadable(self, exc, row):
                raise_decode_error(
                    exc, self._disk, mode, filename, db_value, None, key, self._store.pool.path
                )
            return _MISSED

    def __getitem__(self, key: Any) -> Any:
        """Return the value for `key`; KeyError when missing."""
        value = self.get(key, ENOVAL, retry=True)
        if value is ENOVAL:
            raise KeyError(key)
        return value

    def read(self, key: Any, retry: bool = False) -> Any:
        """Return the value for `key` as a binary file object; KeyError when missing."""
        handle = self.get(key, ENOVAL, read=True, retry=retry)
        if handle is ENOVAL:
            raise KeyError(key)
        return handle

    def __contains__(self, key: Any) -> bool:
        """True when `key` is present and not expired."""
        memory = self._memory
        if memory is not None:
            known = memory.contains(key)
            if known is not None:
                return known
        db_key, flag = self._disk.put(key)
        raw = 1 if flag else 0  # the int SQLite stores (see put_key)
        try:
            found = self._store.read(sql.SELECT_EXISTS, (db_key, raw, time.time()))
        except (UnicodeEncodeError, OverflowError):  # SQLite cannot bind the key
            check_key(db_key)
            raise
        if not found and type(db_key) is float:
            check_key(db_key)  # NaN: a key no write accepts
        return bool(found)

    # --- writes ---------------------------------------------------------------------------------

    def set(
        self,
        key: Any,
        value: Any,
        expire: float | None = None,
        read: bool = False,
        tag: Any = None,
        retry: bool = False,
        *,
        tags: Any = None,
    ) -> bool:
        """Store `value` under `key`; return True.

        :param expire: seconds until the item expires (None: never)
        :param read: `value` is a binary file object to stream into a value file
        :param tag: str/bytes/number to group items for `evict`
        :param tags: more tags (an iterable of them); the item's tags are ``{tag} | set(tags)``,
            replacing those it had (:doc:`tags`)
        """
        return self._store_item(sql.UPSERT, key, value, expire, read, tag, retry, tags)

    def __setitem__(self, key: Any, value: Any) -> None:
        """Store `value` under `key`, retrying on timeout."""
        self._store_item(sql.UPSERT, key, value, None, False, None, True)

    def add(
        self,
        key: Any,
        value: Any,
        expire: float | None = None,
        read: bool = False,
        tag: Any = None,
        retry: bool = False,
        *,
        tags: Any = None,
    ) -> bool:
        """Store `value` only if `key` is missing (or expired); atomic. True when stored.
        `tags` as in `set`."""
        return self._store_item(sql.ADD, key, value, expire, read, tag, retry, tags)

    def _store_item(
        self, statement: str, key: Any, value: Any, expire: Any, read: bool, tag: Any, retry: bool,
        tags: Any = None,
    ) -> bool:
        """set and add: check, serialize (a large value to a file first), write, keep in memory."""
        extras: tuple[Any, ...] = ()
        if tags is not None:  # (checked first: nothing is stored with a bad tag, invariant 6)
            tag, extras = check_tags(tag, tags)
        now = time.time()
        disk = self._disk
        if type(key) is str and self._plain_keys and key.isascii():
            db_key, raw = key, 1  # put_key's commonest answer, inline (nothing to check)
        else:
            db_key, raw = put_key(disk, key)  # checked before a value file is written for it
        expires = None if expire is None else expire_at(now, expire)
        if tag is not None and tags is None:
            tag = check_tag(tag)
        size, mode, filename, db_value = self._serialize(value, read, key)
        charge = size or (len(db_value) if type(db_value) in (bytes, str) else 0)
        if expires is None and tag is None and filename is None:
            statement = sql.PLAIN_VARIANT[statement]  # no None parameters (see there)
            params: tuple[Any, ...] = (db_key, raw, now, size, mode, db_value)
        else:
            params = (db_key, raw, now, expires, tag, size, mode, filename, db_value)
        store = self._store
        evictor = self._evictor
        if evictor.batches_store_time:  # least-recently-stored: the refresh below writes it
            statement = STORE_TIME_BATCHED[statement]
        # The policy's refresh (an overwrite's store time) is noted before the write, so that the
        # size check the write may run sees this item as the newest; undone if nothing is stored.
        refresh = evictor.tracks_writes
        before = evictor.note_write(db_key, raw, now) if refresh else None
        try:
            spared = evictor.spares(db_key, raw) if evictor.read_counts else None  # write context
            if extras:  # the row and its extra tags in one transaction (_cache.tags)
                count, published = self._tags.write(
                    statement, params, retry, filename,
                    charge if charge > MIN_WRITE_CHARGE else MIN_WRITE_CHARGE,
                    db_key, raw, extras, spared,
                )
            else:
                count, published = store.write(
                    statement, params, retry, filename,
                    charge if charge > MIN_WRITE_CHARGE else MIN_WRITE_CHARGE, spared,
                )
        except BaseException as exc:
            if refresh:
                evictor.undo_write(db_key, raw, before)
            if isinstance(exc, (UnicodeEncodeError, OverflowError)):  # SQLite cannot bind it
                if filename is not None:
                    store.forget_new_file(filename)
                check_bindable("value", db_value)  # a str value with lone surrogates
            raise
        if count != 1:  # add found a live item: nothing changed
            if refresh:
                evictor.undo_write(db_key, raw, before)
            if filename is not None:
                store.forget_new_file(filename)
            return False
        if refresh:
            evictor.wrote(db_key, raw, before, store.inserted())
        memory = self._memory
        if memory is not None:
            memory.after_write(
                db_key, raw, published, value, db_value, mode, filename is not None, expires
            )
        return True

    def touch(self, key: Any, expire: float | None = None, retry: bool = False) -> bool:
        """Set a new expiry for `key`; True when the item was present."""
        now = time.time()
        expires = None if expire is None else expire_at(now, expire)
        db_key, raw = put_key(self._disk, key)
        count, _ = self._store.write(sql.TOUCH, (expires, db_key, raw, now), retry)
        return count == 1

    def pop(
        self,
        key: Any,
        default: Any = None,
        expire_time: bool = False,
        tag: bool = False,
        retry: bool = False,
    ) -> Any:
        """Remove `key` and return its value, or `default` when missing; atomic.

        The value is read first and the row then deleted only if it is still the one read, so
        a value the Disk refuses (SafeDisk's UnsafePickleError) stays (with ``on_error='miss'``
        it goes, as a miss), and no lock is held while it is read. An expired item is removed
        and `default` returned.
        """
        db_key, raw = put_key(self._disk, key)
        while True:
            now = time.time()
            rows = self._store.read(sql.SELECT_FOR_POP, (db_key, raw))
            if not rows:
                return shape(default, None, None, expire_time, tag)
            rowid, db_expire, db_tag, mode, filename, db_value, size = rows[0]
            value = ENOVAL
            expiry = sql.expiry_of(db_expire)
            if expiry is None or expiry > now:
                try:
                    value = self._queues.fetch_row(rowid, key, mode, filename, db_value, size)
                except GONE:
                    pass  # a missing value file (or unreadable under on_error='miss'): a miss
            unchanged = (rowid, db_key, raw, db_expire, db_tag, mode, filename, db_value)
            count, published = self._store.write(sql.DELETE_UNCHANGED, unchanged, retry)
            if count:
                break
            # Another writer changed or removed the item after we read it: read it again.
        self._removed(db_key, raw, published)
        if value is ENOVAL:
            return shape(default, None, None, expire_time, tag)
        return shape(value, db_expire, db_tag, expire_time, tag)

    def delete(self, key: Any, retry: bool = False) -> bool:
        """Remove `key`; True when a live item was removed (expired ones go silently)."""
        if type(key) is str and self._plain_keys and key.isascii():
            db_key, raw = key, 1  # put_key's commonest answer, inline (nothing to check)
        else:
            db_key, raw = put_key(self._disk, key)
        count, published = self._store.write(sql.DELETE_ITEM, (db_key, raw, time.time()), retry)
        if count != 1:
            return False
        self._evictor.note_removed(db_key, raw)  # `_removed`, inline: every delete
        memory = self._memory
        if memory is not None:
            memory.after_delete(db_key, raw, published)
        return True

    def _removed(self, db_key: Any, raw: Any, published: dict[int, int] | None) -> None:
        """After a delete or pop committed: tell the tiers and the bookkeeping."""
        self._evictor.note_removed(db_key, raw)
        if self._memory is not None:
            self._memory.after_delete(db_key, raw, published)

    def __delitem__(self, key: Any, retry: bool = True) -> bool:
        """Remove `key`; KeyError when it is missing. Returns True, as python-diskcache's does."""
        if not self.delete(key, retry=retry):
            raise KeyError(key)
        return True

    @contextlib.contextmanager
    def transact(self, retry: bool = False) -> Iterator[None]:
        """Context manager: a write transaction; what runs inside is atomic.

        Other writers wait while it is open (keep it short); readers do not. Transactions nest
        and belong to the thread that opened them. Raises Timeout when the lock cannot be had
        within the cache's timeout and `retry` is False. Not with a remote (it cannot span
        hosts): RemoteUnsupportedError.
        """
        with self._store.transaction(retry):
            yield


class RemoteCache(RemoteItems, Cache):
    """A Cache whose items Redis holds: what ``Cache(directory, remote=URL)`` makes (see
    :doc:`remote`). Its item methods are the remote tier's (`RemoteItems`); the rest is Cache's."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Named in the pickle by the class asked for (Cache, or a subclass of it).
        return (_reopened, (facade_class(type(self)), self.__getstate__()))


_remote_classes: dict[type, type] = {Cache: RemoteCache}


def remote_class(kind: type) -> type:
    """The remote-backed class of `kind` (Cache or a subclass of it): `RemoteCache`, or, for a
    subclass, one deriving from both (the subclass's own overrides first, then the remote's)."""
    made = _remote_classes.get(kind)
    if made is None:
        made = type(kind.__name__, (kind, RemoteCache), {"__module__": kind.__module__})
        made.__qualname__ = f"{kind.__qualname__}[remote]"
        _remote_classes[kind] = made
    return made


def _reopened(kind: type, state: tuple[Any, ...]) -> Cache:
    """A pickled cache with a remote, opened anew as `kind`'s remote-backed class."""
    cache: Cache = object.__new__(remote_class(kind))
    cache.__setstate__(state)
    return cache
