"""Iterating a cache's keys, a page of rows per query (no read transaction stays open between
pages, so writers are never held up): in key order (`keys_in_order`), in insertion order
(`keys_by_rowid`), and the keys of one tag in insertion order (`tagged_keys`), which reads the
tag index (``tag_index``) where there is one. Expired items are included; no value is read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from .._store import schema as sql
from .._arguments import INT64_MAX, check_tag
from .._disk.disk import ENOVAL, Disk
from .._store.store import Store

if TYPE_CHECKING:
    from .._remote.tier import RemoteTier
    from .tags import ItemTags

__all__ = ["KeyIteration", "keys_by_rowid", "keys_in_order", "tagged_keys"]

PAGE = 100  # keys per query


def keys_in_order(store: Store, disk: Disk, reverse: bool) -> Iterator[Any]:
    """The keys in database sort order (by type, then value)."""
    first, following = sql.KEYS_DESC if reverse else sql.KEYS_ASC
    rows = store.read(first)
    while rows:
        for db_key, raw in rows:
            yield disk.get(db_key, raw)
        db_key, raw = rows[-1]
        rows = store.read(following, (db_key, raw, db_key, PAGE))


def tagged_keys(store: Store, disk: Disk, tag: Any, reverse: bool) -> Iterator[Any]:
    """The keys stored with `tag` (a checked tag; None: with none) in insertion order."""
    statement = (sql.UNTAGGED_KEYS if tag is None else sql.TAGGED_KEYS)[reverse]
    last = INT64_MAX if reverse else 0
    while True:
        rows = store.read(statement, (tag, last, PAGE))
        for _, db_key, raw in rows:
            yield disk.get(db_key, raw)
        if len(rows) < PAGE:
            return
        last = rows[-1][0]


def keys_by_rowid(store: Store, disk: Disk, ascending: bool) -> Iterator[Any]:
    """The keys in insertion order (rowid order), or its reverse; rows added meanwhile after
    the highest rowid at the start are not met."""
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


class KeyIteration:
    """Cache's iteration methods: a base class of Cache, over the parts CacheBase composes."""

    _store: Store
    _disk: Disk
    _remote: RemoteTier | None  # iteration is not offered over a remote's items
    _tags: ItemTags

    def iterkeys(self, reverse: bool = False, *, tag: Any = ENOVAL) -> Iterator[Any]:
        """Iterate keys in database sort order (by type, then value), expired ones included.

        With `tag`, only the keys carrying that tag among their tags (``tag=None``: with none),
        in insertion order, read through the tag table's index and the tag index where there is
        one (``tag_index``); no value is read.
        """
        if self._remote is not None:
            self._remote.unsupported("iterkeys()")
        if tag is ENOVAL:
            return keys_in_order(self._store, self._disk, reverse)
        tag = check_tag(tag)
        if tag is not None and self._tags.table():  # some item has extra tags
            return self._tags.keys(tag, reverse)
        return tagged_keys(self._store, self._disk, tag, reverse)

    def __iter__(self) -> Iterator[Any]:
        """Iterate keys in insertion order, expired items included."""
        if self._remote is not None:
            self._remote.unsupported("iteration")
        return keys_by_rowid(self._store, self._disk, ascending=True)

    def __reversed__(self) -> Iterator[Any]:
        """Iterate keys in reverse insertion order, expired items included."""
        if self._remote is not None:
            self._remote.unsupported("iteration")
        return keys_by_rowid(self._store, self._disk, ascending=False)
