"""The shards of a FanoutCache: opening each one with its share of the settings, and their
memory tiers and their keys seen as one.

Each shard is a Cache in a subdirectory (``000``, ``001``, ...) that must not be a link. It gets
an even share of ``size_limit`` (an existing shard keeps its stored share unless the caller gives
one) and of the memory tier's bounds, and refuses an item larger than its share (the share rule:
a Cache would store the item and evict it at its next size check, a silent loss).
"""

from __future__ import annotations

import os.path as op
import weakref
from typing import Any, Iterator

from .._store import schema as sql
from .._cache.cache import Cache
from .._disk.directories import open_subdirectory
from .._disk.disk import ENOVAL, UNKNOWN, Disk
from .layout import shard_name
from .._memory.tier import MemoryStats
from .._settings import DEFAULT_SETTINGS, REMOTE_DEFAULTS, validate_settings

__all__ = ["ItemTooLargeError", "ShardKeys", "ShardMemoryTiers", "check_share", "memory_shares", "open_shards",
           "split_evenly"]  # fmt: skip


class ItemTooLargeError(ValueError):
    """An item larger than its shard's share of ``size_limit`` (the share rule): refused before
    anything is stored. A ValueError; the Django backend turns it into a set that stores
    nothing, as Django's backends treat a value too large to cache."""



def split_evenly(total: int, shards: int) -> list[int]:
    """`total` bytes in `shards` near-equal shares that add up to it exactly."""
    share, extra = divmod(total, shards)
    return [share + (number < extra) for number in range(shards)]


def memory_shares(total: int, shards: int) -> list[int]:
    """A memory-tier bound split over shards; never 0 for a shard unless the total is 0 (which
    turns the tier off)."""
    if 0 < total < shards:
        return [1] * shards
    return split_evenly(total, shards)


def check_share(size: int, limit: int) -> None:
    """The shard size rule: an item of `size` bytes must fit its shard's `limit`, else
    ValueError (a shard holds ``size_limit / shards``, and would evict a larger item at once)."""
    if size > limit:
        raise ItemTooLargeError(
            f"item of {size} bytes exceeds its shard's size limit of {limit} bytes "
            "(FanoutCache splits size_limit evenly over its shards)"
        )


def _store_within_share(shard: Cache) -> None:
    """Make `shard` refuse an item larger than its size limit, with ValueError, as it is
    serialized: that is where its stored size (a pickle's, a stream's) is first known, before
    anything is written to the database; a value file written for it is removed.

    Done by wrapping ``store`` on the shard's own Disk object (Cache's public ``disk``), so the
    shard keeps the Disk type the user chose and no private part of Cache is involved.
    """
    disk = shard.disk
    store, remove = disk.store, disk.remove
    owner = weakref.ref(shard)  # the Disk belongs to the shard: no reference cycle

    def store_within_share(
        value: Any, read: bool, key: Any = UNKNOWN
    ) -> tuple[int, int, str | None, Any]:
        stored = store(value, read, key)
        size, _, filename, db_value = stored
        if not size and type(db_value) in (bytes, str):
            size = len(db_value)
        cache = owner()
        if cache is not None:
            try:
                check_share(size, cache.size_limit)
            except ValueError:
                if filename is not None:
                    remove(filename)
                raise
        return stored

    disk.store = store_within_share  # type: ignore[method-assign]


def open_shards(
    directory: str,
    count: int,
    timeout: float,
    disk: type[Disk],
    checked: dict[str, Any],
    total: int | None,
    memory_limits: dict[str, int],
) -> tuple[Cache, ...]:
    """Open `count` shards under `directory` with the validated settings `checked`.

    `total` is the size limit the caller gave (None: each existing shard keeps its own);
    `memory_limits` are the memory tier's bounds for all shards together.
    """
    shares = split_evenly(DEFAULT_SETTINGS["size_limit"] if total is None else total, count)
    memory = {name: memory_shares(value, count) for name, value in memory_limits.items()}
    # Every subdirectory first (none of them a planted link): with a remote, the listener
    # elected in `directory` serves them all, and may start as the first shard opens.
    paths = [open_subdirectory(directory, shard_name(number)) for number in range(count)]
    remote: dict[str, Any] = {}
    if checked.get("remote") is not None:  # each shard its own names, one listener for all
        prefix = checked.get("remote_prefix", REMOTE_DEFAULTS["remote_prefix"])
        prefixes = [f"{prefix}{number}/" for number in range(count)]
        remote["remote_group"] = (directory, tuple(zip(paths, prefixes)))
    shards = []
    for number, path in enumerate(paths):
        shard_settings = dict(checked)
        shard_settings.update((name, split[number]) for name, split in memory.items())
        if total is not None or not op.exists(op.join(path, sql.DBNAME)):
            shard_settings["size_limit"] = shares[number]
        if remote:
            shard_settings["remote_prefix"] = prefixes[number]
        shard = Cache(path, timeout=timeout, disk=disk, **remote, **shard_settings)
        _store_within_share(shard)
        shards.append(shard)
    return tuple(shards)


class ShardMemoryTiers:
    """The shards' memory tiers in this process, as one: limits split across them (each shard
    takes its share), statistics summed."""

    _shards: tuple[Cache, ...]
    _count: int

    @property
    def memory_size_limit(self) -> int:
        """Bytes the shards' memory tiers may hold in this process, in total (0: off)."""
        return sum(shard.memory_size_limit for shard in self._shards)

    @memory_size_limit.setter
    def memory_size_limit(self, value: int) -> None:
        self._split_memory_limit("memory_size_limit", value)

    @property
    def memory_item_limit(self) -> int:
        """Items the shards' memory tiers may hold in this process, in total (0: off)."""
        return sum(shard.memory_item_limit for shard in self._shards)

    @memory_item_limit.setter
    def memory_item_limit(self, value: int) -> None:
        self._split_memory_limit("memory_item_limit", value)

    def _split_memory_limit(self, name: str, value: int) -> None:
        shares = memory_shares(validate_settings({name: value})[name], self._count)
        for shard, share in zip(self._shards, shares):
            setattr(shard, name, share)

    def memory_stats(self, reset: bool = False) -> MemoryStats:
        """The shards' memory tiers in this process, summed (see ``Cache.memory_stats``)."""
        totals = [0] * len(MemoryStats._fields)
        for shard in self._shards:
            for position, number in enumerate(shard.memory_stats(reset)):
                totals[position] += number
        return MemoryStats(*totals)


class ShardKeys:
    """A FanoutCache's keys, shard by shard (a base class of FanoutCache)."""

    _shards: tuple[Cache, ...]

    def iterkeys(self, reverse: bool = False, *, tag: Any = ENOVAL) -> Iterator[Any]:
        """Iterate keys shard by shard, each shard's in `Cache.iterkeys` order: key order, or
        with `tag` the keys carrying it (``tag=None``: with no tag) in insertion order."""
        for shard in reversed(self._shards) if reverse else self._shards:
            yield from shard.iterkeys(reverse, tag=tag)

    def __iter__(self) -> Iterator[Any]:
        """Iterate keys shard by shard (insertion order within a shard)."""
        for shard in self._shards:
            yield from shard

    def __reversed__(self) -> Iterator[Any]:
        """Iterate keys in the reverse of `__iter__`'s order."""
        for shard in reversed(self._shards):
            yield from reversed(shard)

    def __len__(self) -> int:
        """Count of items in every shard, expired items included."""
        return sum(len(shard) for shard in self._shards)
