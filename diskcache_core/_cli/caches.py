"""The command line's access to cache directories: finding them, opening them, reading rows.

The tool never creates a cache: ``Cache(directory)`` makes missing directories and initialises
empty databases, so `find_shard_directories` checks, with a read-only SQLite connection, that a
cache is really there before anything opens it. Caches are opened with their stored settings
only (no setting is passed), so opening rewrites nothing.

Where the Cache API would read values it does not need (listing keys, counting, reading the
Settings table), the tool runs statements of its own (in `_schema`) through `rows`, the one
place it reaches into a Cache's private interface.
"""

from __future__ import annotations

import heapq
import os
import os.path as op
import sqlite3
import time
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from .._cache.cache import Cache
from .._cache.serializer import Role
from .._store.dbfile import in_wal_mode
from .._store.tags import TAG_TABLE_EXISTS
from .._disk.disk import ENOVAL, Disk
from .._errors import DatabaseError, DiskCacheError, is_busy
from .._disk.safedisk import SafeDisk
from .._settings import METADATA
from .._store.schema import (
    setting_name,
    DBNAME,
    database_uri,
)


# --- the command-line tool's statements ------------------------------------------------------
# The tool reads tables directly where the Cache API would read (or unpickle) values it does
# not need. Its listing pages through rows in rowid order (a shard's insertion order) and
# returns store_time, by which the rows of several FanoutCache shards are merged.

CLI_TABLE_NAMES = "SELECT name FROM sqlite_master WHERE type = 'table'"
CLI_LIST_KEYS = (
    "SELECT rowid, store_time, key, raw, expire_time, tag FROM Cache WHERE rowid > ?"
    " AND (? OR expire_time IS NULL OR expire_time > ?) ORDER BY rowid LIMIT ?"
)
CLI_LIST_TAGGED_KEYS = (
    "SELECT rowid, store_time, key, raw, expire_time, tag FROM Cache WHERE tag = ? AND rowid > ?"
    " AND (? OR expire_time IS NULL OR expire_time > ?) ORDER BY rowid LIMIT ?"
)
# keys --tag where some item has extra tags (the tag table, _store.tags): the items whose first
# or extra tag it is, a page of each side through its index, merged in rowid order.
CLI_LIST_ANY_TAGGED_KEYS = (
    "SELECT rowid, store_time, key, raw, expire_time, tag FROM Cache WHERE rowid IN ("
    "SELECT item FROM (SELECT rowid AS item FROM Cache WHERE tag = ?1 AND rowid > ?2"
    " AND (?3 OR expire_time IS NULL OR expire_time > ?4) ORDER BY rowid LIMIT ?5)"
    " UNION SELECT item FROM (SELECT t.item AS item FROM CacheTag AS t JOIN Cache AS c"
    " ON c.rowid = t.item WHERE t.tag = ?1 AND t.item > ?2"
    " AND (?3 OR c.expire_time IS NULL OR c.expire_time > ?4) ORDER BY t.item LIMIT ?5))"
    " ORDER BY rowid LIMIT ?5"
)
CLI_COUNT_EXPIRED = (
    "SELECT COUNT(*) FROM Cache WHERE expire_time IS NOT NULL AND expire_time < ?"
)
CLI_ALL_SETTINGS = "SELECT key, value FROM Settings"

__all__ = [
    "NOT_SETTINGS",
    "Listed",
    "NotACacheError",
    "Unreadable",
    "count_expired",
    "find_shard_directories",
    "list_items",
    "open_shards",
    "rows",
    "settings_of",
    "settings_of_all",
    "shard_prefixes",
]

_PAGE = 1000  # rows per query when listing keys
# Rows of the Settings table that are not settings: the cache's counters, the schema version,
# and the item count python-diskcache kept there.
NOT_SETTINGS = frozenset(METADATA) | {"count", "schema_version"}


class NotACacheError(Exception):
    """The directory does not hold a diskcache_core (or python-diskcache) cache."""


def rows(cache: Cache, statement: str, params: Sequence[Any] = ()) -> list[Any]:
    """Run a read-only statement on `cache`'s database; the rows it returned."""
    return cache.read_sql(statement, params)


# --- finding and opening ---------------------------------------------------------------------


def _is_cache_database(path: str) -> bool:
    """True when `path` is an SQLite database with a cache's tables; opened read-only."""
    if not op.isfile(path) or op.getsize(path) == 0:
        return False
    try:
        # A WAL database with no -shm (no writer has it open) is read as immutable: a
        # read-only connection would leave a -wal and -shm behind.
        immutable = not op.exists(path + "-shm") and in_wal_mode(path)
        mode = "mode=ro&immutable=1" if immutable else "mode=ro"
        con = sqlite3.connect(database_uri(path, mode), uri=True, timeout=10)
    except (sqlite3.Error, DiskCacheError):  # (a link or a FIFO is no cache database)
        return False
    try:
        names = {row[0] for row in con.execute(CLI_TABLE_NAMES)}
    except sqlite3.Error as exc:
        if is_busy(exc):  # a cache in a rollback-journal mode, written now: not "no cache"
            raise DatabaseError(f"{path!r} stayed locked by a writer: {exc}") from exc
        return False
    finally:
        con.close()
    return {"Settings", "Cache"} <= names


def find_shard_directories(directory: str) -> list[str]:
    """The directories of the cache shards in `directory`, without creating or changing anything.

    A Cache directory is its own single shard; a FanoutCache directory (ours or
    python-diskcache's) holds shards ``000``, ``001``, ... each with a ``cache.db``, and every
    command then works on all of them. Its named sub-collections (``cache/``, ``deque/``,
    ``index/``) are caches of their own: point the tool at them directly. Raises
    NotACacheError when `directory` holds no cache.
    """
    if not op.exists(directory):
        raise NotACacheError(f"{directory}: no such directory")
    if not op.isdir(directory):
        raise NotACacheError(f"{directory}: not a directory")
    database = op.join(directory, DBNAME)
    if op.exists(database):
        if not _is_cache_database(database):
            raise NotACacheError(f"{directory}: {DBNAME} is not a cache database")
        return [directory]
    shards = sorted(
        op.join(directory, name)
        for name in os.listdir(directory)
        if len(name) == 3 and name.isdigit() and op.exists(op.join(directory, name, DBNAME))
    )
    if not shards:
        raise NotACacheError(f"{directory}: not a cache directory (no {DBNAME}, no shards)")
    expected = [op.join(directory, f"{number:03d}") for number in range(len(shards))]
    if shards != expected:
        raise NotACacheError(
            f"{directory}: shard directories are not numbered 000 to {len(shards) - 1:03d}"
        )
    for shard in shards:
        if not _is_cache_database(op.join(shard, DBNAME)):
            raise NotACacheError(f"{shard}: {DBNAME} is not a cache database")
    return shards


def shard_prefixes(prefix: str, count: int) -> list[str]:
    """The remote prefix of each of `count` shards, as FanoutCache makes them (one shard, a
    Cache: the prefix itself)."""
    return [prefix] if count == 1 else [f"{prefix}{number}/" for number in range(count)]


def open_shards(
    directory: str,
    disk: type[Disk] = SafeDisk,
    timeout: float = 60,
    allowed_types: Sequence[type] = (),
    read_only: bool = False,
) -> list[Cache]:
    """Open every shard of the cache in `directory` with its stored settings; with `read_only`,
    without writing a byte (no migration, no new file: see ``Cache(read_only=True)``).

    `allowed_types` extend SafeDisk's allow-list (``disk_allowed_types``, which is never stored,
    so passing it rewrites nothing); they need `disk` to be SafeDisk or a subclass.
    """
    if allowed_types and not issubclass(disk, SafeDisk):
        raise ValueError(f"allowed types apply to SafeDisk only, not to {disk.__name__}")
    code_only: dict[str, Any] = {"read_only": True} if read_only else {}
    if allowed_types:
        code_only["disk_allowed_types"] = list(allowed_types)
    shards: list[Cache] = []
    try:
        for shard_directory in find_shard_directories(directory):
            # A directory removed while the command runs is an error here, not made anew.
            role = Role(recreate=False)
            shards.append(
                Cache(shard_directory, timeout=timeout, disk=disk, _role=role, **code_only)
            )
    except BaseException:
        for shard in shards:
            shard.close()
        raise
    return shards


# --- reading ---------------------------------------------------------------------------------


def settings_of(shard: Cache) -> tuple[dict[str, Any], dict[str, Any]]:
    """(settings, counters) as stored in the shard's Settings table, settings sorted by name."""
    stored = {setting_name(row): value for row, value in rows(shard, CLI_ALL_SETTINGS)}
    counters = {name: stored.pop(name) for name in list(stored) if name in NOT_SETTINGS}
    return dict(sorted(stored.items())), counters


def settings_of_all(shards: list[Cache]) -> dict[str, Any]:
    """The settings of a cache of `shards`: the first shard's, but ``size_limit`` is the total
    (each shard of a FanoutCache holds its share, as ``FanoutCache.size_limit`` is the sum)."""
    settings, _ = settings_of(shards[0])
    if len(shards) > 1 and "size_limit" in settings:
        settings["size_limit"] = sum(settings_of(shard)[0].get("size_limit", 0) for shard in shards)
    return settings


def count_expired(shard: Cache, now: float) -> int:
    """Items of `shard` that expired before `now` but are still stored."""
    count: int = rows(shard, CLI_COUNT_EXPIRED, (now,))[0][0]
    return count


class Unreadable:
    """Stands in for a key that could not be deserialized (e.g. refused by SafeDisk)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"<unreadable: {self.error}>"


class Listed(NamedTuple):
    """One listed item: its key (or Unreadable), expiry time and tag."""

    key: Any
    expire_time: float | None
    tag: Any


class _Row(NamedTuple):
    """A listed row, from the shard numbered `shard`, before its key is deserialized."""

    store_time: float
    shard: int
    rowid: int
    db_key: Any
    raw: bool
    expire_time: float | None
    tag: Any


def _shard_rows(shard: Cache, number: int, tag: Any, include_expired: bool) -> Iterator[_Row]:
    """The rows of one shard in rowid (insertion) order, a page of rows at a time. A row whose
    store time is not a number (damaged: `Cache.check` reports it) takes its predecessor's,
    so the merge keeps it in its place."""
    last = 0
    previous_time = 0.0
    tagged = CLI_LIST_TAGGED_KEYS
    if tag is not ENOVAL and tag is not None and rows(shard, TAG_TABLE_EXISTS):
        tagged = CLI_LIST_ANY_TAGGED_KEYS  # some item has extra tags
    while True:
        now = time.time()
        if tag is ENOVAL:
            page = rows(shard, CLI_LIST_KEYS, (last, include_expired, now, _PAGE))
        else:
            page = rows(shard, tagged, (tag, last, include_expired, now, _PAGE))
        if not page:
            return
        for rowid, store_time, db_key, raw, expire_time, item_tag in page:
            if type(store_time) is not float and type(store_time) is not int:
                store_time = previous_time
            previous_time = store_time
            yield _Row(store_time, number, rowid, db_key, raw, expire_time, item_tag)
        last = page[-1][0]


def _merge_key(row: _Row) -> tuple[float, int, int]:
    """Insertion order across shards: store time, then shard and rowid for ties."""
    return row.store_time, row.shard, row.rowid


def list_items(shards: Sequence[Cache], tag: Any, include_expired: bool) -> Iterator[Listed]:
    """The items of all `shards` in insertion order (only those tagged `tag` unless it is ENOVAL).

    Each shard's rows come in rowid order, its own insertion order. Several shards' rows are
    merged by store time (ties: shard, then rowid), which an insertion sets and, under the
    least-recently-stored policy, a later store refreshes. Lazy: a key is only deserialized
    when its item is taken, so a limited listing reads no more than it shows.
    """
    streams = [_shard_rows(shard, number, tag, include_expired) for number, shard in enumerate(shards)]
    for row in heapq.merge(*streams, key=_merge_key):
        try:
            key = shards[row.shard].disk.get(row.db_key, row.raw)
        except Exception as exc:  # noqa: BLE001 - refused or damaged pickles are shown, not fatal
            key = Unreadable(exc)
        yield Listed(key, row.expire_time, row.tag)
