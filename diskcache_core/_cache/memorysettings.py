"""A cache's memory tier settings: its bounds in this process (never stored), and its statistics.

The memory tier (_memory/tier.py) is made, bounded anew or dropped here as the bounds change;
with a remote, the remote tier makes its own (validated by the remote's stamps: `RemoteItems`).
"""

from __future__ import annotations

from typing import Any

from .._disk.disk import Disk
from .._eviction.evictor import Evictor
from .._memory.tier import MemoryStats, MemoryTier
from .._settings import MEMORY_DEFAULTS, validate_setting
from .._store.store import Store

__all__ = ["MemorySettings"]


class MemorySettings:
    """The memory tier of one Cache object (a part of `CacheBase`, which provides the rest)."""

    _code_only: dict[str, Any]
    _store: Store
    _disk: Disk
    _evictor: Evictor
    _memory: MemoryTier | None
    _plain_keys: bool
    _native_numbers: bool

    def _memory_limits(self) -> tuple[int, int]:
        """The memory tier's (size, item) bounds this object was given (or the defaults)."""
        limits = {**MEMORY_DEFAULTS, **self._code_only}
        return int(limits["memory_size_limit"]), int(limits["memory_item_limit"])

    def _configure_memory(self) -> None:
        """Make, bound anew or drop the memory tier by the bounds in force (a cache with a
        remote has its remote tier make one: `RemoteItems`)."""
        size_limit, item_limit = self._memory_limits()
        words = self._store.words
        if not size_limit or not item_limit or words is None:
            # Off (or impossible: read-only media that another process may still change).
            if self._memory is not None:
                self._memory.set_limits(0, 0)  # empty, and keeping nothing, for a get under way
            self._memory = None
        elif self._memory is None:
            self._memory = MemoryTier(
                words, size_limit, item_limit, self._plain_keys, self._native_numbers,
                self._disk.put, self._disk.fetch, local=self._store.local, reads=self._evictor,
            )
        else:
            self._memory.set_limits(size_limit, item_limit)

    def _rebind_memory(self, words: memoryview) -> None:
        """The pool mapped the version words anew: the memory tier validates by these now."""
        if self._memory is not None:
            self._memory.rebind(words)

    @property
    def memory_size_limit(self) -> int:
        """Bytes this object's memory tier may hold in this process (0: the tier is off).

        Assigning it takes effect at once (entries beyond it are dropped); it is never stored.
        """
        return int({**MEMORY_DEFAULTS, **self._code_only}["memory_size_limit"])

    @memory_size_limit.setter
    def memory_size_limit(self, value: int) -> None:
        self._code_only["memory_size_limit"] = validate_setting("memory_size_limit", value)
        self._configure_memory()

    @property
    def memory_item_limit(self) -> int:
        """Items this object's memory tier may hold in this process (0: the tier is off)."""
        return int({**MEMORY_DEFAULTS, **self._code_only}["memory_item_limit"])

    @memory_item_limit.setter
    def memory_item_limit(self, value: int) -> None:
        self._code_only["memory_item_limit"] = validate_setting("memory_item_limit", value)
        self._configure_memory()

    def memory_stats(self, reset: bool = False) -> MemoryStats:
        """This process's memory tier of this cache: ``(hits, misses, items, size, size_limit,
        item_limit)``, a named tuple; with `reset`, zero the hit and miss counts afterwards.

        Memory hits also count as hits in `stats` (when statistics are on); `stats` keeps
        python-diskcache's ``(hits, misses)`` shape. All zeros while the tier is off.
        """
        memory = self._memory
        if memory is None:
            return MemoryStats(0, 0, 0, 0, 0, 0)
        return memory.stats(reset)
