"""A cache's keys a page at a time, in the database's sort order or in insertion (rowid) order.

Each page is a read of its own, so no read transaction (and no snapshot of the WAL) stays open
between pages however slowly the caller iterates; a page starts after the last key of the one
before, so writes meanwhile neither repeat nor skip the keys that stay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from . import _schema as sql

if TYPE_CHECKING:
    from ._disk import Disk
    from ._store import Store

__all__ = ["keys_by_rowid", "keys_sorted"]

PAGE = 100  # keys per query


def keys_sorted(store: "Store", disk: "Disk", reverse: bool) -> Iterator[Any]:
    """Keys in database sort order (by type, then value), expired ones included."""
    first, following = sql.KEYS_DESC if reverse else sql.KEYS_ASC
    rows = store.read(first)
    while rows:
        for db_key, raw in rows:
            yield disk.get(db_key, raw)
        db_key, raw = rows[-1]
        rows = store.read(following, (db_key, raw, db_key, PAGE))


def keys_by_rowid(store: "Store", disk: "Disk", ascending: bool) -> Iterator[Any]:
    """Keys in insertion order (or its reverse), expired ones included."""
    ((max_rowid,),) = store.read(sql.MAX_ROWID)
    if max_rowid is None:
        return
    low, high = 0, max_rowid + 1
    while True:
        rows = store.read(sql.ROWS_ASC if ascending else sql.ROWS_DESC, (low, high, PAGE))
        if not rows:
            return
        for _, db_key, raw in rows:
            yield disk.get(db_key, raw)
        if ascending:
            low = rows[-1][0]
        else:
            high = rows[-1][0]
