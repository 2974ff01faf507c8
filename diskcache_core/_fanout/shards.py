"""The shards of a FanoutCache: opening each one with its share of the settings, and their
memory tiers seen as one.

Each shard is a Cache in a subdirectory (``000``, ``001``, ...) that must not be a link. It gets
an even share of ``size_limit`` (an existing shard keeps its stored share unless the caller gives
one) and of the memory tier's bounds, and refuses an item larger than its share (the share rule:
a Cache would store the item and evict it at its next size check, a silent loss).
"""

from __future__ import annotations

import functools
import os.path as op
from typing import Any

from .._store import schema as sql
from .._cache.cache import Cache
from .._cache.serializer import ItemTooLargeError, Role, check_share
from .._disk.directories import open_subdirectory
from .._disk.disk import Disk
from .layout import guard_shard, shard_name
from .._memory.tier import MemoryStats
from .._settings import DEFAULT_SETTINGS, REMOTE_DEFAULTS, validate_settings

__all__ = [
    "ItemTooLargeError", "ShardMemoryTiers", "check_share", "memory_shares", "open_shards",
    "split_evenly",
]


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


def open_shards(
    directory: str,
    count: int,
    timeout: float,
    disk: type[Disk],
    checked: dict[str, Any],
    total: int | None,
    memory_limits: dict[str, int],
    layout: str,
) -> tuple[Cache, ...]:
    """Open `count` shards under `directory` with the validated settings `checked`.

    `total` is the size limit the caller gave (None: each existing shard keeps its own);
    `memory_limits` are the memory tier's bounds for all shards together; `layout` the
    directory's (a shard's connections check its directory: `guard_shard`). Each shard refuses
    an item larger than its share (`Role.within_size_limit`, checked as the item is serialized).
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
        guard = functools.partial(guard_shard, directory, count, layout, number)
        role = Role(guard=guard, within_size_limit=True)
        shards.append(
            Cache(path, timeout=timeout, disk=disk, _role=role, **remote, **shard_settings)
        )
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
