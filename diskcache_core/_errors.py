"""Exceptions and warnings of diskcache_core, in one small hierarchy.

    Exception
     └── DiskCacheError                  anything the library raises on its own account
          ├── Timeout                    a write could not take the database lock in time
          ├── DatabaseError              SQLite failed for another reason (disk full, I/O, corrupt)
          ├── UnsafeValueFileError       a value-file name that escapes the cache directory
          └── UnsafePickleError          SafeDisk refused to unpickle a type (also UnpicklingError)

    UserWarning
     ├── UnknownFileWarning              Cache.check: a file no row names
     └── EmptyDirWarning                 Cache.check: an empty value directory

SQLite's exceptions are translated to these in exactly one place (`translate_sqlite_error`).
"""

from __future__ import annotations

import pickle
import sqlite3

__all__ = [
    "DatabaseError",
    "DiskCacheError",
    "EmptyDirWarning",
    "Timeout",
    "UnknownFileWarning",
    "UnsafePickleError",
    "UnsafeValueFileError",
    "is_busy",
    "translate_sqlite_error",
]


class DiskCacheError(Exception):
    """Base class of every error diskcache_core raises on its own account."""


class Timeout(DiskCacheError):
    """A write could not take the database lock within the cache's timeout.

    For bulk operations (``expire``, ``evict``, ``cull``, ``clear``) ``args[0]`` is the number of
    items removed before the timeout, as in python-diskcache.
    """


class DatabaseError(DiskCacheError):
    """SQLite failed for a reason other than lock contention (full disk, I/O error, ...)."""


class UnsafeValueFileError(DiskCacheError):
    """A row names a value file outside the cache directory; it is neither read nor removed."""


class UnsafePickleError(DiskCacheError, pickle.UnpicklingError):
    """SafeDisk refused to unpickle a type that is not on its allow-list."""


class UnknownFileWarning(UserWarning):
    """Cache.check found a file in the cache directory that no row names."""


class EmptyDirWarning(UserWarning):
    """Cache.check found an empty value directory."""


_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (the sqlite3 module names them from 3.11 on)


def is_busy(exc: sqlite3.Error) -> bool:
    """True when `exc` means another connection holds the lock (SQLITE_BUSY/LOCKED family)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _BUSY_CODES
    return "locked" in str(exc) or "busy" in str(exc)


def translate_sqlite_error(exc: sqlite3.Error) -> DiskCacheError:
    """Map a SQLite exception to the library's own: contention is a Timeout, the rest DatabaseError."""
    if isinstance(exc, sqlite3.OperationalError) and is_busy(exc):
        return Timeout(str(exc))
    return DatabaseError(f"SQLite: {exc}")
