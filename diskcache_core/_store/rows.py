"""What a row of the Cache table must hold: the rules that tell a damaged row (a hand edit,
another program's write, a bit flip SQLite's own check does not see) from a stored item.

Two users. `Cache.check` runs each row that may be damaged (`SELECT_SUSPECTS`) through
`row_damage` and reports (with ``fix``, drops) those that break a rule. A read runs a row
through `value_damage` only after decoding its value failed, so the rules cost a get nothing,
and then raises `DatabaseError` naming the row instead of the bare TypeError the damage caused.

The value columns (mode, filename, value) are judged by the library's own Disk rules only for
a Disk whose ``fetch`` is the library's: a custom Disk may give modes meanings of its own.
"""

from __future__ import annotations

import logging
import os.path as op
import weakref
from typing import TYPE_CHECKING, Any, NoReturn

from .._disk.codecs import CODEC_NAMES_BY_ID
from .._disk.disk import MODE_BINARY, MODE_PICKLE, MODE_RAW, MODE_TEXT, Disk, JSONDisk, is_value_mode
from .._errors import DatabaseError, DiskCacheError, UnsafePickleError
from .._log import DISK as _LOG

if TYPE_CHECKING:
    from .store import Store

__all__ = [
    "SELECT_SUSPECTS",
    "describe_row",
    "judges_modes",
    "raise_decode_error",
    "reads_as_miss",
    "row_damage",
    "value_damage",
]

# check's scan: the columns the rules read (the value only by its type: no blob is copied), of
# the rows that may break one. The WHERE clause is a cheap superset of `row_damage`, which
# decides: a sound cache's rows never reach Python (a scan of them all would cost check 3x).
_CODEC_IDS = ", ".join(str(codec_id) for codec_id in (0, *sorted(CODEC_NAMES_BY_ID)))
SELECT_SUSPECTS = (
    "SELECT rowid, key, raw, store_time, expire_time, size, mode, filename, typeof(value)"
    " FROM Cache WHERE key IS NULL OR typeof(raw) != 'integer' OR raw NOT IN (0, 1)"
    " OR typeof(store_time) NOT IN ('integer', 'real')"
    " OR typeof(expire_time) NOT IN ('null', 'integer', 'real')"
    " OR typeof(size) != 'integer' OR size < 0 OR typeof(filename) NOT IN ('null', 'text')"
    f" OR typeof(mode) != 'integer' OR (mode != {MODE_RAW} AND ("
    f"mode & 15 NOT IN ({MODE_BINARY}, {MODE_TEXT}, {MODE_PICKLE})"
    f" OR mode >> 4 NOT IN ({_CODEC_IDS}) OR (filename IS NULL AND typeof(value) != 'blob')))"
)
# SQLite's typeof() names, as the Python types a read gives.
_SQL_TYPES: dict[str, type] = {
    "null": type(None),
    "integer": int,
    "real": float,
    "text": str,
    "blob": bytes,
}
_LIBRARY_FETCHES = frozenset({Disk.fetch, JSONDisk.fetch})
_SHOWN = 60  # characters of a key's repr a message shows


def judges_modes(disk: Disk) -> bool:
    """True when `disk` decodes values with the library's own ``fetch`` (Disk, JSONDisk,
    SafeDisk): then its modes must be the library's."""
    return getattr(type(disk), "fetch", None) in _LIBRARY_FETCHES


def value_damage(mode: Any, filename: Any, value_type: type, library_modes: bool) -> str | None:
    """What is wrong with a row's value columns (`value_type`: the type of its value column),
    or None. The filename rule holds for every Disk (the cache handles the files); the mode
    rules with `library_modes` (see `judges_modes`)."""
    if filename is not None and type(filename) is not str:
        return f"its filename is {_kind(type(filename))}, not text"
    if not library_modes or (type(mode) is int and mode == MODE_RAW):
        return None
    if type(mode) is not int:
        return f"its mode {_column(mode)} is {_kind(type(mode))}, not a number"
    if not is_value_mode(mode):
        return f"its mode {mode} is no value mode"
    if filename is None and value_type is not bytes:
        return (
            f"its mode {mode} keeps the value in a value file or as bytes, but the row names"
            f" no file and holds {_kind(value_type)}"
        )
    return None


def row_damage(row: tuple[Any, ...], library_modes: bool) -> str | None:
    """What is wrong with `row` (the columns of `SELECT_SUSPECTS`), or None for a sound row."""
    _, key, raw, store_time, expire_time, size, mode, filename, value_sql_type = row
    if key is None:
        return "its key is NULL"
    if type(raw) is not int or raw not in (0, 1):
        return f"its raw flag {_column(raw)} is not 0 or 1"
    if type(store_time) is not float and type(store_time) is not int:
        return f"its store_time {_column(store_time)} is not a number"
    if expire_time is not None and type(expire_time) is not float and type(expire_time) is not int:
        return f"its expire_time {_column(expire_time)} is not a number or NULL"
    if type(size) is not int or size < 0:
        return f"its size {_column(size)} is not a byte count"
    return value_damage(mode, filename, _SQL_TYPES.get(value_sql_type, object), library_modes)


def describe_row(rowid: int | None, key: Any) -> str:
    """A row as messages name it: by its rowid where known, and its key."""
    if rowid is None:
        return f"the row of key {_short(key)}"
    return f"row {rowid} (key {_short(key)})"


def raise_decode_error(
    exc: Exception, disk: Disk, mode: Any, filename: Any, value: Any, rowid: int | None,
    key: Any, database: str,
) -> NoReturn:
    """After decoding a row's value raised `exc`: raise DatabaseError naming the row (of
    `database`, the database file's path) when its value columns are damaged, else `exc`."""
    reason = value_damage(mode, filename, type(value), judges_modes(disk))
    if reason is None:
        raise exc
    raise DatabaseError(
        f"{describe_row(rowid, key)} in {database} is damaged: {reason} (Cache.check reports"
        " it; check(fix=True) removes the row)"
    ) from exc


def _unreadable(exc: Exception) -> bool:
    """Whether `exc`, raised by a Disk's fetch, says the entry cannot be read back (what
    ``on_error='miss'`` reads as a miss): not a file system, memory or library error, but for
    SafeDisk's refusal."""
    if isinstance(exc, UnsafePickleError):
        return True
    return not isinstance(exc, (OSError, MemoryError, RecursionError, DiskCacheError))


_logged_unreadable: weakref.WeakSet[Store] = weakref.WeakSet()


def reads_as_miss(store: Store, disk: Disk, exc: Exception) -> bool:
    """Whether the entry whose decode raised `exc` is read as missing: when `disk` was made
    with ``on_error='miss'`` and `exc` says the entry is unreadable. Logged: the first of each
    cache (its `store`) as a warning, later ones at debug level. The caller removes the entry
    (if it is still the one read) as it does one whose value file is lost."""
    if disk.on_error != "miss" or not _unreadable(exc):
        return False
    first = store not in _logged_unreadable
    _logged_unreadable.add(store)
    _LOG.log(
        logging.WARNING if first else logging.DEBUG,
        "treating an unreadable entry in %r as missing: %s: %s",
        op.dirname(store.pool.path), type(exc).__name__, exc,
    )
    return True


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _column(value: Any) -> str:
    return "NULL" if value is None else _short(value)


def _kind(kind: type) -> str:
    return "NULL" if kind is type(None) else f"a {kind.__name__}"
