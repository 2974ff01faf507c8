"""Opening a cache database: creating it, reading its settings, migrating its schema.

Opening an existing cache with unchanged settings writes nothing (invariant 6): the stored
settings and the schema's objects are read, and a write starts only when something differs;
persistent pragmas are set only when their value differs. Several processes may create the same
cache at once; they take turns (`_retry_setup`). Where the directory is not writable the
database is opened read-only, and the memory tier stays off (no version file is opened).
"""

from __future__ import annotations

import inspect
import os
import os.path as op
import sqlite3
import time
from typing import Any, Callable, NamedTuple, TypeVar

from . import schema as sql
from .creation import create_or_migrate
from .connections import ConnectionPool, PoolHooks
from .dbfile import in_wal_mode, refuse_special_file
from .._disk.disk import Disk
from .._errors import (
    DatabaseError, DiskFullError, ReadOnlyError, is_busy, is_cannot_open, storage_error,
    translate_sqlite_error,
)
from .._disk.ownership import PRIVATE, Ownership, create_database_file, ownership_of
from .._settings import METADATA, PEER_ONLY_ROWS, Settings, usable_stored_settings
from .versionfile import open_versions

__all__ = ["Opened", "open_database"]

_SETUP_TIMEOUT = 60.0  # creating a database waits this long for other creators
T = TypeVar("T")


class Opened(NamedTuple):
    """An open cache database, as the parts of a Cache use it."""

    pool: ConnectionPool  # its connections (``pool.words``: the version words, or None)
    settings: Settings  # the settings in force (stored ones, updated by the caller's)
    disk: Disk
    ownership: Ownership  # modes and owner of the files created in the directory
    # The counters as the database held them when opened (python-diskcache's stale attributes);
    # ``count`` is None where the database keeps none (then counted when first asked for).
    counters: dict[str, int | None]
    # The Settings row "count" is the item count (the schema's count triggers exist); when False
    # (a database of an older schema, or python-diskcache's, opened read-only), len() counts.
    counted: bool


def open_database(
    directory: str,
    timeout: float,
    disk_type: type[Disk],
    checked: dict[str, Any],
    code_only: dict[str, Any],
    hooks: PoolHooks = PoolHooks(),
) -> Opened:
    """Open (creating if needed) the database in `directory` with the validated settings
    `checked` (stored) and `code_only` (never stored); `hooks`: the pool's (see `PoolHooks`)."""
    # The Disk checks its options before a file is made: those given, the defaults for the rest
    # (with those stored, it is made again once they are read, below).
    given = Settings()
    given.update(checked)
    disk_type(directory, **given.disk_options(code_only))
    settings = Settings()

    def configure(con: sqlite3.Connection) -> None:  # every new connection's pragmas
        for name, value in settings.connection_pragmas().items():
            con.execute(sql.set_pragma(name, value)).fetchall()

    pool = ConnectionPool(op.join(directory, sql.DBNAME), timeout, configure, hooks)
    # Read-only when asked (nothing may change: not even a new -wal or -shm) or when it must be.
    pool.read_only = (
        bool(code_only.get("read_only"))
        or not os.access(directory, os.W_OK)
        or (op.exists(pool.path) and not os.access(pool.path, os.W_OK))
    )
    setup_timeout = max(timeout, _SETUP_TIMEOUT)
    # A WAL database with no WAL index (-shm): no writer has it open, so its file is the whole
    # truth now; it is read as immutable (a read-only connection would make a -wal and -shm it
    # cannot remove). A rollback-journal one is read with SQLite's locks. See
    # _connections.ReadOnlyReader for later reads.
    try:
        refuse_special_file(pool.path)
        no_wal_index = (
            pool.read_only and not op.exists(pool.path + "-shm") and in_wal_mode(pool.path)
        )
        if not pool.read_only:
            create_database_file(pool.path, os.stat(directory))
        elif not op.exists(pool.path):
            raise ReadOnlyError(f"no cache database in {directory!r} (opened read-only)")
        pool.immutable = no_wal_index
        con = pool.connect(timeout=setup_timeout)
        pool.immutable = False
    except OSError as exc:
        raise storage_error(exc, f"the cache database {pool.path!r}") from exc
    except sqlite3.Error as exc:
        raise translate_sqlite_error(exc, pool.path) from exc
    if pool.read_only and not no_wal_index:
        try:
            con.execute(sql.PROBE_SCHEMA).fetchall()
        except sqlite3.OperationalError:
            # The index could not be used (or made) here: read the file as immutable.
            con.close()
            no_wal_index = pool.immutable = True
            con = pool.connect()
            pool.immutable = False
    try:
        stored = _read_settings(con, pool.path, setup_timeout)
        settings.update(_usable(stored))
        # A stored row read as a usable value (a float size, a default for one that means
        # nothing here) counts as that value: reopening rewrites none of them.
        in_force = settings.values()
        stored = {name: in_force.get(name, value) for name, value in stored.items()}
        settings.update(checked)
        disk = disk_type(directory, **settings.disk_options(code_only))  # checks its options
        if pool.read_only:
            changed = sorted(n for n, v in checked.items() if stored.get(n, object()) != v)
            if changed or not stored:
                raise ReadOnlyError(
                    f"cache directory {directory!r} is read-only: cannot"
                    + (f" change settings {changed}" if stored else " create a cache")
                )
            if no_wal_index and not code_only.get("read_only"):
                pool.warn_unindexed()
            pool.words = None  # other processes may write: the memory tier stays off
            counted = stored.get("schema_version") == sql.SCHEMA_VERSION
            return Opened(pool, settings, disk, PRIVATE, _counters(stored), counted)
        wanted = settings.values()
        if not stored:
            # A page size takes effect only while the database is empty (in WAL mode, not even
            # then): set it first. Small writes cost about a frame of the WAL per page they change
            # (docs/design.rst, "What a write pays for against diskcache-rs").
            if wanted.get("sqlite_page_size") is not None:
                _set_pragma(con, "sqlite_page_size", wanted["sqlite_page_size"], setup_timeout)
            _set_pragma(con, "sqlite_auto_vacuum", wanted["sqlite_auto_vacuum"], setup_timeout)
        _set_pragma(con, "sqlite_journal_mode", wanted["sqlite_journal_mode"], setup_timeout)
        _retry_setup(lambda: create_or_migrate(con, stored, wanted), setup_timeout)
        level = wanted.get("disk_compress_level")
        if not stored and level is not None and _takes_compress_level(disk_type):
            # Also under python-diskcache's row name, which it passes to its Disk (JSONDisk's
            # level): its processes then encode keys as these do (see sql.store_setting).
            row = ("disk_compress_level", level)
            _retry_setup(lambda: con.execute(sql.STORE_SETTING, row).fetchall(), setup_timeout)
        # Only once the directory is known to hold a cache database.
        ownership = disk.ownership = ownership_of(pool.path)
        pool.words, pool.words_identity = open_versions(directory, ownership)
        return Opened(pool, settings, disk, ownership, _counters(stored), True)
    except sqlite3.Error as exc:
        raise translate_sqlite_error(exc, pool.path) from exc
    finally:
        con.close()


def _takes_compress_level(disk_type: type[Disk]) -> bool:
    """Whether `disk_type`'s own constructor takes ``compress_level`` (JSONDisk's, one written
    for python-diskcache), not this library's Disk's compression option, unknown there."""
    init = disk_type.__init__
    return init is not Disk.__init__ and "compress_level" in inspect.signature(init).parameters


def _counters(stored: dict[str, Any]) -> dict[str, int | None]:
    counters: dict[str, int | None] = {name: stored.get(name, 0) for name in METADATA}
    counters["count"] = stored.get("count", None if stored else 0)  # a new database: empty
    if stored and stored.get("schema_version") != sql.SCHEMA_VERSION:
        counters["count"] = None  # not kept by our triggers until now: counted when asked for
    return counters


def _usable(stored: dict[str, Any]) -> dict[str, Any]:
    """The settings among a database's Settings rows (not counters, not a peer's rows)."""
    return usable_stored_settings(
        {
            name: value
            for name, value in stored.items()
            if name not in METADATA and name not in PEER_ONLY_ROWS and name != "schema_version"
        }
    )


def _read_settings(con: sqlite3.Connection, path: str, setup_timeout: float) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        try:
            rows = con.execute(sql.SELECT_SETTINGS).fetchall()
            # A row python-diskcache wrote under a setting's own name (see sql.store_setting)
            # wins over ours: it is what python-diskcache's processes read.
            named = [(row, sql.setting_name(row), value) for row, value in rows]
            ours = {setting: value for row, setting, value in named if row != setting}
            return {**ours, **{row: value for row, setting, value in named if row == setting}}
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return {}
            raise

    try:
        return _retry_setup(read, setup_timeout)
    except sqlite3.DatabaseError as exc:
        translated = translate_sqlite_error(exc, path)
        if isinstance(translated, DiskFullError) or is_cannot_open(exc):
            raise translated from exc  # (not a damaged database: a file could not be opened)
        raise DatabaseError(f"{path!r} is not a usable cache database: {exc}") from exc


def _retry_setup(step: Callable[[], T], setup_timeout: float) -> T:
    # Several processes may create the same cache at once; they take turns.
    deadline = time.monotonic() + setup_timeout
    while True:
        try:
            return step()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.001)


def _set_pragma(con: sqlite3.Connection, name: str, value: Any, setup_timeout: float) -> None:
    """Set a persistent pragma only when it differs (a reopen must write nothing)."""
    pragma = name[len("sqlite_"):]
    (current,) = con.execute(sql.read_pragma(pragma)).fetchone()
    if str(current).lower() != str(value).lower():
        _retry_setup(lambda: con.execute(sql.set_pragma(pragma, value)).fetchall(), setup_timeout)
