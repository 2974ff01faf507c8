"""Exceptions and warnings of diskcache_core, in one small hierarchy.

    Exception
     └── DiskCacheError                  anything the library raises on its own account
          ├── Timeout                    a write could not take the database lock in time
          │    └── RemoteUnavailableError  the remote (Redis) could not be reached in time
          │         └── RemoteOutcomeUnknownError  a write was sent, no answer came: maybe applied
          ├── RemoteError                anything else the remote refused (authentication, ...)
          │    └── RemoteUnsupportedError an operation a cache with a remote cannot do
          ├── DatabaseError              SQLite failed for another reason (I/O, corrupt, ...)
          │    ├── DiskFullError          no space left on the device (also an OSError, ENOSPC)
          │    └── ReadOnlyError          a write to a read-only cache (also sqlite3.OperationalError)
          ├── UnsafeValueFileError       a value-file name that escapes the cache directory
          └── UnsafePickleError          SafeDisk refused to unpickle a type (also UnpicklingError)

    ValueError
     └── FloatOverflowError              a number too large for a float (also OverflowError)

    UserWarning
     ├── UnknownFileWarning              Cache.check: a file no row names
     ├── ReadOnlyCacheWarning            a read-only cache read by reopening it per statement
     ├── StoredSettingWarning            a stored setting not usable here: its default is used
     └── EmptyDirWarning                 Cache.check: an empty value directory

SQLite's exceptions are translated to these in exactly one place (`translate_sqlite_error`).
"""

from __future__ import annotations

import errno
import os
import pickle
import sqlite3
import threading

__all__ = [
    "DatabaseError",
    "DiskCacheError",
    "DiskFullError",
    "EmptyDirWarning",
    "FloatOverflowError",
    "ReadOnlyCacheWarning",
    "ReadOnlyError",
    "RemoteError",
    "RemoteOutcomeUnknownError",
    "RemoteUnavailableError",
    "RemoteUnsupportedError",
    "StoredSettingWarning",
    "Timeout",
    "UnknownFileWarning",
    "UnsafePickleError",
    "UnsafeValueFileError",
    "is_busy",
    "is_cannot_open",
    "is_readonly_rollback",
    "read_only_error",
    "storage_error",
    "translate_sqlite_error",
]


class DiskCacheError(Exception):
    """Base class of every error diskcache_core raises on its own account."""


class Timeout(DiskCacheError):
    """A write could not take the database lock within the cache's timeout.

    For bulk operations (``expire``, ``evict``, ``cull``, ``clear``) ``args[0]`` is the number of
    items removed before the timeout, as in python-diskcache.
    """


class RemoteUnavailableError(Timeout):
    """The remote (Redis) did not answer: refused, timed out, or down. A write that raises it
    (and not its subclass `RemoteOutcomeUnknownError`) was certainly not applied; a bulk
    removal's ``args[0]`` is the count removed before it, as for `Timeout`.

    A `Timeout`, so that FanoutCache reports a write to an unreachable remote as a give-up,
    the way it reports a busy shard.
    """


class RemoteOutcomeUnknownError(RemoteUnavailableError):
    """A write reached the remote (Redis), or may have, and no answer came in time (a timeout
    waiting for the reply, a connection dropped after sending): Redis may apply it later, or
    may not. Neither "done" nor "not done" would be true, so it is said. Raised by writes only
    (reads and a write that certainly never left raise `RemoteUnavailableError`); FanoutCache
    raises it too rather than give up. Read the item again once Redis answers to find out.

    A `RemoteUnavailableError` (and so a `Timeout`): code that handles an unreachable remote
    catches it too.
    """


class RemoteError(DiskCacheError):
    """The remote answered with an error: wrong password, a value this library did not write,
    or a command it refused."""


class RemoteUnsupportedError(RemoteError, NotImplementedError):
    """An operation a cache with a remote does not do across hosts (queues, ``transact``,
    iteration): raised rather than done on this host's copy alone."""


class DatabaseError(DiskCacheError):
    """SQLite failed for a reason other than lock contention (full disk, I/O error, ...)."""


class DiskFullError(DatabaseError, OSError):
    """The device holding the cache directory has no space left: nothing was stored.

    Also an ``OSError`` with ``errno`` ENOSPC, so code that handles a full disk by errno keeps
    working. Reads go on working; writes succeed again once space is freed.
    """


class ReadOnlyError(DatabaseError, sqlite3.OperationalError):
    """A write to a cache opened read-only (``read_only=True``, or a directory or database file
    this process cannot write): nothing was written.

    Also a ``sqlite3.OperationalError``, the error SQLite raises for a write to a read-only
    database, as diskcache-community's ``ReadOnlyError`` is: handlers of either keep working.
    """


def read_only_error(path: str | None, exc: sqlite3.Error | None = None) -> ReadOnlyError:
    """The one error every write to a read-only cache raises, whichever path found it (a check
    before the write, or SQLite's refusal): it names the database. SQLite's own words are kept
    only when they say more than "read-only" (an extended code: a moved file, a hot journal)."""
    where = f" {path!r}" if path else ""
    message = f"the cache database{where} is read-only: nothing can be written to it"
    extended = getattr(exc, "sqlite_errorcode", _SQLITE_READONLY)
    if exc is not None and extended != _SQLITE_READONLY:
        message += f" (SQLite: {exc})"
    return ReadOnlyError(message)


class UnsafeValueFileError(DiskCacheError):
    """A row names a value file outside the cache directory; it is neither read nor removed."""


class UnsafePickleError(DiskCacheError, pickle.UnpicklingError):
    """SafeDisk refused to unpickle a type that is not on its allow-list."""


class FloatOverflowError(ValueError, OverflowError):
    """A number too large for a float, given where one is needed (a timeout, an increment of a
    float, an average): a ValueError naming the argument, and the OverflowError that ``float()``
    (and python-diskcache, for these) raises."""


class UnknownFileWarning(UserWarning):
    """Cache.check found a file in the cache directory that no row names."""


class ReadOnlyCacheWarning(UserWarning):
    """A cache this process may only read, with no WAL index (``-shm``) it can use: each read
    opens the database afresh (slow, but never a frozen snapshot)."""


class StoredSettingWarning(UserWarning):
    """A setting stored in the database (by python-diskcache, say) means nothing here: the
    cache runs with the default instead, and the stored row is left as it is."""


class EmptyDirWarning(UserWarning):
    """Cache.check found an empty value directory."""


_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (the sqlite3 module names them from 3.11 on)


def is_busy(exc: sqlite3.Error) -> bool:
    """True when `exc` means another connection holds the lock (SQLITE_BUSY/LOCKED family)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _BUSY_CODES
    return "locked" in str(exc) or "busy" in str(exc)


def is_readonly_rollback(exc: sqlite3.Error) -> bool:
    """True for SQLITE_READONLY_ROLLBACK: a reader that may not write found a rollback journal
    it took for hot. A live writer's journal can look hot for a moment in SQLite's check (seen
    under load), so a read-only read waits for it as for a lock; one left by a writer that
    died mid-commit stays until a process that can write opens the cache."""
    return getattr(exc, "sqlite_errorcode", None) == _SQLITE_READONLY_ROLLBACK


_SQLITE_READONLY_ROLLBACK = 8 | (3 << 8)
_SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_FULL, _SQLITE_CANTOPEN = 8, 10, 13, 14
_NO_SPACE = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
_LOW_SPACE = 64 * 1024  # bytes: below this, an I/O failure is taken for a full disk
_ROOMY = 64 * 1024 * 1024  # bytes: with this free, SQLITE_FULL is not a full device


# An exception raised inside one of this library's SQL functions (a signal handler's
# KeyboardInterrupt or SystemExit, run there) reaches the caller as sqlite3's "user-defined
# function raised exception": the function keeps it here, for this thread, to be raised instead
# (where it got into the function's body: one raised as it began is lost).
_interrupted = threading.local()
_UDF_FAILED = "user-defined function raised exception"


def note_interrupt(exc: BaseException) -> None:
    """Keep `exc`, raised inside a SQL function of this thread's statement (see above)."""
    _interrupted.exc = exc


def translate_sqlite_error(exc: sqlite3.Error, path: str | None = None) -> DiskCacheError:
    """Map a SQLite exception to the library's own: contention is a Timeout, a full disk a
    DiskFullError, the rest DatabaseError.

    `path` is the database file: SQLite reports a full disk as SQLITE_FULL when a write finds no
    space, but as a bare "disk I/O error" when it cannot grow its WAL index (``-shm``); for those
    the free space of `path`'s device tells.
    """
    if isinstance(exc, DiskCacheError):  # ReadOnlyError: already the library's own
        return exc
    if isinstance(exc, sqlite3.OperationalError) and is_busy(exc):
        return Timeout(str(exc))
    if str(exc) == _UDF_FAILED:
        interrupted, _interrupted.exc = getattr(_interrupted, "exc", None), None
        if interrupted is not None:
            raise interrupted  # the statement did nothing: what stopped it goes on up
        # Raised as the function began (where Python runs signal handlers): SQLite dropped it.
        return DatabaseError(
            "SQLite: the statement was interrupted in one of this library's SQL functions (by a"
            " signal handler's exception, which SQLite does not pass on); it changed nothing"
        )
    code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
    if code == _SQLITE_CANTOPEN and path:
        failure = _open_failure(path)  # SQLite does not say why: no descriptor left, no inode
        if failure is not None:
            if failure.errno in _NO_SPACE:
                return storage_error(failure, repr(path))
            return DatabaseError(f"SQLite: {exc} ({failure.strerror})")
    if code == _SQLITE_READONLY:
        return read_only_error(path, exc)
    full = code == _SQLITE_FULL or "disk is full" in str(exc)
    if not full and code not in (_SQLITE_IOERR, _SQLITE_CANTOPEN):
        return DatabaseError(f"SQLite: {exc}")
    room = _free_space(path)
    # SQLite also says SQLITE_FULL for some damaged databases: with plenty of room on the
    # device it is more likely damage (or a quota), and is not reported as a full disk.
    if full and room is not None and room >= _ROOMY:
        return DatabaseError(
            f"SQLite: {exc}, yet the device has {room >> 20} MiB free: the database may be"
            " damaged (Cache.check tells), or a disk quota is reached"
        )
    if full or (room is not None and room < _LOW_SPACE):  # (an I/O error on a full device)
        where = f" for {path!r}" if path else ""
        return DiskFullError(errno.ENOSPC, f"no space left on the device{where} (SQLite: {exc})")
    return DatabaseError(f"SQLite: {exc}")


def storage_error(exc: OSError, what: str) -> DiskCacheError:
    """Map an OSError met while creating or writing `what` (words naming the file) to the
    library's own: a full disk is a DiskFullError, the rest DatabaseError."""
    if exc.errno in _NO_SPACE:
        return DiskFullError(exc.errno, f"no space left on the device for {what}: {exc.strerror}")
    return DatabaseError(f"cannot use {what}: {exc}")


def _open_failure(path: str) -> OSError | None:
    """Why a file beside `path` may not open now (SQLite's "unable to open database file" does
    not say): no descriptor left for this process, or no inode left on the device; else None."""
    try:
        os.close(os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
        info = os.statvfs(os.path.dirname(path) or ".") if hasattr(os, "statvfs") else None
    except OSError as exc:
        return None if exc.errno in (errno.ENOENT, errno.EACCES, errno.EPERM) else exc
    if info is not None and info.f_files and not info.f_favail:
        return OSError(errno.ENOSPC, "no inode left on the device")
    return None


def is_cannot_open(exc: sqlite3.Error) -> bool:
    """Whether SQLite could not open a file (the database, its WAL or WAL index)."""
    return ((getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF) == _SQLITE_CANTOPEN


def _free_space(path: str | None) -> int | None:
    """Bytes free on the device of `path`, None when that cannot be told."""
    if not path or not hasattr(os, "statvfs"):
        return None
    try:
        info = os.statvfs(os.path.dirname(path) or ".")
    except OSError:
        return None
    return info.f_bavail * info.f_frsize
