"""Cache: one directory holding one SQLite database (WAL) that indexes every item, and value files.

Hot-path shape (see ARCHITECTURE.md, Speed principles):
- a get is one constant SELECT on this thread's connection — never a write, whatever the
  eviction policy or statistics (those are batched by `_access`);
- set, add, delete, pop, touch and most incr calls are one autocommit statement: the database
  takes the write lock when the statement starts, so no BEGIN/COMMIT round trips are needed;
- the bytes in value files are kept by a trigger; the size limit and expired items are checked
  once per `_check_every` bytes written, not on every write;
- value files a write replaced are removed by a background thread after it commits (`_reaper`);
- recently read and written items are answered from this process's memory tier (`_memory`),
  validated by a version word shared by every process: a hit is a dict lookup and one word read.
"""

from __future__ import annotations

import numbers
import os
import os.path as op
import sqlite3
import time
import warnings
from typing import Any, Iterator

from . import _reaper
from . import _schema as sql
from ._access import AccessLog, schedule_flush
from ._arguments import check_bindable, check_key, check_tag, check_timeout, expire_at, shape
from ._async import AsyncCacheMixin
from ._check import check_cache
from ._connections import NO_VALUE, ConnectionPool
from ._disk import ENOVAL, MODE_RAW, Disk, open_cache_directory
from ._errors import DatabaseError, DiskFullError, is_busy, storage_error, translate_sqlite_error
from ._eviction import EvictionMixin
from ._memory import (
    ABSENT,
    IMMUTABLE_TYPES,
    MemoryStats,
    MemoryTier,
    open_versions,
    pre_index,
)
from ._memo import MemoizeDecorator
from ._memo import memoize as _memoize
from ._ownership import PRIVATE, create_database_file, ownership_of
from ._queue import QueueMixin
from ._store import MIN_WRITE_CHARGE

__all__ = ["Cache"]

_now = time.time
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_PAGE = 100  # keys per query when iterating: no read transaction stays open between pages
_FILE_RACE_RETRIES = 10  # a value file replaced between our SELECT and open: read the row again
_SETUP_TIMEOUT = 60.0  # creating a database waits this long for other creators
_PERSISTENT_PRAGMAS = ("sqlite_auto_vacuum", "sqlite_journal_mode")


class Cache(QueueMixin, EvictionMixin, AsyncCacheMixin):
    """Disk and file backed cache: one SQLite database and the value files beside it."""

    # Settings (see DEFAULT_SETTINGS), stored in the database and kept as attributes.
    # statistics, eviction_policy and size_limit are properties (below): state derives from them.
    tag_index: int
    cull_limit: int
    sqlite_auto_vacuum: int
    sqlite_cache_size: int
    sqlite_journal_mode: str
    sqlite_mmap_size: int
    sqlite_synchronous: int
    disk_min_file_size: int
    disk_pickle_protocol: int
    disk_compress: str | None
    disk_compress_level: int | None
    disk_compress_threshold: int

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        timeout: float = 60,
        disk: type[Disk] = Disk,
        **settings: Any,
    ) -> None:
        """Open (creating if needed) the cache in `directory`.

        :param directory: cache directory; a new temporary one when None
        :param timeout: seconds a write waits for the database lock before `Timeout`
        :param disk: Disk subclass for serialization
        :param settings: any of DEFAULT_SETTINGS, stored in the database for later opens; and,
            for this object only, ``memory_size_limit`` (bytes) and ``memory_item_limit`` (items),
            the bounds of its memory tier (:doc:`memory`; 0 turns it off)
        """
        if not (isinstance(disk, type) and issubclass(disk, Disk)):
            raise TypeError(f"disk must be a subclass of diskcache_core.Disk, not {disk!r}")
        check_timeout(timeout)
        checked = sql.validate_settings(settings)
        code_only = {name: checked.pop(name) for name in sql.CODE_ONLY_SETTINGS if name in checked}

        directory = open_cache_directory(directory)
        self._directory = directory
        self._timeout = timeout
        self._code_only = code_only
        memory_limits = {**sql.MEMORY_DEFAULTS, **code_only}
        self._memory_size_limit = memory_limits["memory_size_limit"]
        self._memory_item_limit = memory_limits["memory_item_limit"]
        self._memory: MemoryTier | None = None
        self._words: memoryview | None = None
        self._ownership = PRIVATE  # modes and owner of the files created here (see _ownership)
        self._pool = ConnectionPool(op.join(directory, sql.DBNAME), timeout, self._configure)
        self._pool.read_only = not os.access(directory, os.W_OK)
        self._local = self._pool.local

        # Derived from settings by their property setters, which _open_database triggers.
        self._access = AccessLog("none", False)
        self._track_reads = self._track_writes = False
        self._unchecked = 0  # bytes written since the last size/expiry check
        self._check_every = 2**20
        self._open_database(checked, disk)
        self._words = self._pool.words
        self._configure_memory()

    # --- opening -----------------------------------------------------------------------------

    def _open_database(self, checked: dict[str, Any], disk: type[Disk]) -> None:
        pool = self._pool
        no_wal_index = False
        try:
            if not pool.read_only:
                create_database_file(pool.path, os.stat(self._directory))
            con = pool.connect(timeout=max(self._timeout, _SETUP_TIMEOUT))
        except OSError as exc:
            raise storage_error(exc, f"the cache database {pool.path!r}") from exc
        except sqlite3.Error as exc:
            raise translate_sqlite_error(exc, pool.path) from exc
        if pool.read_only:
            try:
                con.execute("SELECT 1 FROM sqlite_master").fetchall()
            except sqlite3.OperationalError:
                # No WAL index (-shm) exists, and none can be made here: no writer has the
                # database open, so its file is the whole truth now. Settings are read from it
                # as immutable; see _connections.ReadOnlyReader for later reads.
                con.close()
                no_wal_index = pool.immutable = True
                con = pool.connect()
                pool.immutable = False
        try:
            stored = self._read_settings(con)
            wanted = dict(sql.DEFAULT_SETTINGS)
            wanted.update(
                sql.validate_settings(
                    {
                        # python-diskcache's FanoutCache stores size_limit / shards, a float
                        name: int(value) if type(value) is float and value.is_integer() else value
                        for name, value in stored.items()
                        if name not in sql.METADATA
                        and name not in sql.PEER_ONLY_ROWS
                        and name != "schema_version"
                    }
                )
            )
            wanted.update(checked)
            for name, value in wanted.items():
                setattr(self, name, value)
            disk_options = {name[5:]: value for name, value in wanted.items() if name.startswith("disk_")}
            disk_options.update(
                (name[5:], value) for name, value in self._code_only.items() if name.startswith("disk_")
            )
            self._disk = disk(self._directory, **disk_options)  # checks its options before any write
            self._plain_fetch = type(self._disk).fetch is Disk.fetch
            self._native_numbers = self._plain_fetch and type(self._disk).store is Disk.store
            if self._pool.read_only:
                changed = sorted(n for n, v in checked.items() if stored.get(n, object()) != v)
                if changed or not stored:
                    raise DatabaseError(
                        f"cache directory {self._directory!r} is read-only: cannot"
                        + (f" change settings {changed}" if stored else " create a cache")
                    )
                if no_wal_index:
                    pool.warn_unindexed()
                pool.words = None  # other processes may write: the memory tier stays off
                return
            if not stored:
                self._set_pragma(con, "sqlite_auto_vacuum", wanted["sqlite_auto_vacuum"])
            self._set_pragma(con, "sqlite_journal_mode", wanted["sqlite_journal_mode"])
            self._retry_setup(lambda: sql.create_or_migrate(con, stored, wanted))
            # Only once the directory is known to hold a cache database.
            self._ownership = self._disk.ownership = ownership_of(pool.path)
            pool.words = open_versions(self._directory, self._ownership)
        except sqlite3.Error as exc:
            raise translate_sqlite_error(exc, pool.path) from exc
        finally:
            con.close()

    def _read_settings(self, con: sqlite3.Connection) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            try:
                return dict(con.execute("SELECT key, value FROM Settings").fetchall())
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return {}
                raise

        try:
            return self._retry_setup(read)
        except sqlite3.DatabaseError as exc:
            translated = translate_sqlite_error(exc, self._pool.path)
            if isinstance(translated, DiskFullError):
                raise translated from exc
            raise DatabaseError(
                f"{op.join(self._directory, sql.DBNAME)!r} is not a usable cache database: {exc}"
            ) from exc

    def _retry_setup(self, step: Any) -> Any:
        # Several processes may create the same cache at once; they take turns.
        deadline = time.monotonic() + max(self._timeout, _SETUP_TIMEOUT)
        while True:
            try:
                return step()
            except sqlite3.OperationalError as exc:
                if not is_busy(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.001)

    def _set_pragma(self, con: sqlite3.Connection, name: str, value: Any) -> None:
        """Set a persistent pragma only when it differs (a reopen must write nothing)."""
        pragma = name[len("sqlite_"):]
        (current,) = con.execute(f"PRAGMA {pragma}").fetchone()
        if str(current).lower() != str(value).lower():
            self._retry_setup(lambda: con.execute(f"PRAGMA {pragma} = {value}").fetchall())

    def _configure(self, con: sqlite3.Connection) -> None:
        """Per-connection pragmas, applied to every new connection."""
        for name, value in vars(self).items():
            if name.startswith("sqlite_") and name not in _PERSISTENT_PRAGMAS:
                con.execute(f"PRAGMA {name[len('sqlite_'):]} = {value}").fetchall()

    # --- settings with derived state --------------------------------------------------------
    # Assigning these attributes directly changes this Cache object's behaviour at once without
    # storing the value (as in python-diskcache); `reset` also stores it.

    @property
    def eviction_policy(self) -> str:
        """The eviction policy: which items go first when the cache is over its size limit."""
        return self._eviction_policy

    @eviction_policy.setter
    def eviction_policy(self, value: str) -> None:
        self._eviction_policy = sql.validate_settings({"eviction_policy": value})["eviction_policy"]
        self._access.set_policy(self._eviction_policy)
        self._track_reads = self._access.tracks_reads
        self._track_writes = self._access.tracks_writes

    @property
    def statistics(self) -> int:
        """1 when hits and misses are counted (see `stats`), else 0."""
        return self._statistics

    @statistics.setter
    def statistics(self, value: int) -> None:
        self._statistics = sql.validate_settings({"statistics": value})["statistics"]
        self._access.statistics = bool(self._statistics)
        self._track_reads = self._access.tracks_reads

    @property
    def size_limit(self) -> int:
        """Bytes the cache may use before it evicts (checked as writes go, see `_check_size`)."""
        return self._size_limit

    @size_limit.setter
    def size_limit(self, value: int) -> None:
        self._size_limit = sql.validate_settings({"size_limit": value})["size_limit"]
        # Check the limit every 1/128th of it (between 4 KiB and 1 MiB of writes): the cache
        # may overshoot it by that much per process, never more.
        self._check_every = min(max(self._size_limit // 128, 4096), 2**20)

    # --- the memory tier (per object and process; see _memory.py) --------------------------

    def _configure_memory(self) -> None:
        size_limit, item_limit = self._memory_size_limit, self._memory_item_limit
        if not size_limit or not item_limit or self._words is None:
            # Off (or impossible: read-only media that another process may still change).
            self._memory = None
        elif self._memory is None:
            plain_keys = type(self._disk).put is Disk.put
            self._memory = MemoryTier(self._words, size_limit, item_limit, plain_keys, self._disk.put)
        else:
            self._memory.set_limits(size_limit, item_limit)

    @property
    def memory_size_limit(self) -> int:
        """Bytes this object's memory tier may hold in this process (0: the tier is off).

        Assigning it takes effect at once (entries beyond it are dropped); it is never stored.
        """
        return self._memory_size_limit

    @memory_size_limit.setter
    def memory_size_limit(self, value: int) -> None:
        self._set_memory_limit("memory_size_limit", value)

    @property
    def memory_item_limit(self) -> int:
        """Items this object's memory tier may hold in this process (0: the tier is off)."""
        return self._memory_item_limit

    @memory_item_limit.setter
    def memory_item_limit(self, value: int) -> None:
        self._set_memory_limit("memory_item_limit", value)

    def _set_memory_limit(self, name: str, value: int) -> None:
        checked = sql.validate_settings({name: value})[name]
        setattr(self, "_" + name, checked)
        self._code_only[name] = checked  # kept when the cache is pickled
        self._configure_memory()

    def memory_stats(self, reset: bool = False) -> MemoryStats:
        """This process's memory tier of this cache: ``(hits, misses, items, size, size_limit,
        item_limit)``, a named tuple; with `reset`, zero the hit and miss counts afterwards.

        Memory hits also count as hits in `stats` (when statistics are on); `stats` keeps
        python-diskcache's ``(hits, misses)`` shape. All zeros while the tier is off.
        """
        memory = self._memory
        if memory is None:
            return MemoryStats(0, 0, 0, 0, 0, 0)
        return memory.stats(reset)

    # --- properties ----------------------------------------------------------------------------

    @property
    def directory(self) -> str:
        """Cache directory."""
        return self._directory

    @property
    def timeout(self) -> float:
        """Seconds a write waits for the database lock before raising Timeout."""
        return self._timeout

    @property
    def disk(self) -> Disk:
        """Disk used for serialization."""
        return self._disk

    def memoize(
        self,
        name: str | None = None,
        typed: bool = False,
        expire: float | None = None,
        tag: Any = None,
        ignore: Any = (),
        *,
        key: Any = None,
        should_cache: Any = None,
    ) -> MemoizeDecorator:
        """Decorator: remember the function's results in this cache, keyed by its arguments.

        Works on functions, methods and ``async def`` functions; ``expire=0`` looks results up
        but never stores them. One implementation for every cache type: all options are
        documented on ``diskcache_core._memo.memoize``.
        """
        return _memoize(self, name, typed, expire, tag, ignore, key=key, should_cache=should_cache)

    # --- reads -------------------------------------------------------------------------------

    def get(
        self,
        key: Any,
        default: Any = None,
        read: bool = False,
        expire_time: bool = False,
        tag: bool = False,
        retry: bool = False,
    ) -> Any:
        """Return the value for `key`, or `default` when it is missing or expired.

        :param read: return bytes values as a binary file object
        :param expire_time: also return the expire time, as a tuple
        :param tag: also return the tag, as a tuple
        """
        if expire_time or tag:
            return self._get_with_metadata(key, default, read, expire_time, tag)
        memory = self._memory
        if memory is not None and not read:
            kind = type(key)
            if (kind is str or kind is bytes) and memory.plain_keys:
                map_key = key
            else:
                map_key = memory.key_for(key)
            entry = memory.entries.get(map_key)
            if entry is not None:
                stored, fetch_mode, index, version, expires, db_key, raw, _ = entry
                if memory.words[index] == version and (expires is None or expires > _now()):
                    memory.hits += 1
                    try:
                        memory.entries.move_to_end(map_key)
                    except KeyError:  # evicted by another thread just now
                        pass
                    if self._track_reads and self._access.record(
                        db_key, raw, fetch_mode is not ABSENT, _now()
                    ):
                        schedule_flush(self)
                    if fetch_mode is None:
                        return stored
                    if fetch_mode is ABSENT:
                        return default
                    return self._disk.fetch(fetch_mode, None, stored, False)
            return self._get_through_memory(memory, key, map_key, entry, default)
        db_key, raw = self._disk.put(key)
        try:
            execute = self._local.execute
        except AttributeError:
            execute = self._pool.state().execute
        now = _now()
        try:
            row = execute(sql.SELECT_VALUE, (db_key, raw, now)).fetchone()
        except sqlite3.Error as exc:
            rows = self._retry_read(exc, sql.SELECT_VALUE, (db_key, raw, now))
            row = rows[0] if rows else None
        except (UnicodeEncodeError, OverflowError):  # SQLite cannot bind the key
            check_key(db_key)
            raise
        if row is None:
            if type(db_key) is float:
                check_key(db_key)  # NaN: a key no write accepts
            if self._track_reads and self._access.record(db_key, raw, False, now):
                schedule_flush(self)
            return default
        mode, filename, db_value = row
        if mode == MODE_RAW and self._plain_fetch and not read:
            value = db_value
        else:
            try:
                value = self._disk.fetch(mode, filename, db_value, read)
            except FileNotFoundError:
                # Replaced by another writer between our SELECT and open: read the row again.
                return self._get_with_metadata(key, default, read, False, False)
        if self._track_reads and self._access.record(db_key, raw, True, now):
            schedule_flush(self)
        return value

    def _get_through_memory(
        self, memory: MemoryTier, key: Any, map_key: Any, entry: Any, default: Any
    ) -> Any:
        """get's path when the memory tier missed: read SQLite, and keep what it says (the value,
        or that the key is absent) if the key's bucket was clean (``pre == post``) before the
        SELECT (see _memory.py)."""
        memory.misses += 1
        if map_key is key:  # a plain str or bytes key: its own database key
            db_key, raw = key, True
        else:
            db_key, raw = self._disk.put(key)
        # Admission: a key with an entry (invalid or expired) is refilled; any other is kept only
        # when it was looked up lately: a key read once is not worth the fill.
        keep = False
        if entry is not None:
            keep, index = True, entry[2]
        elif map_key is not None and memory.seen_lately(map_key):
            index = pre_index(db_key)
            keep = index is not None  # None: a key of a type the tier does not keep
        if keep:
            words = memory.words
            version = words[index]  # both words are read before the SELECT
            if words[index + 1] != version:
                keep = False  # a write is in progress, or its writer died: do not keep
        try:
            execute = self._local.execute
        except AttributeError:
            execute = self._pool.state().execute
        now = _now()
        params = (db_key, raw, now)
        try:
            row = execute(sql.SELECT_VALUE_EXPIRY, params).fetchone()
        except sqlite3.Error as exc:
            rows = self._retry_read(exc, sql.SELECT_VALUE_EXPIRY, params)
            row = rows[0] if rows else None
        except (UnicodeEncodeError, OverflowError):  # SQLite cannot bind the key
            check_key(db_key)
            raise
        if row is None:
            if type(db_key) is float:
                check_key(db_key)  # NaN: a key no write accepts
            if keep:
                memory.store(map_key, None, ABSENT, index, version, None, db_key, raw)
            elif entry is not None:
                memory.discard(map_key)
            if self._track_reads and self._access.record(db_key, raw, False, now):
                schedule_flush(self)
            return default
        mode, filename, db_value, expires = row
        if mode == MODE_RAW and self._plain_fetch:
            value = stored = db_value
            fetch_mode = None
        else:
            try:
                value = self._disk.fetch(mode, filename, db_value, False)
            except FileNotFoundError:
                # Replaced by another writer between our SELECT and open: read the row again.
                return self._get_with_metadata(key, default, False, False, False)
            if type(value) in IMMUTABLE_TYPES:
                stored, fetch_mode = value, None
            elif filename is None:
                stored, fetch_mode = db_value, mode  # decoded afresh on each hit
            else:
                keep = False  # a mutable value from a value file: not kept
        if keep:
            memory.store(map_key, stored, fetch_mode, index, version, expires, db_key, raw)
        elif entry is not None:
            memory.discard(map_key)
        if self._track_reads and self._access.record(db_key, raw, True, now):
            schedule_flush(self)
        return value

    def _get_with_metadata(
        self, key: Any, default: Any, read: bool, expire_time: bool, tag: bool
    ) -> Any:
        """get's general path: the expire_time/tag flags, and retries after a file race."""
        db_key, raw = self._disk.put(key)
        check_key(db_key)
        for _ in range(_FILE_RACE_RETRIES):
            now = _now()
            rows = self._read(sql.SELECT_ITEM, (db_key, raw, now))
            if not rows:
                break
            db_expire, db_tag, mode, filename, db_value = rows[0]
            try:
                value = self._disk.fetch(mode, filename, db_value, read)
            except FileNotFoundError:
                continue
            if self._track_reads and self._access.record(db_key, raw, True, now):
                schedule_flush(self)
            return shape(value, db_expire, db_tag, expire_time, tag)
        if self._track_reads and self._access.record(db_key, raw, False, 0.0):
            schedule_flush(self)
        return shape(default, None, None, expire_time, tag)

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
            kind = type(key)
            map_key = key if (kind is str or kind is bytes) and memory.plain_keys else memory.key_for(key)
            entry = memory.entries.get(map_key)
            if entry is not None:
                if memory.words[entry[2]] == entry[3] and (entry[4] is None or entry[4] > _now()):
                    memory.hits += 1
                    return entry[1] is not ABSENT
        db_key, raw = self._disk.put(key)
        try:
            found = self._read(sql.SELECT_EXISTS, (db_key, raw, _now()))
        except (UnicodeEncodeError, OverflowError):  # SQLite cannot bind the key
            check_key(db_key)
            raise
        if not found and type(db_key) is float:
            check_key(db_key)  # NaN: a key no write accepts
        return bool(found)

    # --- writes ------------------------------------------------------------------------------

    def set(
        self,
        key: Any,
        value: Any,
        expire: float | None = None,
        read: bool = False,
        tag: Any = None,
        retry: bool = False,
    ) -> bool:
        """Store `value` under `key`; return True.

        :param expire: seconds until the item expires (None: never)
        :param read: `value` is a binary file object to stream into a value file
        :param tag: str/bytes/number to group items for `evict`
        """
        params, charge = self._prepare(key, value, expire, read, tag)
        memory = self._memory
        try:
            if memory is None:
                self._write(sql.UPSERT, params, retry, params[7], charge)
            else:
                self._write_through(memory, sql.UPSERT, params, value, retry, charge)
        except (UnicodeEncodeError, OverflowError):  # SQLite cannot bind the value
            self._refuse_value(params)
            raise
        if self._track_writes and self._access.stored(params[0], params[1], params[2]):
            schedule_flush(self)
        return True

    def _refuse_value(self, params: tuple[Any, ...]) -> None:
        """SQLite could not bind a set/add's parameters (key and tag were checked before): drop
        a value file written for it, and raise ValueError naming the value if it is at fault."""
        if params[7] is not None:
            self._forget_new_file(params[7])
        check_bindable("value", params[8])  # a str value with lone surrogates

    def _write_through(
        self, memory: MemoryTier, statement: str, params: tuple[Any, ...], value: Any, retry: bool,
        charge: int,
    ) -> sqlite3.Cursor:
        """set/add with the memory tier on: write, then keep the value in this process's memory
        when that is provably the committed value (see _memory.py, write-through)."""
        db_key, raw = params[0], params[1]
        kind = type(db_key)
        if raw and (kind is str or kind is bytes) and memory.plain_keys:
            map_key = db_key
        else:
            map_key = memory.map_key(db_key, raw)
        cursor = self._write(statement, params, retry, params[7], charge)
        if cursor.rowcount != 1:
            return cursor  # add() found a live item: nothing changed
        state = self._local.state
        written = state.written
        if not written or state.depth or params[7] is not None or map_key is None:
            memory.discard(map_key)  # inside transact, or a value file: not kept
            return cursor
        entry = memory.entries.get(map_key)
        if entry is None and not memory.admits_write(map_key):
            return cursor  # no room, and not seen lately: not kept
        index = entry[2] if entry is not None else pre_index(db_key)  # saves hashing again
        if index is None:
            return cursor  # a key of a type the tier does not keep
        version = written.get(index)  # the nonce this statement's trigger stored in ``pre``
        if version is None or memory.words[index] != version:
            memory.discard(map_key)  # a later writer has started: its value may be newer
            return cursor
        mode = params[6]
        if mode == MODE_RAW and self._plain_fetch:
            stored, fetch_mode = params[8], None
        elif self._native_numbers and type(value) in IMMUTABLE_TYPES:
            stored, fetch_mode = value, None
        else:
            stored, fetch_mode = params[8], mode
        memory.store(map_key, stored, fetch_mode, index, version, params[3], db_key, raw)
        return cursor

    def _prepare(
        self, key: Any, value: Any, expire: Any, read: bool, tag: Any
    ) -> tuple[tuple[Any, ...], int]:
        """Check and serialize a write's arguments, before anything is stored.

        Returns the UPSERT/ADD parameters ``(db_key, raw, now, expire_time, tag, size, mode,
        filename, db_value)`` and the bytes the write counts towards the next size check.
        """
        now = _now()
        db_key, raw = self._disk.put(key)
        if type(db_key) is not str or not db_key.isascii():  # ASCII text: fine, and the usual key
            check_key(db_key)  # before a value file is written for it
        expires = None if expire is None else expire_at(now, expire)
        if tag is not None:
            check_tag(tag)
        size, mode, filename, db_value = self._disk.store(value, read, key=key)
        charge = size or (len(db_value) if type(db_value) in (bytes, str) else 0)
        params = (db_key, raw, now, expires, tag, size, mode, filename, db_value)
        return params, charge if charge > MIN_WRITE_CHARGE else MIN_WRITE_CHARGE

    def __setitem__(self, key: Any, value: Any) -> None:
        """Store `value` under `key`, retrying on timeout."""
        self.set(key, value, retry=True)

    def add(
        self,
        key: Any,
        value: Any,
        expire: float | None = None,
        read: bool = False,
        tag: Any = None,
        retry: bool = False,
    ) -> bool:
        """Store `value` only if `key` is missing (or expired); atomic. True when stored."""
        params, charge = self._prepare(key, value, expire, read, tag)
        filename = params[7]
        memory = self._memory
        try:
            if memory is None:
                cursor = self._write(sql.ADD, params, retry, filename, charge)
            else:
                cursor = self._write_through(memory, sql.ADD, params, value, retry, charge)
        except (UnicodeEncodeError, OverflowError):  # SQLite cannot bind the value
            self._refuse_value(params)
            raise
        if cursor.rowcount == 1:
            if self._track_writes and self._access.stored(params[0], params[1], params[2]):
                schedule_flush(self)
            return True
        if filename is not None:
            self._forget_new_file(filename)
        return False

    def _forget_new_file(self, filename: str) -> None:
        """A value file written for a row that was not stored after all."""
        state = self._state()
        if state.depth and filename in state.created:
            state.created.remove(filename)
        self._remove_file(filename)

    def touch(self, key: Any, expire: float | None = None, retry: bool = False) -> bool:
        """Set a new expiry for `key`; True when the item was present."""
        now = _now()
        db_key, raw = self._disk.put(key)
        if type(db_key) is not str or not db_key.isascii():
            check_key(db_key)
        expires = None if expire is None else expire_at(now, expire)
        return self._write(sql.TOUCH, (expires, db_key, raw, now), retry).rowcount == 1

    def incr(self, key: Any, delta: Any = 1, default: Any = 0, retry: bool = False) -> Any:
        """Add `delta` to the number stored at `key`, atomically; return the new value.

        A missing key starts from `default` (KeyError when `default` is None). Works like
        Python's ``+``: integers past 64 bits stay exact.
        """
        kind = type(delta)
        if kind is not int and kind is not float and not isinstance(delta, numbers.Number):
            raise TypeError(f"incr delta must be a number, not {kind.__name__}")
        if (
            default is not None
            and type(default) is not int
            and not isinstance(default, numbers.Number)
        ):
            raise TypeError(f"incr default must be a number or None, not {type(default).__name__}")
        # NaN would make the count NaN for good (and SQLite stores a NaN number as NULL).
        if kind is float and delta != delta:
            raise ValueError("incr delta must not be NaN")
        if type(default) is float and default != default:
            raise ValueError("incr default must not be NaN")
        db_key, raw = self._disk.put(key)
        if type(db_key) is not str or not db_key.isascii():
            check_key(db_key)
        if self._native_numbers and (
            kind is float or (kind is int and _INT64_MIN <= delta <= _INT64_MAX)
        ):
            now = _now()
            params: tuple[Any, ...]
            if default is None:
                start = None
                statement, params = sql.INCR_NATIVE, (delta, now, db_key, raw)
            else:
                start = default + delta
                if not (
                    (type(start) is float and start == start)  # inf + -inf is NaN: pickled
                    or (type(start) is int and _INT64_MIN <= start <= _INT64_MAX)
                ):
                    return self._incr_slow(key, db_key, raw, delta, default, retry)
                statement = sql.INCR_UPSERT
                params = (delta, now, db_key, raw, start)
            state = self._state()
            state.new_value = NO_VALUE
            if self._write(statement, params, retry, charge=MIN_WRITE_CHARGE).rowcount == 1:
                value = state.new_value
                if self._track_writes and self._access.stored(db_key, raw, now):
                    schedule_flush(self)
                return start if value is NO_VALUE else value
        return self._incr_slow(key, db_key, raw, delta, default, retry)

    def _incr_slow(self, key: Any, db_key: Any, raw: Any, delta: Any, default: Any, retry: bool) -> Any:
        # Any Disk, any number type: read, add in Python, write back, in one transaction.
        with self._transaction(retry) as state:
            now = _now()
            row = state.execute(sql.SELECT_FOR_UPDATE, (db_key, raw)).fetchone()
            if row is None or (row[1] is not None and row[1] <= now):
                if default is None:
                    raise KeyError(key)
                value = default + delta
                size, mode, filename, db_value = self._disk.store(value, False, key=key)
                if filename is not None:
                    state.created.append(filename)
                state.execute(sql.UPSERT, (db_key, raw, now, None, None, size, mode, filename, db_value))
                return value
            rowid, _, mode, filename, db_value = row
            current = self._disk.fetch(mode, filename, db_value, False)
            if not isinstance(current, numbers.Number):
                raise TypeError(
                    f"cannot increment the value of {key!r}: it is a {type(current).__name__},"
                    " not a number"
                )
            value = current + delta
            size, mode, new_file, db_value = self._disk.store(value, False, key=key)
            if new_file is not None:
                state.created.append(new_file)
            state.execute(sql.UPDATE_VALUE, (now, size, mode, new_file, db_value, rowid))
            return value

    def decr(self, key: Any, delta: Any = 1, default: Any = 0, retry: bool = False) -> Any:
        """Subtract `delta` from the number stored at `key`, atomically; see `incr`."""
        if type(delta) is not int and not isinstance(delta, numbers.Number):
            raise TypeError(f"decr delta must be a number, not {type(delta).__name__}")
        if type(delta) is float and delta != delta:
            raise ValueError("decr delta must not be NaN")
        return self.incr(key, -delta, default, retry)  # type: ignore[operator]

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
        a value the Disk refuses (SafeDisk's UnsafePickleError) stays, and no lock is held
        while it is read. An expired item is removed and `default` returned.
        """
        db_key, raw = self._disk.put(key)
        if type(db_key) is not str or not db_key.isascii():
            check_key(db_key)
        while True:
            now = _now()
            rows = self._read(sql.SELECT_FOR_POP, (db_key, raw))
            if not rows:
                return shape(default, None, None, expire_time, tag)
            rowid, db_expire, db_tag, mode, filename, db_value = rows[0]
            value = ENOVAL
            if db_expire is None or db_expire > now:
                try:
                    value = self._disk.fetch(mode, filename, db_value, False)
                except FileNotFoundError:
                    pass  # a missing value file: the item goes, as a miss
            unchanged = (rowid, db_key, raw, db_expire, db_tag, mode, filename, db_value)
            if self._write(sql.DELETE_UNCHANGED, unchanged, retry).rowcount:
                break
            # Another writer changed or removed the item after we read it: read it again.
        if self._access.column is not None:
            self._access.forget(db_key, raw)
        if self._memory is not None:
            self._memory.discard(self._memory.map_key(db_key, raw))
        if value is ENOVAL:
            return shape(default, None, None, expire_time, tag)
        return shape(value, db_expire, db_tag, expire_time, tag)

    def delete(self, key: Any, retry: bool = False) -> bool:
        """Remove `key`; True when a live item was removed (expired ones go silently)."""
        db_key, raw = self._disk.put(key)
        if type(db_key) is not str or not db_key.isascii():
            check_key(db_key)
        deleted = self._write(sql.DELETE_ITEM, (db_key, raw, _now()), retry).rowcount == 1
        if deleted:
            if self._access.column is not None:
                self._access.forget(db_key, raw)
            if self._memory is not None:
                self._deleted_through(self._memory, db_key, raw)
        return deleted

    def _deleted_through(self, memory: MemoryTier, db_key: Any, raw: Any) -> None:
        """After a delete committed: keep "absent" in memory if the key had an entry and no later
        writer has started (the same rule as a set's write-through)."""
        map_key = memory.map_key(db_key, raw)
        entry = memory.entries.get(map_key)
        if entry is None:
            return
        state = self._local.state
        written = state.written
        index = entry[2]
        version = written.get(index) if written and not state.depth else None
        if version is not None and memory.words[index] == version:
            memory.store(map_key, None, ABSENT, index, version, None, db_key, raw)
        else:
            memory.discard(map_key)

    def __delitem__(self, key: Any, retry: bool = True) -> None:
        """Remove `key`; KeyError when it is missing."""
        if not self.delete(key, retry=retry):
            raise KeyError(key)

    # --- bookkeeping -------------------------------------------------------------------------

    def flush_access_log(self, timeout: float | None = None) -> None:
        """Write this process's batched access times, counts and hit/miss statistics now.

        `timeout`: seconds to wait for the write lock instead of the cache's timeout (the
        background flusher waits briefly and retries on its next round).
        """
        if not self._access.has_pending():
            return
        with self._access.flushing:  # `stats` waits: the batch is counted nowhere meanwhile
            batch = self._access.take()
            state = self._state()
            if timeout is not None:  # SQLite's busy handler waits; for this call, not so long
                state.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            try:
                with self._transaction() as state:
                    self._access.write(state.con, batch)
            except Exception:
                self._access.give_back(batch)
                raise
            finally:
                if timeout is not None:
                    state.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")

    def stats(self, enable: bool = True, reset: bool = False) -> tuple[int, int]:
        """Return ``(hits, misses)``; turn statistics on or off; with `reset`, zero them."""
        with self._access.flushing:  # not while a batch is between memory and the database
            rows = dict(self._read("SELECT key, value FROM Settings WHERE key IN ('hits', 'misses')"))
            result = (rows["hits"] + self._access.hits, rows["misses"] + self._access.misses)
        if reset:
            pending, _, _ = self._access.take()
            with self._transaction() as state:
                self._access.write(state.con, (pending, 0, 0))
                state.execute("UPDATE Settings SET value = 0 WHERE key IN ('hits', 'misses')")
        if int(bool(enable)) != self.statistics:
            self.reset("statistics", int(bool(enable)))
        return result

    def reset(self, key: str, value: Any = ENOVAL, update: bool = True) -> Any:
        """Read (no `value`) or change (with `value`) a setting or counter in the Settings table.

        ``sqlite_*`` settings run their pragma; ``disk_*`` settings update the Disk attribute.
        """
        if value is ENOVAL:
            if key == "count":  # python-diskcache kept the count here; it is counted now
                return len(self)
            rows = self._read("SELECT value FROM Settings WHERE key = ?", (key,))
            if not rows:
                raise KeyError(f"no setting or counter named {key!r}")
            value = rows[0][0]
            setattr(self, key, value)
            return value
        if key in sql.CODE_ONLY_SETTINGS:
            raise ValueError(f"{key!r} comes from code only and cannot be stored")
        value = sql.validate_settings({key: value})[key]
        if update:
            self._write("INSERT OR REPLACE INTO Settings VALUES (?, ?)", (key, value), retry=True)
        if key.startswith("sqlite_"):
            self._read(f"PRAGMA {key[len('sqlite_'):]} = {value}")
        elif key.startswith("disk_"):
            setattr(self._disk, key[len("disk_"):], value)
        setattr(self, key, value)  # the properties above update what derives from it
        if key == "eviction_policy" and update:
            index = sql.EVICTION_POLICY[value]["init"]
            if index is not None:
                self._write(index, (), retry=True)
        elif key == "tag_index" and update:
            self._write(sql.TAG_INDEX_CREATE if value else sql.TAG_INDEX_DROP, (), retry=True)
        return value

    def create_tag_index(self) -> None:
        """Create the index that makes `evict(tag)` fast (better: ``Cache(tag_index=True)``)."""
        self.reset("tag_index", 1)

    def drop_tag_index(self) -> None:
        """Drop the tag index."""
        self.reset("tag_index", 0)

    def check(self, fix: bool = False, retry: bool = False) -> list[warnings.WarningMessage]:
        """Check the database and value files agree; with `fix`, repair; return the warnings.

        Run it when no other process is writing value files: a file written but not yet
        committed by another writer would look unknown and, with `fix`, be removed.
        """
        return check_cache(self, fix, retry)

    # --- iteration ---------------------------------------------------------------------------

    def iterkeys(self, reverse: bool = False) -> Iterator[Any]:
        """Iterate keys in database sort order (by type, then value), expired ones included."""
        first, following = sql.KEYS_DESC if reverse else sql.KEYS_ASC
        rows = self._read(first)
        while rows:
            for db_key, raw in rows:
                yield self._disk.get(db_key, raw)
            db_key, raw = rows[-1]
            rows = self._read(following, (db_key, raw, db_key, _PAGE))

    def _iter_rowid(self, ascending: bool) -> Iterator[Any]:
        ((max_rowid,),) = self._read("SELECT MAX(rowid) FROM Cache")
        if max_rowid is None:
            return
        low, high = 0, max_rowid + 1
        while True:
            rows = self._read(sql.ROWS_ASC if ascending else sql.ROWS_DESC, (low, high, _PAGE))
            if not rows:
                return
            for _, db_key, raw in rows:
                yield self._disk.get(db_key, raw)
            if ascending:
                low = rows[-1][0]
            else:
                high = rows[-1][0]

    def __iter__(self) -> Iterator[Any]:
        """Iterate keys in insertion order, expired items included."""
        return self._iter_rowid(ascending=True)

    def __reversed__(self) -> Iterator[Any]:
        """Iterate keys in reverse insertion order, expired items included."""
        return self._iter_rowid(ascending=False)

    def __len__(self) -> int:
        """Count of items, expired items included."""
        return self._read(sql.COUNT)[0][0]

    # --- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Write batched bookkeeping, wait for released files to be removed, then close the
        connections this Cache opened that no thread is using: this thread's, those of threads
        that have finished, and the library's own idle worker threads'. Each reopens on next use.

        Another live thread's connection is closed by that thread's own close() (closing it under
        a statement it may be running is not safe). The last close of a database in any process
        removes its WAL (``-wal``) and ``-shm``.
        """
        try:
            self.flush_access_log()
        except Exception:  # noqa: BLE001 - closing must not fail on a busy or read-only cache
            pass
        _reaper.drain()
        self._pool.close_all()

    def __enter__(self) -> "Cache":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __getstate__(self) -> tuple[Any, ...]:
        return (self._directory, self._timeout, type(self._disk), self._code_only)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        directory, timeout, disk, code_only = state
        self.__init__(directory, timeout, disk, **code_only)  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._directory!r})"
