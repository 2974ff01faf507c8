"""The write path's serialization of one cache: the Disk's ``store``, and the cache's maximum item
size.

A Cache whose owner needs every item it takes to stay (a FanoutCache's shard: its size limit is
a share of the whole, and an item larger than that would be stored and then evicted at the next
size check, a silent loss) is made with ``Role(within_size_limit=True)``; it refuses such an item
with `ItemTooLargeError` as the item is serialized: that is where its stored size (a pickle's,
a stream's) is first known, before anything is written to the database. A value file written
for it is removed. The check is the cache's own, on its write path: the Disk is the user's,
untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from .._disk.disk import UNKNOWN, Disk
from .._store.store import Store

__all__ = ["ItemTooLargeError", "Role", "Serializer", "check_share", "serializer"]


class ItemTooLargeError(ValueError):
    """An item larger than its shard's share of ``size_limit`` (the share rule): refused before
    anything is stored. A ValueError; the Django backend turns it into a set that stores
    nothing, as Django's backends treat a value too large to cache."""


def check_share(size: int, limit: int) -> None:
    """The shard size rule: an item of `size` bytes must fit its shard's `limit`, else
    ValueError (a shard holds ``size_limit / shards``, and would evict a larger item at once)."""
    if size > limit:
        raise ItemTooLargeError(
            f"item of {size} bytes exceeds its shard's size limit of {limit} bytes "
            "(FanoutCache splits size_limit evenly over its shards)"
        )


class Role(NamedTuple):
    """What the owner of a Cache object fixes when it makes it (a FanoutCache for its shards,
    the CLI for the caches it inspects); never stored, and not part of the public API."""

    #: Before each connection opens: checks the cache's directory (a shard's must not be a link).
    guard: Callable[[], None] | None = None
    #: Refuse an item larger than the cache's size limit (`ItemTooLargeError`).
    within_size_limit: bool = False
    #: Make the directory and database anew where they were removed while open (else an error).
    recreate: bool = True


Serializer = Callable[..., tuple[int, int, str | None, Any]]


def serializer(store: Store, disk: Disk, limit: Callable[[], int] | None) -> Serializer:
    """``Disk.store`` for one cache's writes (see the module docstring): a plain function (a
    set calls it; an instance's ``__call__`` costs more). `limit`: the cache's size limit now
    (None: items of any size are taken)."""
    def serialize(value: Any, read: bool, key: Any = UNKNOWN) -> tuple[int, int, str | None, Any]:
        """``disk.store(value, read, key=key)``; where the cache directory was removed while
        open (no value file can be made), once more after the store made it anew (not for a
        stream: it is not read twice). Then the size rule, where the cache has one."""
        try:
            stored = disk.store(value, read, key=key)
        except FileNotFoundError:
            if read or not store.follow_removed_directory():
                raise
            stored = disk.store(value, read, key=key)
        if limit is not None:
            size, _, filename, db_value = stored
            if not size and type(db_value) in (bytes, str):
                size = len(db_value)
            try:
                check_share(size, limit())
            except ItemTooLargeError:
                if filename is not None:
                    disk.remove(filename)
                raise
        return stored

    return serialize
