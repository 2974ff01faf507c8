"""CacheBase: a cache directory's parts, composed — opening, settings, administration.

`Cache` (the facade, _cache/cache.py) is this plus the item API. Here: the parts are made (see
ARCHITECTURE.md): the `Store` (the SQLite database: connections, statements, transactions, the
after-commit hook), the `MemoryTier` (this process's map of recent items and the protocol that
keeps it exact across processes), the `Evictor` (limits, culling, expiry, bookkeeping), the
`Queues`, and the `Disk` (serialization and value files); and the methods that only pass a
call on to one of them: settings, statistics, bulk removals, queues, check, close.
"""

from __future__ import annotations

import os
import os.path as op
import warnings
import weakref
from typing import Any, Callable, TypeVar

from .._store import checkpointer as _checkpointer
from .._store import reaper as _reaper
from .._store import schema as sql
from .._arguments import check_timeout, whole_number
from .check import check_cache
from .._store.connections import FetchedRows, PoolHooks
from .memorysettings import MemorySettings
from .serializer import Role, serializer
from .._disk.directories import open_cache_directory
from .._disk.default import disk_type
from .._disk.disk import ENOVAL, Disk
from .._eviction.access import AccessLog
from .._store.creation import TAG_INDEX_CREATE, TAG_INDEX_DROP
from .._eviction.evictor import Evictor
from .._eviction.sizecheck import SizeCheck
from .._store.handoff import lock_handoff
from .._memory.tier import MemoryTier
from .._store.opening import open_database
from .._policies import policy_of
from .._remote.stamps import REMOTE_FILE
from .._reprs import opened_as
from .queue import QueueMethods, Queues
from .tags import ItemTags
from .._settings import (
    CODE_ONLY_SETTINGS,
    SettingAttribute,
    check_compress_change,
    check_disk_option,
    extra_attributes,
    usable_stored_settings,
    validate_setting,
    validate_settings,
)
from .._store.store import Store

__all__ = ["CacheBase"]

_Self = TypeVar("_Self", bound="CacheBase")
# Seconds at least that a settings write (reset, stats switching statistics, _sql) waits for the
# write lock before Timeout: python-diskcache retries those for 60 s (a cache's own timeout, a
# FanoutCache shard's 10 ms, is for data writes, which may give up).
SETTINGS_WAIT = 60.0


class CacheBase(MemorySettings, QueueMethods):
    """A cache directory's parts and the calls that go straight to one of them."""

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        timeout: float = 60,
        disk: type[Disk] | None = None,
        *,
        _role: Role | None = None,
        **settings: Any,
    ) -> None:
        """Open (creating if needed) the cache in `directory`.

        :param directory: cache directory; a new temporary one when None
        :param timeout: seconds a write waits for the database lock before `Timeout`
        :param disk: Disk subclass for serialization; None: `default_disk()` (see `configure`)
        :param settings: any of DEFAULT_SETTINGS, stored in the database for later opens; and,
            for this object only, ``memory_size_limit`` (bytes) and ``memory_item_limit`` (items),
            the bounds of its memory tier (:doc:`memory`; 0 turns it off), and ``read_only``:
            when true, an existing cache is opened without writing a byte (no migration, no new
            file; every later read too) and writes raise `DatabaseError`
        :param _role: what the owner of this object fixes (a FanoutCache for its shards; see
            `Role`): private
        """
        disk = disk_type(disk)
        timeout = check_timeout(timeout)
        checked = validate_settings(settings)
        code_only = {name: checked.pop(name) for name in CODE_ONLY_SETTINGS if name in checked}
        read_only = bool(code_only.get("read_only"))
        self._directory = directory = open_cache_directory(directory, create=not read_only)
        if code_only.get("remote") is None and op.exists(op.join(directory, REMOTE_FILE)):
            raise ValueError(
                f"{directory!r} holds a near cache of a remote (Redis) cache: open it with the"
                " same remote= option (its copies are not items of a cache of its own)"
            )
        self._timeout = timeout
        self._code_only = code_only  # kept when the cache is pickled
        role = Role() if _role is None else _role
        hooks = PoolHooks(
            rebind=_rebinder(self),
            recreate=_recreator(self) if role.recreate else None,
            guard=role.guard,
        )
        opened = open_database(directory, timeout, disk, checked, code_only, hooks)
        self._settings = opened.settings
        self.__dict__.update(extra_attributes(opened.settings))  # sqlite_*/disk_* given by name
        self._counters = opened.counters
        # len(): one row read where the database keeps the count, else a count of the rows.
        self._len_statement = sql.STORED_COUNT if opened.counted else sql.COUNT
        self._disk = opened.disk
        # The lock handoff needs WAL (elsewhere readers meet the lock too: SQLite's wait waits).
        wal = str(opened.settings.sqlite_journal_mode).lower() == "wal"
        handoff = lock_handoff(opened.pool.words) if wal else None
        access = AccessLog(opened.settings.eviction_policy, opened.settings.statistics)
        sizing = SizeCheck(opened.settings, access)  # the Store's size budget
        self._store = Store(opened.pool, timeout, opened.disk, handoff, sizing)
        self._local = opened.pool.local  # this thread's connection, for the hot read path
        self._evictor = Evictor(self._store, opened.settings, sizing)
        # With the standard Disk.fetch a raw column value is the value: no call needed.
        self._plain_fetch = type(opened.disk).fetch is Disk.fetch
        # With the standard Disk.put, str and bytes keys are their own database key (raw).
        self._plain_keys = type(opened.disk).put is Disk.put
        self._native_numbers = self._plain_fetch and type(opened.disk).store is Disk.store
        # With the standard store and fetch, a value file must be as long as its row says.
        self._sized_files = self._native_numbers
        # Serializes what the write paths store; a shard's refuses an item over its size limit
        # (the one in force: a closure over the settings, not the cache, so no reference cycle).
        in_force = opened.settings
        self._serialize = serializer(
            self._store, opened.disk,
            (lambda: int(in_force.size_limit)) if role.within_size_limit else None,
        )
        self._queues = Queues(self._store, opened.disk, self._sized_files, self._serialize)
        self._tags = ItemTags(self._store, opened.disk)
        self._memory: MemoryTier | None = None
        self._open_tiers(code_only)

    def _open_tiers(self, code_only: dict[str, Any]) -> None:
        """The tiers above the store, once the parts are made: here the memory tier (a cache
        with a remote adds its remote tier first: `RemoteItems`)."""
        self._configure_memory()

    # --- settings -------------------------------------------------------------------------------

    tag_index = SettingAttribute[int]("tag_index")
    cull_limit = SettingAttribute[int]("cull_limit")
    exact_size_limit = SettingAttribute[int]("exact_size_limit")
    eviction_policy = SettingAttribute[str]("eviction_policy")
    statistics = SettingAttribute[int]("statistics")
    size_limit = SettingAttribute[int]("size_limit")
    sqlite_auto_vacuum = SettingAttribute[int]("sqlite_auto_vacuum")
    sqlite_cache_size = SettingAttribute[int]("sqlite_cache_size")
    sqlite_journal_mode = SettingAttribute[str]("sqlite_journal_mode")
    sqlite_mmap_size = SettingAttribute[int]("sqlite_mmap_size")
    sqlite_secure_delete = SettingAttribute[int]("sqlite_secure_delete")
    sqlite_synchronous = SettingAttribute[int]("sqlite_synchronous")
    disk_min_file_size = SettingAttribute[int]("disk_min_file_size")
    disk_pickle_protocol = SettingAttribute[int]("disk_pickle_protocol")
    disk_compress = SettingAttribute["str | None"]("disk_compress")
    disk_compress_level = SettingAttribute["int | None"]("disk_compress_level")
    disk_compress_threshold = SettingAttribute[int]("disk_compress_threshold")

    def _apply_setting(self, name: str, value: Any) -> Any:
        """Validate a setting and make this object use it (not stored; see `reset`)."""
        value = validate_setting(name, value)
        if name == "eviction_policy" or name == "statistics":
            if name == "eviction_policy":
                self._evictor.set_policy(value)
            else:
                self._evictor.set_statistics(value)
            if self._memory is not None:  # its hit path binds whether gets are noted
                self._memory.build_hit_path()
        elif name == "size_limit":
            self._evictor.set_size_limit(value)
        elif name == "exact_size_limit":
            self._evictor.set_exact(value)
        else:
            check_compress_change(self._settings, name, value)  # (a level the codec refuses)
            self._settings.changed(name, value)
            self.__dict__.update(extra_attributes(self._settings))
            if name.startswith("disk_"):
                setattr(self._disk, name[len("disk_"):], value)
        return value

    def reset(self, key: str, value: Any = ENOVAL, update: bool = True) -> Any:
        """Read (no `value`) or change (with `value`) a setting or counter in the Settings table.

        ``sqlite_*`` settings run their pragma; ``disk_*`` settings update the Disk attribute.
        """
        if value is ENOVAL:
            if key == "count":  # the count row, or a count where the database keeps none
                self._counters["count"] = len(self)
                return self._counters["count"]
            rows = self._store.read(sql.SELECT_SETTING, (sql.row_name(key),))
            if not rows:
                raise ValueError(f"no setting or counter named {key!r}")
            value = rows[0][0]
            if key in self._counters:
                self._counters[key] = value
            elif key != "schema_version":
                for name, usable in usable_stored_settings({key: value}).items():
                    self._apply_setting(name, usable)
            return value
        if key in self._counters:
            return self._reset_counter(key, value, update)
        if key in CODE_ONLY_SETTINGS:
            raise ValueError(f"{key!r} comes from code only and cannot be stored")
        value = validate_setting(key, value)
        if key.startswith("disk_"):
            options = self._settings.disk_options(self._code_only)
            check_disk_option(self._disk, self._directory, options, key, value)
        if update:
            with self._store.transaction(timeout=max(self._timeout, SETTINGS_WAIT)) as state:
                for statement, params in _setting_statements(key, value):
                    state.execute(statement, params)
        if key.startswith("sqlite_"):
            self._store.read(sql.set_pragma(key[len("sqlite_"):], value))
        self._apply_setting(key, value)
        return value

    def _reset_counter(self, key: str, value: Any, update: bool) -> int:
        """Store a counter's value, as python-diskcache's ``reset`` does (`check` recounts)."""
        number = whole_number(key, value, what="counter")
        if update:
            with self._store.transaction(timeout=max(self._timeout, SETTINGS_WAIT)) as state:
                state.execute(sql.STORE_SETTING, (sql.row_name(key), number))
        self._counters[key] = number
        return number

    # python-diskcache's counters as when opened or last ``reset(name)`` (stale by design).

    @property
    def count(self) -> int:
        """Items when opened or at the last ``reset('count')``; prefer ``len(cache)``."""
        count = self._counters["count"]
        if count is None:
            count = self._counters["count"] = len(self)
        return count

    @property
    def size(self) -> int:
        """Bytes in value files when opened or at the last ``reset('size')``."""
        return int(self._counters["size"] or 0)

    @property
    def hits(self) -> int:
        """Hits stored when opened or at the last ``reset('hits')``; prefer `stats`."""
        return int(self._counters["hits"] or 0)

    @property
    def misses(self) -> int:
        """Misses stored when opened or at the last ``reset('misses')``; prefer `stats`."""
        return int(self._counters["misses"] or 0)

    def create_tag_index(self) -> None:
        """Create the index that makes `evict(tag)` fast (better: ``Cache(tag_index=True)``)."""
        self.reset("tag_index", 1)

    def drop_tag_index(self) -> None:
        """Drop the tag index."""
        self.reset("tag_index", 0)

    # --- properties -----------------------------------------------------------------------------

    @property
    def directory(self) -> str:
        """Cache directory."""
        return self._directory

    @property
    def read_only(self) -> bool:
        """Opened read-only: asked, or its directory or database file is not writable here."""
        return self._store.pool.read_only

    @property
    def remote(self) -> str | None:
        """The URL of the remote (Redis) this cache fronts, or None (see :doc:`remote`)."""
        return None

    @property
    def timeout(self) -> float:
        """Seconds a write waits for the database lock before raising Timeout."""
        return self._timeout

    @property
    def disk(self) -> Disk:
        """Disk used for serialization."""
        return self._disk

    # --- removals and limits (see _eviction/evictor.py) -----------------------------------------

    def expire(self, now: float | None = None, retry: bool = False) -> int:
        """Remove items that expired before `now` (default: the current time); return how many."""
        return self._evictor.expire(now, retry)

    def clear(self, retry: bool = False) -> int:
        """Remove every item; return how many (with a remote: from Redis, under the prefix;
        this host's copies go too)."""
        try:
            return self._evictor.clear(retry)
        finally:
            # The triggers have invalidated every entry (in every process); free them here.
            if self._memory is not None:
                self._memory.clear()

    def cull(self, retry: bool = False) -> int:
        """Remove expired items, then evict by policy until the volume is within size_limit."""
        return self._evictor.cull(retry)

    def evict_items(self, count: int, retry: bool = False) -> int:
        """Remove up to `count` items in the eviction policy's order (store order under
        ``"none"``), expired or not; return how many. For an entry-count limit (Django's
        ``MAX_ENTRIES``) on top of ``size_limit``."""
        return self._evictor.evict_in_order(count, retry)

    def volume(self) -> int:
        """Estimated bytes on disk: database pages in use plus value files."""
        return self._evictor.volume()

    def flush_access_log(self, timeout: float | None = None) -> None:
        """Write this process's batched access times, counts and hit/miss statistics now.

        `timeout`: seconds to wait for the write lock instead of the cache's timeout.
        """
        self._evictor.flush_access_log(None if timeout is None else check_timeout(timeout))

    def stats(self, enable: bool = True, reset: bool = False) -> tuple[int, int]:
        """Return ``(hits, misses)``; turn statistics on or off; with `reset`, zero them (a
        read-only cache changes nothing and counts nothing: the stored counts)."""
        read_only = self._store.pool.read_only
        result = self._evictor.hits_misses(reset and not read_only)
        if int(bool(enable)) != self.statistics and not read_only:
            self.reset("statistics", int(bool(enable)))
        return result

    def check(self, fix: bool = False, retry: bool = False) -> list[warnings.WarningMessage]:
        """Check the database and value files agree; with `fix`, repair; return the warnings.

        Run it when no other process is writing value files: a file written but not yet
        committed by another writer would look unknown and, with `fix`, be removed.
        """
        return check_cache(self._store, self._disk, self._directory, fix, retry)

    def read_sql(self, statement: str, params: Any = ()) -> list[Any]:
        """Run one SQL statement that only reads, on this thread's connection, outside any
        transaction of its own (no write lock: a read-only cache takes it too); its rows.

        For tools reading the tables (the command line's listings): a statement that would
        write raises `ReadOnlyError` (the connection is ``query_only`` meanwhile).
        """
        store = self._store
        store.read("PRAGMA query_only = 1")
        try:
            return list(store.read(statement, params))
        finally:
            store.read("PRAGMA query_only = 0")

    def _sql(self, statement: str, params: Any = ()) -> FetchedRows:
        """Run one SQL statement on this thread's connection; its rows, fetched.

        python-diskcache's private ``_sql``, for code written against it. The statement runs in
        a transaction of its own (or joins this thread's), so a write commits whole and the
        memory tiers of every process see it, as they see the library's own writes.
        """
        with self._store.transaction(timeout=max(self._timeout, SETTINGS_WAIT)) as state:
            cursor = state.execute(statement, params)
            rows = cursor.fetchall()
        return FetchedRows(rows, cursor.rowcount)

    def __len__(self) -> int:
        """Count of items, expired items included (read from the count the schema's triggers
        keep; counted where a read-only database of an older schema keeps none). Not with a
        remote: RemoteUnsupportedError."""
        rows = self._store.read(self._len_statement)
        if rows and type(rows[0][0]) is int:
            return rows[0][0]
        return int(self._store.read(sql.COUNT)[0][0])  # a count row lost or damaged by hand

    # --- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Write batched bookkeeping, wait for released files to be removed, empty the memory
        tier, then close the connections this Cache opened that no thread is using: this
        thread's, finished threads', the library's idle workers'. Each reopens on next use.

        Another live thread's connection is closed by that thread's own close(); inside this
        thread's transaction, its connection closes when the transaction ends."""
        if self._memory is not None:  # a get after close() reads the database (made anew?)
            self._memory.clear()
        self._close_parts()

    def _close_parts(self) -> None:
        """close() below the tiers: bookkeeping written, files released, connections closed."""
        self._evictor.flush_finally()
        _reaper.drain()
        _checkpointer.forget(self._store)  # no round of the checkpoint thread left open on it
        self._store.pool.close_all()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __getstate__(self) -> tuple[Any, ...]:
        return (self._directory, self._timeout, type(self._disk), self._code_only)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        directory, timeout, disk, code_only = state
        self.__init__(directory, timeout, disk, **code_only)  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._directory!r}{opened_as(self.remote, self.read_only)})"


def _setting_statements(key: str, value: Any) -> list[tuple[str, Any]]:
    """The statements storing setting `key`, then those making (or dropping) the index it needs."""
    statements: list[tuple[str, Any]] = list(sql.store_setting(key, value))
    index = policy_of(value).create_index if key == "eviction_policy" else None
    if index is not None:
        statements.append((index, ()))
    elif key == "tag_index":
        statements.append((TAG_INDEX_CREATE if value else TAG_INDEX_DROP, ()))
    return statements


def _recreator(cache: CacheBase) -> Callable[[], None]:
    """What `cache`'s pool does when its database is missing as it opens a connection: the
    directory was removed while open (a deploy, a tmp cleaner). Make it and the database anew
    with the cache's settings, as a first open does, so that the cache goes on, empty, where
    other processes (which make it anew alike) find it."""
    owner = weakref.ref(cache)

    def recreate() -> None:
        live = owner()
        if live is None:
            return
        directory = open_cache_directory(live._directory)
        stored = {
            name: value
            for name, value in live._settings.values().items()
            if name not in CODE_ONLY_SETTINGS
        }
        opened = open_database(directory, live._timeout, type(live._disk), stored, live._code_only)
        opened.pool.close_all()

    return recreate


def _rebinder(cache: CacheBase) -> Callable[[memoryview], None]:
    """The pool's `rebind` hook: when it maps the version words anew, `cache`'s store and memory
    tier use those (held weakly: the pool belongs to the cache)."""
    owner = weakref.ref(cache)

    def rebind(words: memoryview) -> None:
        live = owner()
        store = getattr(live, "_store", None)  # (None while the database is being opened)
        if live is None or store is None:
            return
        store.rebind(words)
        live._rebind_memory(words)

    return rebind
